package agent

import (
	"strconv"
	"testing"

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
