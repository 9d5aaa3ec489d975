package main

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/deadletter"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// mendable is an agent whose Data method "mendable" fails with a retryable error until mended.
type mendable struct {
	mended atomic.Bool
	runs   atomic.Int32
}

func (m *mendable) agent(name string) *agent.Agent {
	a := agent.New(name)
	agent.Method(a, "mendable", func(context.Context, struct{}) (map[string]bool, error) {
		if !m.mended.Load() {
			return nil, agent.Retryable(errors.New("not mended yet"))
		}
		m.runs.Add(1)
		return map[string]bool{"mended": true}, nil
	})
	return a
}

var deadLetterID = regexp.MustCompile(`dead letter (\d+)`)

// deadLetterVia runs a converse call whose handler fails on every attempt, and returns the id
// of the dead letter its error names.
func (h *harness) deadLetterVia(workflow string) string {
	h.t.Helper()
	r := h.fails(500, h.st.Key, "converse", "--workflow", workflow, "--type", "Data", "--text", "mendable")
	m := deadLetterID.FindStringSubmatch(r.stderr)
	require.NotNil(h.t, m, "the error does not name the dead letter: %s", r.stderr)
	return m[1]
}

// TestCLIDeadLetters lists, shows, replays and discards the dead letters of requests whose
// handler failed every attempt, in order on one stack, and checks who may.
func TestCLIDeadLetters(t *testing.T) {
	d := startDeadLetters(t)
	t.Run("list", d.testList)
	t.Run("show", d.testShow)
	t.Run("replay", d.testReplay)
	t.Run("discard", d.testDiscard)
	t.Run("refusals", d.testRefusals)
	t.Run("no key printed", func(t *testing.T) { d.h.checkNoKeyPrinted(t, 0) })
}

// deadLetters is a stack with three dead letters, first and third of the agent Flaky and second
// of the agent Broken, as TestCLIDeadLetters's subtests share it.
type deadLetters struct {
	h                    *harness
	flaky                *mendable
	first, second, third string
}

// startDeadLetters starts a stack with the agents Flaky and Broken, whose Data method mendable
// fails on every attempt, and Echo, and makes three dead letters.
func startDeadLetters(t *testing.T) *deadLetters {
	flaky, broken := &mendable{}, &mendable{}
	st := stacktest.Start(t, stacktest.Options{
		AdminKey: adminKey,
		Agents:   []*agent.Agent{flaky.agent("Flaky"), broken.agent("Broken"), echo.New()},
		Host:     agent.HostConfig{MaxDeliveries: 2},
	})
	for _, name := range []string{"Flaky", "Broken"} {
		require.NoError(t, st.WaitLive(context.Background(), name))
	}
	h := &harness{t: t, st: st, secrets: []string{adminKey, st.Key, st.OtherKey}}
	d := &deadLetters{h: h, flaky: flaky}
	d.first = h.deadLetterVia("default:Flaky:Supervisor Workflow:first")
	d.second = h.deadLetterVia("Broken")
	d.third = h.deadLetterVia("default:Flaky:Supervisor Workflow:third")
	return d
}

// testList lists the dead letters: all of them, one agent's, by pages, and as JSON.
func (d *deadLetters) testList(t *testing.T) {
	h, first, second, third := d.h, d.first, d.second, d.third
	h.t = t
	r := h.ok(h.st.Key, "deadletter", "list")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 4, "a header and three rows:\n%s", r.stdout)
	assert.Equal(t, []string{"ID", "DEAD", "AGENT", "WORKFLOW", "PARTICIPANT", "TYPE", "ATTEMPTS", "ERROR"}, strings.Fields(lines[0]))
	for i, id := range []string{first, second, third} {
		assert.True(t, strings.HasPrefix(lines[i+1], id+" "), "row %d %q is not dead letter %s", i+1, lines[i+1], id)
		assert.Contains(t, lines[i+1], " Data/mendable ")
		assert.Contains(t, lines[i+1], " 2 ", "attempts")
		assert.Contains(t, lines[i+1], "not mended yet")
	}
	assert.Contains(t, lines[1], "default:Flaky:Supervisor Workflow:first")
	assert.Empty(t, r.stderr)

	r = h.ok(h.st.Key, "deadletter", "list", "--agent", "Broken")
	lines = strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2, r.stdout)
	assert.True(t, strings.HasPrefix(lines[1], second+" "), lines[1])

	// Pages: the next page's command is printed on stderr.
	r = h.ok(h.st.Key, "deadletter", "list", "--limit", "1")
	lines = strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2, r.stdout)
	assert.True(t, strings.HasPrefix(lines[1], first+" "), lines[1])
	assert.Equal(t, "more: agentbus deadletter list --after "+first+"\n", r.stderr)
	r = h.ok(h.st.Key, "deadletter", "list", "--after", first, "--limit", "1")
	assert.True(t, strings.HasPrefix(strings.Split(r.stdout, "\n")[1], second+" "), r.stdout)

	d.checkListJSON(t)
	h.fails(400, h.st.Key, "deadletter", "list", "--limit", "500")
}

