package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/remote"
	"github.com/agentbus/agentbus/pkg/remote/remotetest"
)

// agents is a stack and a remote agent's endpoint, as TestCLIAgents's subtests share them.
type agents struct {
	h  *harness
	ep *remotetest.Endpoint
	// file is the endpoint's registration as a kit's Echo prints it, under the name Remo.
	file string
}

// TestCLIAgents registers remote agents from a file, from stdin and from flags, lists, gets,
// replaces and removes them, as a tenant admin and as a system admin, checks that another
// tenant's key cannot touch them, and checks endpoints against the protocol, in order on one
// stack.
func TestCLIAgents(t *testing.T) {
	a := &agents{h: newHarness(t), ep: remotetest.New(t, remotetest.Faults{})}
	a.file = writeRegistration(t, a.ep, "Remo")
	t.Run("register", a.testRegister)
	t.Run("list", a.testList)
	t.Run("get", a.testGet)
	t.Run("replace", a.testReplace)
	t.Run("other tenant", a.testOtherTenant)
	t.Run("global", a.testGlobal)
	t.Run("remove", a.testRemove)
	t.Run("check", a.testCheck)
	t.Run("check fails", a.testCheckFails)
	t.Run("usage", a.testUsage)
	t.Run("no key printed", func(t *testing.T) { a.h.checkNoKeyPrinted(t, 20) })
}

// writeRegistration writes the endpoint's registration under name to a file, as the kits'
// Echos print theirs, and returns its path.
func writeRegistration(t *testing.T, ep *remotetest.Endpoint, name string) string {
	reg := ep.Registration(name)
	body := map[string]any{
		"name": reg.Name, "url": reg.URL, "chat": reg.Chat, "file": reg.File, "webhooks": reg.Webhooks,
		"methods": reg.Methods, "workflowTypes": []string{"Supervisor Workflow"}, "secret": reg.Secret,
	}
	b, err := json.MarshalIndent(body, "", "  ")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), name+".json")
	require.NoError(t, os.WriteFile(path, b, 0o600))
	return path
}

// cmdIn runs the CLI with stdin.
func (h *harness) cmdIn(key, stdin string, args ...string) result {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr natstest.LogBuffer
	env := map[string]string{"AGENTBUS_URL": h.st.URL, "AGENTBUS_KEY": key}
	err := runIn(ctx, args, func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	}, strings.NewReader(stdin), &stdout, &stderr)
	r := result{stdout: stdout.String(), stderr: stderr.String(), err: err}
	h.record(r.stdout)
	h.record(r.stderr)
	return r
}

// testRegister registers Remo from its file, and Remo2 from stdin with flags over it; Remo is
// then served.
func (a *agents) testRegister(t *testing.T) {
	h := a.h
	h.t = t
	r := h.ok(h.st.Key, "agent", "register", "-f", a.file)
	assert.Equal(t, a.ep.Secret+"\n", r.stdout, "register prints the secret alone")
	assert.Contains(t, r.stderr, "agent Remo registered, an agent of tenant default: "+a.ep.URL+"/agentbus.")
	assert.NotContains(t, r.stderr, "shown only this once", "the secret was given: no warning")

	require.NoError(t, h.st.WaitLive(t.Context(), "Remo"))
	r = h.ok(h.st.Key, "converse", "--workflow", "Remo", "--type", "Data", "--text", "count")
	assert.Contains(t, r.stdout, `{"count":1}`, "converse with the registered agent")

	// From stdin, with flags over the file's fields; agentbus makes the secret.
	r = h.cmdIn(h.st.Key, `{"name":"Ignored","url":"`+a.ep.URL+`/two","methods":[{"name":"sum"}],"createdAt":"2026-01-01T00:00:00Z"}`,
		"agent", "register", "Remo2", "-f", "-", "--chat", "--timeout", "10")
	require.NoError(t, r.err, r.stderr)
	secret := strings.TrimSpace(r.stdout)
	assert.True(t, strings.HasPrefix(secret, "whsec_"), "register printed %q, want the new secret alone", r.stdout)
	assert.NotContains(t, secret, "\n")
	assert.Contains(t, r.stderr, "agent Remo2 registered")
	assert.Contains(t, r.stderr, "shown only this once")

	r = h.fails(http.StatusConflict, h.st.Key, "agent", "register", "-f", a.file)
	assert.Contains(t, r.stderr, "an agent of this name exists")
	h.fails(http.StatusConflict, h.st.Key, "agent", "register", "Echo", "--endpoint", a.ep.URL, "--chat")
	r = h.fails(http.StatusUnprocessableEntity, h.st.Key, "agent", "register", "Outside", "--endpoint", "https://agents.example.com/x", "--chat")
	assert.Contains(t, r.stderr, "allow-list")
	r = h.fails(http.StatusBadRequest, h.st.Key, "agent", "register", "Nothing", "--endpoint", a.ep.URL)
	assert.Contains(t, r.stderr, "the agent takes nothing")
}

