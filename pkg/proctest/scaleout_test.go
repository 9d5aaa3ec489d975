package proctest_test

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/proctest"
)

// observation is one answer of Echo's host method: which host served the instance, when.
type observation struct {
	start, end time.Time
	host       string
}

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

	// Spread: 300 calls over 150 instances.
	const instances = 150
	served := map[string]map[string]bool{}
	for i := range 2 * instances {
		a := fmt.Sprintf("spread-%d", i%instances)
		h, err := sys.hostOf(ctx, a)
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
		share := float64(n) / instances
		assert.True(t, share >= 0.20 && share <= 0.46, "host %s serves %.0f%% of the instances", h, 100*share)
	}

	// Join: clients keep calling every instance, each instance from one client at a time, while
	// a fourth host starts.
	var (
		mu   sync.Mutex
		seen = map[string][]observation{}
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const clients = 10
	for c := range clients {
		wg.Go(func() {
			for {
				for i := c; i < instances; i += clients {
					select {
					case <-stop:
						return
					default:
					}
					a := fmt.Sprintf("spread-%d", i)
					start := time.Now()
					h, err := sys.hostOf(ctx, a)
					if !assert.NoError(t, err, "host of %s during the join", a) {
						continue
					}
					mu.Lock()
					seen[a] = append(seen[a], observation{start, time.Now(), h})
					mu.Unlock()
				}
			}
		})
	}
	time.Sleep(time.Second)
	joined := time.Now()
	sys.startHost("host-4")
	took := sys.waitSettled(append(ids, "host-4"), 10*time.Second)
	t.Logf("join: host-4 owns its share %v after its process started", took)
	assert.Less(t, took, 2*time.Second, "a joining host owns its partitions within 2 s")
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()

	// Every instance's answers, in the order the calls were made, name at most two hosts, and
	// once one came from the new host none came from the old one again; with one call at a time
	// per instance, no two hosts served it at once. Count the instances whose move fell inside
	// one wall-clock second, as a report.
	moved, sameSecond := map[string]int{}, 0
	for a, obs := range seen {
		sort.Slice(obs, func(i, j int) bool { return obs[i].start.Before(obs[j].start) })
		var hosts []string
		for _, o := range obs {
			if len(hosts) == 0 || hosts[len(hosts)-1] != o.host {
				hosts = append(hosts, o.host)
			}
		}
		assert.LessOrEqual(t, len(hosts), 2, "instance %s was served by %v in turn", a, hosts)
		if len(hosts) == 2 {
			moved[hosts[1]]++
			for i := 1; i < len(obs); i++ {
				if obs[i].host != obs[i-1].host {
					assert.False(t, obs[i].start.Before(obs[i-1].end), "instance %s served by two hosts at once", a)
					if obs[i].end.Truncate(time.Second).Equal(obs[i-1].start.Truncate(time.Second)) {
						sameSecond++
					}
				}
			}
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

func total(seen map[string][]observation) int {
	n := 0
	for _, obs := range seen {
		n += len(obs)
	}
	return n
}
