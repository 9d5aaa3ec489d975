package agent

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/inspect"
)

// The queue metrics of two hosts sharing a registry add up per agent and tenant; past 20
// tenants, those holding the fewest requests are added up as "other".
func TestLoadCollectorBoundsTenants(t *testing.T) {
	reg := prometheus.NewRegistry()
	var hosts [2]*Host
	for i := range hosts {
		hosts[i] = &Host{}
		require.NoError(t, hosts[i].collectLoad(reg))
		var entries []inspect.LoadEntry
		for n := range 25 {
			entries = append(entries, inspect.LoadEntry{Tenant: "t" + strconv.Itoa(n), Agent: "A", Queued: n + 1, Running: 1, OldestMs: int64(1000 * (i + 1))})
		}
		hosts[i].lastLoad.Store(&entries)
	}
	assert.Equal(t, 21*3, testutil.CollectAndCount(reg), "20 tenants and other, three series each")
	fams, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tenant" {
					got[f.GetName()+" "+l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	assert.Equal(t, 50.0, got["agentbus_tenant_queued_requests t24"], "both hosts' 25")
	assert.Equal(t, 2.0, got["agentbus_tenant_running_requests t24"])
	assert.Equal(t, 2.0, got["agentbus_tenant_oldest_queued_seconds t24"], "the larger wait")
	assert.Equal(t, 2.0*(1+2+3+4+5), got["agentbus_tenant_queued_requests other"], "the 5 quietest tenants")
	_, named := got["agentbus_tenant_queued_requests t0"]
	assert.False(t, named)
}

// A partition is crowded from crowdedAt requests held; its tenants that hold at least their share
// of that (crowdedAt over the tenants holding some) are reported crowding it (Crowded, with the
// inbox's partition count), on the agent the partition is of; a tenant holding less of it, and
// every tenant of an uncrowded partition, are not.
func TestLoadMarksTheTenantsCrowdingAPartition(t *testing.T) {
	crowded := &partition{key: partKey{agent: "Gate", n: 5}, inbox: &agentInbox{partitions: 16}}
	quiet := &partition{key: partKey{agent: "Other", n: 2}, inbox: &agentInbox{partitions: 4}}
	h := &Host{cfg: HostConfig{ID: "h"}, convs: map[string]*conversation{}}
	hold := func(key, tenant, agentName string, part *partition, n int) {
		c := &conversation{key: key, share: shareKey{tenant: tenant, agent: agentName}}
		for i := range n {
			c.queue = append(c.queue, &delivery{seq: uint64(i + 1), part: part, conv: c})
		}
		c.running = true
		h.convs[key] = c
		part.holding += n // as queueLocked counts them
	}
	drop := func(key string) {
		c := h.convs[key]
		c.queue[0].part.holding -= len(c.queue)
		delete(h.convs, key)
	}
	// The crowded partition holds crowdedAt requests: A's 1,500 in two conversations, B's 400,
	// C's 148; the share of each of its three tenants is a third of crowdedAt (682.7).
	hold("a1", "A", "Gate", crowded, 1000)
	hold("a2", "A", "Gate", crowded, 500)
	hold("b1", "B", "Gate", crowded, 400)
	hold("c1", "C", "Gate", crowded, crowdedAt-1900)
	// Another partition of another agent, below crowdedAt: its one tenant is not crowding it.
	hold("d1", "D", "Other", quiet, crowdedAt-1)
	crowding := func(l inspect.Load) map[string]string {
		out := map[string]string{}
		for _, e := range l.Entries {
			if len(e.Crowded) > 0 {
				out[e.Tenant+"/"+e.Agent] = fmt.Sprintf("%v of %d", e.Crowded, e.Partitions)
			}
		}
		return out
	}
	assert.Equal(t, map[string]string{"A/Gate": "[5] of 16"}, crowding(h.countLoad(time.Now())), "A holds more than a third; B and C less; D's partition is not crowded")

	hold("b2", "B", "Gate", crowded, 300) // B's 700: more than a third of crowdedAt as well
	assert.Equal(t, map[string]string{"A/Gate": "[5] of 16", "B/Gate": "[5] of 16"}, crowding(h.countLoad(time.Now())))

	drop("a1")
	drop("a2")
	drop("b2")
	assert.Empty(t, crowding(h.countLoad(time.Now())), "below crowdedAt again")

	hold("d2", "D", "Other", quiet, 1) // D alone holds crowdedAt of its partition
	assert.Equal(t, map[string]string{"D/Other": "[2] of 4"}, crowding(h.countLoad(time.Now())), "a tenant alone in a crowded partition crowds it")

	// Tenants joining D, each under a fifth of crowdedAt (409.6), are not marked; one that
	// reaches it is, though the partition's average (D's 2,048 and their 1,300 over five) is
	// higher: the tenants under the average could otherwise raise it by turns until the
	// partition is full.
	for _, tenant := range []string{"E", "F", "G", "H"} {
		hold("e-"+tenant, tenant, "Other", quiet, 325)
	}
	assert.Equal(t, map[string]string{"D/Other": "[2] of 4"}, crowding(h.countLoad(time.Now())))
	hold("e2-E", "E", "Other", quiet, 85)
	assert.Equal(t, map[string]string{"D/Other": "[2] of 4", "E/Other": "[2] of 4"}, crowding(h.countLoad(time.Now())))

	// D crowds another partition of Other as well: both are named.
	other := &partition{key: partKey{agent: "Other", n: 0}, inbox: quiet.inbox}
	hold("d3", "D", "Other", other, crowdedAt)
	assert.Equal(t, "[0 2] of 4", crowding(h.countLoad(time.Now()))["D/Other"])
}
