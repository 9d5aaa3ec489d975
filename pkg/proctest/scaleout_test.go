package proctest_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/proctest"
)

// Three workflow host processes share Echo's instances; a fourth that starts owns its share of
// the partitions within two seconds, and while it joins no instance is served by two hosts at
// once or moves back and forth.
func TestProcessesSpreadAndJoin(t *testing.T) {
	bins := needProcesses(t)
	nats := proctest.StartNATS(t, bins, proctest.NATSOptions{})
	sys := newSystem(t, bins, nats.URL)
	ids := []string{"host-1", "host-2", "host-3"}
	for _, id := range ids {
		sys.startHost(id)
	}
	sys.waitSettled(ids, 30*time.Second)
	sys.waitServing(10 * time.Second)
	ctx := proctest.Context(t, 5*time.Minute)

	const instances = 150
	sys.checkSpread(ctx, t, instances)

	// Join: clients keep calling every instance, each instance from one client at a time, while
	// a fourth host starts.
	load := startHostOfLoad(ctx, t, sys, instances, 10)
	time.Sleep(time.Second)
	joined := time.Now()
	sys.startHost("host-4")
	took := sys.waitSettled(append(ids, "host-4"), 10*time.Second)
	t.Logf("join: host-4 owns its share %v after its process started", took)
	assert.Less(t, took, 2*time.Second, "a joining host owns its partitions within 2 s")
	time.Sleep(2 * time.Second)
	checkJoin(t, load.finish(), joined)
}

// checkSpread makes 300 calls over instances named spread-0 … spread-(instances-1) and checks
// that each of the three hosts serves between 20% and 46% of them.
func (s *system) checkSpread(ctx context.Context, t *testing.T, instances int) {
	t.Helper()
	served := map[string]map[string]bool{}
	for i := range 2 * instances {
		a := fmt.Sprintf("spread-%d", i%instances)
		h, err := s.hostOf(ctx, a)
		require.NoError(t, err)
		if served[h] == nil {
			served[h] = map[string]bool{}
		}
		served[h][a] = true
	}
	counts := map[string]int{}
	for h, as := range served {
		counts[h] = len(as)
	}
	t.Logf("spread: 300 calls over %d instances; instances served per host: %v", instances, counts)
	require.Len(t, counts, 3)
	for h, n := range counts {
		share := float64(n) / float64(instances)
		assert.True(t, share >= 0.20 && share <= 0.46, "host %s serves %.0f%% of the instances", h, 100*share)
	}
}

// checkJoin checks the answers seen while host-4 joined, from joined on: every instance's
// answers, in the order the calls were made, name at most two hosts, and once one came from
// the new host none came from the old one again; with one call at a time per instance, no two
// hosts served it at once. Some instance moved to host-4. It reports the instances whose move
// fell inside one wall-clock second, and the moves between old hosts.
func checkJoin(t *testing.T, seen map[string][]observation, joined time.Time) {
	t.Helper()
	moved, sameSecond := map[string]int{}, 0
	for a, obs := range seen {
		to, n := checkMoves(t, a, obs)
		if to != "" {
			moved[to]++
			sameSecond += n
		}
	}
	t.Logf("join: %d instances answered %d calls from %v after the join started; instances moved, by new host: %v; moves within one wall-clock second: %d",
		len(seen), total(seen), time.Since(joined).Round(time.Millisecond), moved, sameSecond)
	assert.Positive(t, moved["host-4"], "no instance moved to the newcomer")
	var others []string
	for h := range moved {
		if h != "host-4" {
			others = append(others, h)
		}
	}
	slices.Sort(others)
	if len(others) > 0 {
		t.Logf("join: instances also moved between old hosts, to %v (placement moves a few partitions between them)", others)
	}
}

// checkMoves sorts the answers obs of instance a by the start of their calls and checks that
// they name at most two hosts, and that the second did not serve a call before the first
// answered the previous one. When a moved, it returns the host a moved to and how many of its
// moves fell inside one wall-clock second; otherwise it returns "".
func checkMoves(t *testing.T, a string, obs []observation) (string, int) {
	t.Helper()
	sort.Slice(obs, func(i, j int) bool { return obs[i].start.Before(obs[j].start) })
	var hosts []string
	for _, o := range obs {
		if len(hosts) == 0 || hosts[len(hosts)-1] != o.host {
			hosts = append(hosts, o.host)
		}
	}
	assert.LessOrEqual(t, len(hosts), 2, "instance %s was served by %v in turn", a, hosts)
	if len(hosts) != 2 {
		return "", 0
	}
	sameSecond := 0
	for i := 1; i < len(obs); i++ {
		if obs[i].host != obs[i-1].host {
			assert.False(t, obs[i].start.Before(obs[i-1].end), "instance %s served by two hosts at once", a)
			if obs[i].end.Truncate(time.Second).Equal(obs[i-1].start.Truncate(time.Second)) {
				sameSecond++
			}
		}
	}
	return hosts[1], sameSecond
}

// total returns the number of answers in seen.
func total(seen map[string][]observation) int {
	n := 0
	for _, obs := range seen {
		n += len(obs)
	}
	return n
}
