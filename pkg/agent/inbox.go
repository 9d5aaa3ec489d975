package agent

import (
	"hash/fnv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/bus"
)

// agentInbox is the inbox stream of one agent a host runs (bus.Resources.InboxOf), with the
// keeper of its markers.
type agentInbox struct {
	stream jetstream.Stream
	name   string // the stream's name
	// partitions is the inbox's partition count (bus.InboxPartitions), read when the host
	// starts: the host pulls and places that many partitions whatever it is configured with.
	partitions int
	keeper     *bus.InboxKeeper
	// salt offsets the agent's inbox sequences in the host's AckedWindow, which all its agents
	// (and the other hosts of its process) share: the same sequence of two agents' inboxes takes
	// two slots.
	salt uint64
	// wake wakes the agent's dozing partitions (doze.go).
	wake inboxWake
}

func newAgentInbox(js jetstream.JetStream, st jetstream.Stream, agent string) *agentInbox {
	h := fnv.New64a()
	_, _ = h.Write([]byte(agent))
	return &agentInbox{stream: st, name: st.CachedInfo().Config.Name, partitions: bus.InboxPartitions(st),
		keeper: bus.NewInboxKeeper(js, st, agent), salt: h.Sum64()}
}

// heldKey names a request a host holds: its agent and its sequence in the agent's inbox.
type heldKey struct {
	agent string
	seq   uint64
}

// heldKey is the heldKey of the partition's request at inbox sequence seq.
func (p *partition) heldKey(seq uint64) heldKey { return heldKey{p.key.agent, seq} }

// key is the delivery's heldKey.
func (d *delivery) key() heldKey { return d.part.heldKey(d.seq) }