// testList lists the tenant's agents as a table and as JSON.
func (a *agents) testList(t *testing.T) {
	h := a.h
	h.t = t
	r := h.ok(h.st.Key, "agent", "list")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 3, "a header and two rows:\n%s", r.stdout)
	assert.Equal(t, []string{"NAME", "URL", "METHODS", "CHAT", "FILE", "TENANTS"}, strings.Fields(lines[0]))
	assert.Regexp(t, `^Remo\s+`+a.ep.URL+`/agentbus\s+count,sum; webhooks: echo\s+yes\s+yes\s+default$`, lines[1])
	assert.Regexp(t, `^Remo2\s+`+a.ep.URL+`/two\s+sum\s+yes\s+no\s+default$`, lines[2])

	for _, flag := range []string{"-json", "-o=json"} {
		r = h.ok(h.st.Key, flag, "agent", "ls")
		var ans struct {
			Agents []map[string]any `json:"agents"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &ans), "agent list %s printed %q", flag, r.stdout)
		require.Len(t, ans.Agents, 2)
		assert.Equal(t, "Remo", ans.Agents[0]["name"])
		assert.EqualValues(t, 10, ans.Agents[1]["timeoutSeconds"])
		for _, ag := range ans.Agents {
			assert.NotContains(t, ag, "secret", "agent list %s", flag)
		}
	}
	r = h.ok(h.st.Key, "agent", "list", "-o", "json")
	assert.Equal(t, 1, strings.Count(r.stdout, "\n"), "-o json after the subcommand: %q", r.stdout)
}

// testGet shows a registration as indented JSON without its secret, and as one line.
func (a *agents) testGet(t *testing.T) {
	h := a.h
	h.t = t
	r := h.ok(h.st.Key, "agent", "get", "Remo")
	assert.True(t, strings.HasPrefix(r.stdout, "{\n  \"name\": \"Remo\","), "agent get printed %q", r.stdout)
	var reg map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &reg), r.stdout)
	assert.NotContains(t, reg, "secret")
	assert.NotContains(t, r.stdout, a.ep.Secret)
	assert.Equal(t, "default", reg["owner"])
	assert.Equal(t, []any{"default"}, reg["tenants"])
	assert.EqualValues(t, 30, reg["timeoutSeconds"])
	methods, _ := reg["methods"].([]any)
	require.Len(t, methods, 2)
	assert.Contains(t, methods[1], "schema", "the file's schema was registered")

	r = h.ok(h.st.Key, "-o", "json", "agent", "show", "Remo")
	assert.Equal(t, 1, strings.Count(r.stdout, "\n"), "-o json prints one line: %q", r.stdout)
	h.fails(http.StatusNotFound, h.st.Key, "agent", "get", "Nobody")
}

// testReplace edits what get printed and gives it back: the fields change, the secret stays.
func (a *agents) testReplace(t *testing.T) {
	h := a.h
	h.t = t
	got := h.ok(h.st.Key, "agent", "get", "Remo").stdout
	path := filepath.Join(t.TempDir(), "got.json")
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(got, `"timeoutSeconds": 30`, `"timeoutSeconds": 20`, 1)), 0o600))
	r := h.ok(h.st.Key, "agent", "replace", "Remo", "-f", path, "--max-concurrent", "4")
	assert.Equal(t, "agent Remo replaced, an agent of tenant default: "+a.ep.URL+"/agentbus\n", r.stdout)
	assert.NotContains(t, r.stdout+r.stderr, a.ep.Secret, "replace does not print the secret")

	var reg map[string]any
	require.NoError(t, json.Unmarshal([]byte(h.ok(h.st.Key, "agent", "get", "Remo").stdout), &reg))
	assert.EqualValues(t, 20, reg["timeoutSeconds"])
	assert.EqualValues(t, 4, reg["maxConcurrent"])
	// The secret was kept: the replaced registration's requests are still signed with it.
	require.Eventually(t, func() bool {
		r := h.cmd(h.st.Key, false, "converse", "--workflow", "Remo", "--type", "Data", "--text", "count", "--participant", "after-replace")
		return r.err == nil && strings.Contains(r.stdout, `{"count":`)
	}, 10*time.Second, 100*time.Millisecond, "the replaced agent answers")

	r = h.fails(http.StatusBadRequest, h.st.Key, "agent", "replace", "Remo2", "-f", a.file)
	assert.Contains(t, r.stderr, "name differs from the path's")
	h.fails(http.StatusNotFound, h.st.Key, "agent", "replace", "Nobody", "--endpoint", a.ep.URL, "--chat")
}

// testOtherTenant: a tenant admin of another tenant can neither see nor change the tenant's
// agents, nor take their names, nor reach the global routes.
func (a *agents) testOtherTenant(t *testing.T) {
	h := a.h
	h.t = t
	other := h.st.OtherKey
	for _, args := range [][]string{{"agent", "list"}, {"agent", "get", "Remo"}, {"agent", "remove", "Remo"}, {"agent", "replace", "Remo", "-f", a.file}} {
		h.fails(http.StatusForbidden, other, args...)
	}
	for _, args := range [][]string{{"agent", "get", "Remo"}, {"agent", "remove", "Remo"}, {"agent", "replace", "Remo", "-f", a.file}} {
		h.fails(http.StatusNotFound, other, append([]string{"-tenant", "other"}, args...)...)
	}
	r := h.ok(other, "-tenant", "other", "agent", "list")
	assert.Equal(t, []string{"NAME", "URL", "METHODS", "CHAT", "FILE", "TENANTS"}, strings.Fields(r.stdout), "another tenant lists none")
	h.fails(http.StatusConflict, other, "-tenant", "other", "agent", "register", "-f", a.file)
	for _, args := range [][]string{{"agent", "list", "--global"}, {"agent", "get", "Remo", "--global"}} {
		h.fails(http.StatusForbidden, other, args...)
		h.fails(http.StatusForbidden, h.st.Key, args...)
	}
	// Remo is untouched.
	h.ok(h.st.Key, "agent", "get", "Remo")
}

// testGlobal: a system admin registers, lists and removes a global agent.
func (a *agents) testGlobal(t *testing.T) {
	h := a.h
	h.t = t
	r := h.ok(adminKey, "agent", "register", "Glob", "--global", "--endpoint", a.ep.URL+"/glob", "--method", "sum,count", "--tenants", "default,other")
	assert.Contains(t, r.stderr, "agent Glob registered, a global agent of tenants default, other: ")
	assert.True(t, strings.HasPrefix(r.stdout, "whsec_"), r.stdout)

	r = h.ok(adminKey, "agent", "list", "--global")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 4, "every registration:\n%s", r.stdout)
	assert.Regexp(t, `^Glob\s+\S+/glob\s+sum,count\s+no\s+no\s+default,other$`, lines[1])
	r = h.ok(adminKey, "agent", "get", "Glob", "--global")
	assert.NotContains(t, r.stdout, `"owner"`, "a global agent has no owner")
	// The tenant's routes do not show a global agent.
	h.fails(http.StatusNotFound, h.st.Key, "agent", "get", "Glob")
	r = h.ok(adminKey, "agent", "remove", "--global", "Glob")
	assert.Equal(t, "agent Glob removed; the hosts stop serving it within seconds\n", r.stdout)
	h.fails(http.StatusNotFound, adminKey, "agent", "get", "--global", "Glob")
}

// testRemove removes Remo2; it is then gone.
func (a *agents) testRemove(t *testing.T) {
	h := a.h
	h.t = t
	r := h.ok(h.st.Key, "agent", "remove", "Remo2")
	assert.Equal(t, "agent Remo2 removed; the hosts stop serving it within seconds\n", r.stdout)
	h.fails(http.StatusNotFound, h.st.Key, "agent", "get", "Remo2")
	h.fails(http.StatusNotFound, h.st.Key, "agent", "rm", "Remo2")
	r = h.ok(h.st.Key, "-json", "agent", "rm", "Remo")
	assert.Empty(t, r.stdout)
	assert.JSONEq(t, `{"agents":[]}`, h.ok(h.st.Key, "-json", "agent", "list").stdout)
}

// checkLine is a line of agent check's output for a case.
func checkLine(t *testing.T, stdout, verdict, name string) string {
	t.Helper()
	for _, line := range strings.Split(stdout, "\n") {
		if strings.HasPrefix(line, verdict+"  "+name) {
			return line
		}
	}
	assert.Fail(t, "no line for the case", "%s %s in:\n%s", verdict, name, stdout)
	return ""
}

// testCheck checks the endpoint from its registration file, and from flags under the other
// spelling: every case passes. It needs no key.
func (a *agents) testCheck(t *testing.T) {
	h := a.h
	h.t = t
	r := h.ok("", "agent", "check", "-f", a.file)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 16, r.stdout)
	for _, line := range lines {
		assert.True(t, strings.HasPrefix(line, "PASS  "), "a case failed: %s", line)
	}
	for _, name := range []string{remote.CaseUnsigned, remote.CaseOrder, remote.CaseStateConflict, remote.CaseRetry, remote.CaseWebhookAnswers, "Data count answered", "webhook echo answered"} {
		checkLine(t, r.stdout, "PASS", name)
	}
	assert.Contains(t, checkLine(t, r.stdout, "PASS", remote.CaseOrder), "the state changed 3 times")
	assert.Equal(t, a.ep.URL+"/agentbus: 16 passed, 0 failed, 0 skipped\n", r.stderr)

	requests := a.ep.Requests()
	r = h.ok("", "agent-check", a.ep.URL+"/agentbus", "--secret", a.ep.Secret, "--method", "count")
	assert.Greater(t, a.ep.Requests(), requests, "the endpoint was called")
	assert.Contains(t, checkLine(t, r.stdout, "SKIP", remote.CaseChat), "skipped: the registration takes no Chat messages")
	checkLine(t, r.stdout, "SKIP", remote.CaseWebhookAnswers)
	checkLine(t, r.stdout, "PASS", remote.CaseStateConflict)
	assert.Contains(t, r.stderr, ": 10 passed, 0 failed, 4 skipped")

	// add needs parameters: --example gives them, and the state cases run on it; sent {}, it
	// fails.
	r = h.ok("", "agent-check", a.ep.URL+"/agentbus", "--secret", a.ep.Secret, "--method", "add", "--example", `add={"n": 2}`, "--example", `ADD={"n":3}`)
	assert.Contains(t, checkLine(t, r.stdout, "PASS", "Data add answered"), `answer; sent {"n":2} (the first of its 2 examples)`)
	assert.Contains(t, checkLine(t, r.stdout, "PASS", remote.CaseStateConflict), "Data add: answered from the fresher state")
	r = h.cmd("", false, "agent-check", a.ep.URL+"/agentbus", "--secret", a.ep.Secret, "--method", "add")
	require.ErrorAs(t, r.err, new(errCheckFailed), "stdout %s\nstderr %s", r.stdout, r.stderr)
	assert.Contains(t, checkLine(t, r.stdout, "FAIL", "Data add answered"), "answered 422, want 200; sent {} (no schema, no examples)")

	// From stdin, as JSON.
	raw, err := os.ReadFile(a.file)
	require.NoError(t, err)
	r = h.cmdIn("", string(raw), "-o", "json", "agent", "check", "-f", "-")
	require.NoError(t, r.err, r.stderr)
	var results []remote.CheckResult
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &results), r.stdout)
	require.Len(t, results, 16)
	for _, res := range results {
		assert.True(t, res.OK, "%s: %s", res.Case, res.Detail)
	}
}

// testCheckFails checks endpoints that break a rule: the case fails, the command exits non-zero.
func (a *agents) testCheckFails(t *testing.T) {
	h := a.h
	h.t = t
	for _, tc := range []struct {
		faults remotetest.Faults
		name   string
		detail string
	}{
		{remotetest.Faults{CacheByRequestID: true}, remote.CaseStateConflict, "got the state answered to the stale one"},
		{remotetest.Faults{WebhookWithoutContentType: true}, remote.CaseWebhookAnswers, "the response has a body but no contentType"},
		{remotetest.Faults{NoSignatureCheck: true}, remote.CaseUnsigned, "answered 200, want 401"},
	} {
		ep := remotetest.New(t, tc.faults)
		r := h.cmd("", false, "agent", "check", "-f", writeRegistration(t, ep, "Faulty"))
		var failed errCheckFailed
		require.ErrorAs(t, r.err, &failed, "agent check of %+v: stdout %s\nstderr %s", tc.faults, r.stdout, r.stderr)
		assert.NotErrorAs(t, r.err, new(usageError))
		assert.Contains(t, checkLine(t, r.stdout, "FAIL", tc.name), tc.detail)
		assert.True(t, strings.HasSuffix(r.stderr, "error: "+failed.Error()+"\n"), "stderr %q", r.stderr)
		assert.Regexp(t, `^error: [12] of 16 cases failed$`, strings.TrimSpace(r.stderr[strings.LastIndex(r.stderr, "error: "):]))
	}
	// An endpoint that is not there fails every case that calls it, not the command line.
	ep := remotetest.New(t, remotetest.Faults{})
	file := writeRegistration(t, ep, "Gone")
	ep.Close()
	r := h.cmd("", false, "agent", "check", "-f", file)
	var failed errCheckFailed
	require.ErrorAs(t, r.err, &failed, "stdout %s\nstderr %s", r.stdout, r.stderr)
	assert.Equal(t, 16, failed.failed, r.stdout)
}

// testUsage: agent commands given wrongly print the usage.
func (a *agents) testUsage(t *testing.T) {
	h := a.h
	h.t = t
	for _, args := range [][]string{
		{"agent"}, {"agent", "frob"}, {"agent", "register"}, {"agent", "register", "A", "B", "--chat"}, {"agent", "get"},
		{"agent", "list", "x"}, {"agent", "remove"}, {"agent", "replace", "Remo"}, {"agent", "replace"},
		{"agent", "check"}, {"agent", "check", "-f", a.file, "--secret", ""}, {"agent-check", "http://127.0.0.1:1/x", "--secret", "whsec_x"},
		{"agent-check", "ftp://127.0.0.1/x", "--secret", "whsec_x", "--chat"},
		{"agent", "check", "-f", a.file, "--example", `nosuch={}`}, {"agent", "check", "-f", a.file, "--example", `sum=[2,3]`},
		{"agent", "check", "-f", a.file, "--example", `sum`},
	} {
		r := h.cmd(h.st.Key, false, args...)
		assert.ErrorAs(t, r.err, new(usageError), "agentbus %q: stderr %q", args, r.stderr)
		assert.Contains(t, r.stderr, "usage: agentbus", "agentbus %q: err %v", args, r.err)
	}
	r := h.cmd(h.st.Key, false, "-o", "yaml", "agent", "list")
	assert.Error(t, r.err)
	assert.Contains(t, r.stderr, "-o takes table or json")
	r = h.cmd(h.st.Key, false, "agent", "register", "-f", filepath.Join(t.TempDir(), "missing.json"))
	assert.Error(t, r.err)
	assert.Contains(t, r.stderr, "missing.json")
}
