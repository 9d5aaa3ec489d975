package inspect_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/agentbus/agentbus/pkg/inspect"
)

// A pair is crowding while a current report of some host marks it: two hosts' marks count
// apart, a host's next report without the mark takes its mark back, and a report older than
// LoadFor counts no more. Another pair, and the same tenant's other agent, are not crowding.
func TestLoadBoardCrowding(t *testing.T) {
	b := inspect.NewLoadBoard()
	now := time.Now()
	pair := inspect.Pair{Tenant: "A", Agent: "Gate"}
	report := func(host string, at time.Time, crowding bool) {
		b.TakeLoad(inspect.Load{V: inspect.LoadVersion, Host: host, Entries: []inspect.LoadEntry{
			{Tenant: "A", Agent: "Gate", Queued: 2100, Crowding: crowding},
			{Tenant: "A", Agent: "Echo", Queued: 3},
			{Tenant: "B", Agent: "Gate", Queued: 5},
		}}, at)
	}
	assert.False(t, b.Crowding(pair, now), "no report")
	report("h1", now, true)
	report("h2", now, true)
	assert.True(t, b.Crowding(pair, now))
	assert.False(t, b.Crowding(inspect.Pair{Tenant: "A", Agent: "Echo"}, now), "the tenant's other agent")
	assert.False(t, b.Crowding(inspect.Pair{Tenant: "B", Agent: "Gate"}, now), "another tenant of the agent")
	crowding := map[string]bool{}
	for _, q := range b.Queues("", 10, now) {
		crowding[q.Tenant+"/"+q.Agent] = q.Crowding
	}
	assert.Equal(t, map[string]bool{"A/Gate": true, "A/Echo": false, "B/Gate": false}, crowding, "the queues as the hosts view shows them")

	report("h1", now, false)
	assert.True(t, b.Crowding(pair, now), "h2 still marks it")
	b.TakeLoad(inspect.Load{V: inspect.LoadVersion, Host: "h2", Entries: []inspect.LoadEntry{}}, now)
	assert.False(t, b.Crowding(pair, now), "h2 holds nothing any more")
	assert.Equal(t, 2100, b.Queued(pair, now), "h1's report still counts")

	report("h2", now, true)
	later := now.Add(inspect.LoadFor + inspect.LoadEvery)
	assert.False(t, b.Crowding(pair, later), "h2's report is too old to count")
	assert.Zero(t, b.Queued(pair, later))
}
