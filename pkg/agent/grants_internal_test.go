package agent

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/inspect"
)

// A host holding the whole cap of 3 while 2 of its requests run (and wait on something), with
// two other hosts wanting units, gives back the unit it does not run at once: its slots first,
// then the write, keeping the 2 units its running requests use until they end.
func TestGrantGivesBackWhatItDoesNotRun(t *testing.T) {
	h := &Host{cfg: HostConfig{ID: "second", TenantMaxConcurrent: 3}, board: inspect.NewLoadBoard()}
	g := newGrants(h)
	k := shareKey{"default", "Slow"}
	now := time.Now()
	for _, host := range []string{"first", "third"} {
		h.board.TakeLoad(inspect.Load{V: inspect.LoadVersion, Host: host,
			Entries: []inspect.LoadEntry{{Tenant: k.tenant, Agent: k.agent, Queued: 3, Want: 3}}}, now)
	}
	live := func(host string) bool { return host == "first" || host == "second" || host == "third" }
	st := g.state(k)
	st.rec, st.rev, st.local = grantRecord{V: grantVersion, Cap: 3, Hosts: map[string]int{"second": 3}}, 7, 3
	running := demand{want: 2, out: 2}

	g.pass++
	w, p := g.plan(k, st, running, live, now)
	assert.Nil(t, w, "the slots are lowered first")
	assert.True(t, p.lowered)
	assert.Equal(t, 1, st.local, "an even part of the cap: the slots start nothing above it")

	g.pass++
	w, _ = g.plan(k, st, running, live, now)
	require.NotNil(t, w, "the unit no request runs on goes back")
	assert.Equal(t, map[string]int{"second": 2}, w.rec.Hosts, "the 2 running keep theirs")
	assert.Equal(t, uint64(7), w.rev)

	// Once written, and one of the two ended: the second unit goes back too.
	st.rec, st.rev = w.rec, 8
	st.rec.Hosts = map[string]int{"first": 1, "second": 2}
	g.pass++
	w, _ = g.plan(k, st, demand{want: 1, out: 1}, live, now)
	require.NotNil(t, w)
	assert.Equal(t, map[string]int{"first": 1, "second": 1}, w.rec.Hosts)
}
