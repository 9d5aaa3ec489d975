package agent_test

import (
	"bytes"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// A delivery lost on its way to the host (in flight on a connection whose NATS server died)
// leaves its request unacknowledged until the ack wait ends, while the consumer goes on
// delivering the conversation's later requests. The host sees the gap in the consumer's delivery
// sequence and holds the conversation back until the lost request comes again, which it asks the
// bus for at once: the lost request runs first, and once, well before its ack wait ends.
func TestLostDeliveryKeepsItsConversationInOrder(t *testing.T) {
	t.Parallel()
	const ackWait = 10 * time.Second
	s, sa, _, sent := loseStepTwo(t, ackWait)
	step(t, s, "x", "3", "")
	waitFor(t, ackWait/2, "steps 2 and 3 ran before step 2's ack wait ended", func() bool {
		ns, _ := sa.starts("x")
		return len(ns) >= 3
	})
	t.Logf("steps 2 and 3 ran %v after step 2 was sent", time.Since(sent).Round(time.Millisecond))
	waitRedelivered(t, s, 3, ackWait+5*time.Second)
	ns, hosts := sa.starts("x")
	assert.Equal(t, []string{"1", "2", "3"}, ns, "steps started, in order, each once (on %v)", hosts)
}

// A lost delivery that is the partition's last shows no gap: no later delivery arrives. The
// connection it was lost with reconnects, and the host asks the consumer for its latest delivery:
// one that never arrived is asked for again at once, not after its ack wait.
func TestLostLastDeliveryIsAskedForAgainOnReconnect(t *testing.T) {
	t.Parallel()
	// Longer than the test above's: the reconnect comes first, and under a loaded machine's
	// scheduling it may take seconds.
	const ackWait = 15 * time.Second
	s, sa, lossy, sent := loseStepTwo(t, ackWait)
	lossy.Cut()
	waitFor(t, ackWait*2/3, "step 2 ran well before its ack wait ended", func() bool {
		ns, _ := sa.starts("x")
		return len(ns) >= 2
	})
	t.Logf("step 2 ran %v after it was sent", time.Since(sent).Round(time.Millisecond))
	waitRedelivered(t, s, 2, ackWait+5*time.Second)
	ns, hosts := sa.starts("x")
	assert.Equal(t, []string{"1", "2"}, ns, "steps started, in order, each once (on %v)", hosts)
}

// loseStepTwo starts a stack whose host "other" runs Seq and a second host that owns Seq's one
// partition through a proxy, runs step 1 of conversation x there and sends step 2, whose
// delivery to that host the proxy drops. It returns when the delivery was dropped, with the time
// step 2 was sent.
func loseStepTwo(t *testing.T, ackWait time.Duration) (s *stacktest.Stack, sa *seqAgent, lossy *natstest.Proxy, sent time.Time) {
	t.Helper()
	sa = &seqAgent{}
	s = stacktest.Start(t, stacktest.Options{Partitions: 1, Agents: []*agent.Agent{sa.agent()},
		Host: agent.HostConfig{ID: "other", AckWait: ackWait}})
	deliveries := []byte(strings.TrimSuffix(subject.Partition("Seq", 0), ">"))
	var losing atomic.Bool
	lossy = &natstest.Proxy{Server: s.NATS.Server, Drop: func(toServer bool, subj []byte) bool {
		return !toServer && bytes.HasPrefix(subj, deliveries) && losing.CompareAndSwap(true, false)
	}}
	startSeqOwner(t, s, sa, "other", agent.HostConfig{Conn: lossy.Connect(t, "lossy"), AckWait: ackWait})

	step(t, s, "x", "1", "")
	waitFor(t, 5*time.Second, "step 1 ran", func() bool {
		ns, _ := sa.starts("x")
		return len(ns) == 1
	})
	losing.Store(true)
	sent = time.Now()
	step(t, s, "x", "2", "")
	waitFor(t, 5*time.Second, "step 2's delivery was lost", func() bool { return lossy.Dropped.Load() == 1 })
	return s, sa, lossy, sent
}