// checkListJSON checks the dead letters of the agent Flaky as deadletter list -json prints them.
func (d *deadLetters) checkListJSON(t *testing.T) {
	t.Helper()
	r := d.h.ok(d.h.st.Key, "-json", "deadletter", "list", "--agent", "Flaky")
	var ans deadletter.Page
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &ans), r.stdout)
	require.Len(t, ans.DeadLetters, 2)
	assert.Equal(t, d.first, strconv.FormatUint(ans.DeadLetters[0].ID, 10))
	assert.Equal(t, d.third, strconv.FormatUint(ans.DeadLetters[1].ID, 10))
	assert.Equal(t, "Flaky", ans.DeadLetters[0].AgentName)
}

// testShow shows a dead letter, as text and as JSON, and refuses ids that are none.
func (d *deadLetters) testShow(t *testing.T) {
	h, second := d.h, d.second
	h.t = t
	r := h.ok(h.st.Key, "deadletter", "show", second)
	for _, want := range []string{"id:", second, "agent:", "Broken", "workflow:", "default:Broken:Supervisor Workflow:default",
		"type:", "Data", "method:", "mendable", "attempts:", "error:", "not mended yet", "request:"} {
		assert.Contains(t, r.stdout, want)
	}
	r = h.ok(adminKey, "-json", "deadletter", "show", second)
	var l deadletter.Letter
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &l), r.stdout)
	assert.Equal(t, second, strconv.FormatUint(l.ID, 10))
	assert.Equal(t, 2, l.Attempts)

	h.fails(400, h.st.Key, "deadletter", "show", "abc")
	h.fails(404, h.st.Key, "deadletter", "show", "999999")
}

// testReplay mends Flaky and replays the first dead letter, which then runs and is gone.
func (d *deadLetters) testReplay(t *testing.T) {
	h, first, flaky := d.h, d.first, d.flaky
	h.t = t
	flaky.mended.Store(true)
	r := h.ok(h.st.Key, "deadletter", "replay", first)
	assert.Regexp(t, `^dead letter `+first+` replayed: request \S+ to default:Flaky:Supervisor Workflow:first\n$`, r.stdout)
	require.Eventually(t, func() bool { return flaky.runs.Load() == 1 }, 10*time.Second, 10*time.Millisecond, "the replayed request did not run")
	h.fails(404, h.st.Key, "deadletter", "show", first)
	h.fails(404, h.st.Key, "deadletter", "replay", first)
}

// testDiscard discards the third dead letter, which is then gone without having run.
func (d *deadLetters) testDiscard(t *testing.T) {
	h, second, third := d.h, d.second, d.third
	h.t = t
	r := h.ok(h.st.Key, "deadletter", "discard", third)
	assert.Equal(t, "dead letter "+third+" discarded\n", r.stdout)
	h.fails(404, h.st.Key, "deadletter", "discard", third)
	r = h.ok(h.st.Key, "deadletter", "list")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2, r.stdout)
	assert.True(t, strings.HasPrefix(lines[1], second+" "), lines[1])
	assert.Equal(t, int32(1), d.flaky.runs.Load(), "the discarded request ran")
}

// testRefusals checks that a user key, another tenant's key and a wrong tenant get no dead
// letters, and that the commands given wrongly print the usage.
func (d *deadLetters) testRefusals(t *testing.T) {
	h, second := d.h, d.second
	h.t = t
	user, _ := h.newKey("dead letters", "user")
	h.fails(403, user, "deadletter", "list")
	h.fails(403, h.st.OtherKey, "deadletter", "list")
	h.fails(403, h.st.Key, "-tenant", "other", "deadletter", "show", second)
	// A system admin naming the wrong tenant does not find it.
	h.fails(404, adminKey, "-tenant", "other", "deadletter", "show", second)
	h.fails(404, adminKey, "-tenant", "nobody", "deadletter", "list")
	for _, args := range [][]string{{"deadletter"}, {"deadletter", "frob"}, {"deadletter", "show"}, {"deadletter", "replay", "1", "2"}, {"deadletter", "list", "x"}} {
		r := h.cmd(h.st.Key, false, args...)
		assert.ErrorAs(t, r.err, new(usageError), "agentbus %q", args)
		assert.Contains(t, r.stderr, "usage: agentbus", "agentbus %q", args)
	}
}
