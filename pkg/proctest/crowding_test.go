package proctest_test

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/proctest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// A tenant's backlog on one conversation leaves its partition room for the other tenants. A
// remote agent of two tenants (16 partitions, 8 slots), served by a workflow host process behind
// an ingress process: tenant A's conversation is held up by a 10 s request, and A sends it more
// requests from 16 callers until the ingress refuses one with 429 too-many-queued, which it does
// once the host reports A crowding the partition (holding half of the 4,096 requests the host
// takes of it at once); A's call to an instance of another partition is still taken. So the
// partition is never full and nothing of A's waits in the inbox ahead of another tenant's
// requests: tenant B's 20 calls made then, some of whose conversations may share A's partition,
// are each answered within seconds, not after A's backlog. Without the refusal, A's requests
// past 4,096 wait in the inbox, and B's requests of that partition behind them, until A's
// conversation has worked through its backlog.
func TestProcessesCrowdedPartitionLeavesRoomForOthers(t *testing.T) {
	t.Parallel() // beside the other parallel process tests: its bound is loose (B's calls wait 10 s or more without the refusal)
	const (
		bCalls = 20
		bound  = 3 * time.Second
		most   = 6000 // A's sends stop here if none is refused
	)
	bins := needProcesses(t)
	nats := proctest.StartNATS(t, bins, proctest.NATSOptions{})
	sys := newSystem(t, bins, nats.URL)
	sys.startHost("host-1")
	sys.waitSettled([]string{"host-1"}, 30*time.Second)
	ctx := proctest.Context(t, 3*time.Minute)
	otherKey := sys.tenantKey(ctx, "other", "tenant-admin")

	sys.registerSleeper(ctx, t, "Crowd", 8)
	sleep := func(tenant, key, activation string, ms, n int, wait bool) (int, []byte, error) {
		return sys.sleep(ctx, "Crowd", tenant, key, activation, ms, n, wait)
	}

	status, b, err := sleep("default", sys.key, "a", 10_000, 0, false)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, status, "A's first request: %s", b)
	var (
		next, accepted atomic.Int64
		refusal        atomic.Pointer[string]
		wg             sync.WaitGroup
	)
	start := time.Now()
	for range 16 {
		wg.Go(func() {
			for refusal.Load() == nil {
				n := int(next.Add(1))
				if n > most {
					return
				}
				status, b, err := sleep("default", sys.key, "a", 1, n, false)
				if !assert.NoError(t, err) {
					return
				}
				switch status {
				case http.StatusAccepted:
					accepted.Add(1)
				case http.StatusTooManyRequests:
					s := string(b)
					refusal.CompareAndSwap(nil, &s)
				default:
					assert.Failf(t, "A's send", "%d %s", status, b)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("A's conversation: %d requests accepted in %v before the first refusal", accepted.Load()+1, time.Since(start).Round(time.Millisecond))
	require.NotNil(t, refusal.Load(), "none of A's %d sends to one conversation was refused", most)
	assert.Contains(t, *refusal.Load(), "too-many-queued")
	assert.Contains(t, *refusal.Load(), `the partition of agent \"Crowd\" this instance's requests go to holds half the requests`)
	// The host reports at once when the partition becomes crowded: what A sent before the
	// refusals began leaves a quarter of the partition (and of its 4,096) free at least.
	assert.Less(t, accepted.Load()+1, int64(3072), "A's requests took most of the partition before they were refused")

	// A's calls to an instance whose requests go to another partition are taken (the agent,
	// shared by two tenants, has 16).
	elsewhere := ""
	for i := 0; elsewhere == ""; i++ {
		a := "elsewhere-" + strconv.Itoa(i)
		if subject.InboxPartition("default", "default:Crowd:Supervisor Workflow:"+a, 16) != subject.InboxPartition("default", "default:Crowd:Supervisor Workflow:a", 16) {
			elsewhere = a
		}
	}
	status, b, err = sleep("default", sys.key, elsewhere, 1, 0, true)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, status, "A's call to an instance of another partition: %s", b)

	sorted := callsAtOnce(t, bCalls, func(i int) (int, []byte, error) {
		return sleep("other", otherKey, "b-"+strconv.Itoa(i), 1, i, true)
	})
	t.Logf("tenant B's %d calls answered in %v at the slowest (median %v)", bCalls, sorted[bCalls-1].Round(time.Millisecond), sorted[bCalls/2].Round(time.Millisecond))
	assert.Less(t, sorted[bCalls-1], bound, "B's calls waited behind A's backlog")

	// A's calls are taken again once its backlog has run below half the partition.
	for again := time.Now().Add(time.Minute); ; {
		status, b, err := sleep("default", sys.key, "a", 1, 0, false)
		require.NoError(t, err)
		if status == http.StatusAccepted {
			break
		}
		require.Equal(t, http.StatusTooManyRequests, status, "%s", b)
		require.True(t, time.Now().Before(again), "A's calls are still refused a minute after B's")
		time.Sleep(200 * time.Millisecond)
	}
}
