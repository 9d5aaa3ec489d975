package inspect_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/agentbus/agentbus/pkg/inspect"
	"github.com/agentbus/agentbus/pkg/subject"
)

// A call is refused while a current report of some host names the partition its instance's
// requests go to among those its tenant crowds on the agent: two hosts' reports count apart, a
// host's next report without the partition takes it back, and a report older than LoadFor
// counts no more. The tenant's instances of other partitions, its other agent and another
// tenant of the agent are not refused; a report without the inbox's partition count names every
// partition.
func TestLoadBoardCrowding(t *testing.T) {
	b := inspect.NewLoadBoard()
	now := time.Now()
	pair := inspect.Pair{Tenant: "A", Agent: "Gate"}
	// Two instances of A whose requests go to different partitions of Gate's 16.
	hot, cool := "A:Gate:Supervisor Workflow:hot", ""
	for i := 0; cool == ""; i++ {
		wf := "A:Gate:Supervisor Workflow:cool-" + string(rune('a'+i))
		if subject.InboxPartition("A", wf, 16) != subject.InboxPartition("A", hot, 16) {
			cool = wf
		}
	}
	report := func(host string, at time.Time, crowded ...int) {
		b.TakeLoad(inspect.Load{V: inspect.LoadVersion, Host: host, Entries: []inspect.LoadEntry{
			{Tenant: "A", Agent: "Gate", Queued: 2100, Crowded: crowded, Partitions: 16},
			{Tenant: "A", Agent: "Echo", Queued: 3},
			{Tenant: "B", Agent: "Gate", Queued: 5},
		}}, at)
	}
	hotPart := subject.InboxPartition("A", hot, 16)
	assert.False(t, b.Crowding(pair, hot, now), "no report")
	report("h1", now, hotPart)
	report("h2", now, hotPart)
	assert.True(t, b.Crowding(pair, hot, now))
	assert.False(t, b.Crowding(pair, cool, now), "an instance of another partition")
	assert.False(t, b.Crowding(inspect.Pair{Tenant: "A", Agent: "Echo"}, hot, now), "the tenant's other agent")
	assert.False(t, b.Crowding(inspect.Pair{Tenant: "B", Agent: "Gate"}, "B:Gate:Supervisor Workflow:hot", now), "another tenant of the agent")
	crowding := map[string]bool{}
	for _, q := range b.Queues("", 10, now) {
		crowding[q.Tenant+"/"+q.Agent] = q.Crowding
	}
	assert.Equal(t, map[string]bool{"A/Gate": true, "A/Echo": false, "B/Gate": false}, crowding, "the queues as the hosts view shows them")

	report("h1", now)
	assert.True(t, b.Crowding(pair, hot, now), "h2 still names it")
	b.TakeLoad(inspect.Load{V: inspect.LoadVersion, Host: "h2", Entries: []inspect.LoadEntry{}}, now)
	assert.False(t, b.Crowding(pair, hot, now), "h2 holds nothing any more")
	assert.Equal(t, 2100, b.Queued(pair, now), "h1's report still counts")

	report("h2", now, hotPart)
	later := now.Add(inspect.LoadFor + inspect.LoadEvery)
	assert.False(t, b.Crowding(pair, hot, later), "h2's report is too old to count")
	assert.Zero(t, b.Queued(pair, later))

	b.TakeLoad(inspect.Load{V: inspect.LoadVersion, Host: "h3", Entries: []inspect.LoadEntry{{Tenant: "A", Agent: "Gate", Queued: 2100, Crowded: []int{hotPart}}}}, later)
	assert.True(t, b.Crowding(pair, cool, later), "without the partition count, every partition")
}
