package inspect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/registry"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/timefmt"
)

// Hosts is the live workflow hosts and each agent's inbox backlog per partition.
type Hosts struct {
	// At is when the view was read (the reader's clock); heartbeat ages are counted to it.
	At     timefmt.Time  `json:"at"`
	Hosts  []HostInfo    `json:"hosts"`
	Agents []AgentQueues `json:"agents"`
}

// HostInfo is one live host as its heartbeat tells.
type HostInfo struct {
	ID        string       `json:"id"`
	StartedAt timefmt.Time `json:"startedAt"`
	// Agents it runs, and the partitions it holds by agent: owns, hands over, or still runs
	// requests of.
	Agents     []string         `json:"agents"`
	Partitions map[string][]int `json:"partitions"`
	// InFlight counts the requests it held, queued or running, when it wrote the heartbeat;
	// null for a host of an earlier release, which does not tell.
	InFlight *int `json:"inFlight"`
	// HeartbeatAgeMs is how long ago its last heartbeat arrived.
	HeartbeatAgeMs int64 `json:"heartbeatAgeMs"`
	// Leaving is set while the host stops.
	Leaving bool `json:"leaving,omitempty"`
}

// AgentQueues is one agent's inbox backlog, by partition, and what the hosts hold of each
// tenant's requests of it.
type AgentQueues struct {
	Agent      string           `json:"agent"`
	Partitions []PartitionQueue `json:"partitions"`
	// Tenants are the tenants whose requests of the agent the hosts hold, the most queued
	// first, as the hosts' load reports tell (a tenant's view: its own only).
	Tenants []TenantQueue `json:"tenants"`
}

// PartitionQueue is the backlog of one partition of an agent, as its consumer counts it.
type PartitionQueue struct {
	Partition int `json:"partition"`
	// Holders are the live hosts whose heartbeat lists the partition (more than one while it
	// changes hands).
	Holders []string `json:"holders"`
	// Pending counts the requests not delivered to a host yet; AckPending those delivered and
	// not acknowledged (queued or running on a host, or held by one that died); Redelivered
	// those delivered more than once and not acknowledged.
	Pending     uint64 `json:"pending"`
	AckPending  int    `json:"ackPending"`
	Redelivered int    `json:"redelivered"`
	// NoConsumer is set when the partition has no consumer: no host has pulled it yet.
	NoConsumer bool `json:"noConsumer,omitempty"`
}

// busReads bounds the stream and consumer infos, and the inbox messages, one view reads at once.
const busReads = 8

// readEach calls read for 0 … n-1, busReads at a time, and returns the first error.
func readEach(n int, read func(i int) error) error {
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		first error
	)
	sem := make(chan struct{}, busReads)
	for i := range n {
		sem <- struct{}{} // before the goroutine: a view of many agents runs busReads, not one a read
		wg.Go(func() {
			defer func() { <-sem }()
			if err := read(i); err != nil {
				mu.Lock()
				first = cmp.Or(first, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}

// Hosts reads the live hosts and the backlog of the agents tenant may use (every agent, and
// every host, when tenant is ""), with the tenants' queues of each agent (Queues). For a tenant,
// a host is listed only when it runs such an agent, with only those agents and their
// partitions, and only its own queues; nothing names an instance.
func (c *Client) Hosts(ctx context.Context, tenant string) (Hosts, error) {
	visible := make(map[string]bool)
	for _, a := range c.Dir.VisibleAgents(tenant) {
		visible[a.Name] = true
	}
	ans := Hosts{At: timefmt.Now(), Hosts: []HostInfo{}, Agents: []AgentQueues{}}
	var holders partitionHolders
	ans.Hosts, holders = c.liveHosts(tenant, visible, ans.At.Time)
	agents := slices.Sorted(maps.Keys(visible))
	counts := make(map[string]int, len(agents))
	var mu sync.Mutex
	if err := readEach(len(agents), func(i int) error {
		n, err := c.Partitions(ctx, agents[i])
		if err != nil {
			return fmt.Errorf("inspect: %w", err)
		}
		mu.Lock()
		counts[agents[i]] = n
		mu.Unlock()
		return nil
	}); err != nil {
		return Hosts{}, err
	}
	queues, err := c.partitionQueues(ctx, counts)
	if err != nil {
		return Hosts{}, err
	}
	byAgent := map[string][]TenantQueue{}
	if c.Queues != nil {
		for _, q := range c.Queues(tenant) {
			byAgent[q.Agent] = append(byAgent[q.Agent], q)
		}
	}
	for _, a := range agents {
		aq := AgentQueues{Agent: a, Partitions: make([]PartitionQueue, 0, counts[a]), Tenants: byAgent[a]}
		if aq.Tenants == nil {
			aq.Tenants = []TenantQueue{}
		}
		for p := range counts[a] {
			pq := queues[agentPartition{a, p}]
			pq.Holders = holders[a][p]
			if pq.Holders == nil {
				pq.Holders = []string{}
			}
			slices.Sort(pq.Holders)
			aq.Partitions = append(aq.Partitions, pq)
		}
		ans.Agents = append(ans.Agents, aq)
	}
	return ans, nil
}

// partitionHolders are the hosts holding each partition of each agent.
type partitionHolders map[string]map[int][]string

// agentPartition names a partition of an agent.
type agentPartition struct {
	agent string
	p     int
}

// liveHosts lists the live hosts as of at, and which holds which partition of the visible
// agents. For a tenant, a host is listed only when it runs such an agent, with only those; for
// the system view (tenant ""), every agent a host runs is made visible.
func (c *Client) liveHosts(tenant string, visible map[string]bool, at time.Time) ([]HostInfo, partitionHolders) {
	hosts := []HostInfo{}
	holders := partitionHolders{}
	for _, h := range c.Dir.Hosts() {
		info := HostInfo{ID: h.ID, StartedAt: timefmt.Of(h.StartedAt), Agents: []string{}, Partitions: map[string][]int{},
			HeartbeatAgeMs: max(0, at.Sub(h.Seen).Milliseconds()), Leaving: h.Leaving}
		if h.Has(registry.FeatureInspect) {
			n := h.InFlight
			info.InFlight = &n
		}
		for _, a := range h.Agents {
			if tenant == "" || visible[a] {
				info.Agents = append(info.Agents, a)
				visible[a] = true
			}
		}
		for a, ps := range h.Partitions {
			if !visible[a] {
				continue
			}
			info.Partitions[a] = slices.Clone(ps)
			if holders[a] == nil {
				holders[a] = make(map[int][]string)
			}
			for _, p := range ps {
				holders[a][p] = append(holders[a][p], h.ID)
			}
		}
		if tenant != "" && len(info.Agents) == 0 {
			continue
		}
		hosts = append(hosts, info)
	}
	return hosts, holders
}

// partitionQueues reads the backlog of every partition of the agents, given with their partition
// counts, busReads at a time.
func (c *Client) partitionQueues(ctx context.Context, agents map[string]int) (map[agentPartition]PartitionQueue, error) {
	var all []agentPartition
	for a, partitions := range agents {
		for p := range partitions {
			all = append(all, agentPartition{a, p})
		}
	}
	queues := make(map[agentPartition]PartitionQueue, len(all))
	var mu sync.Mutex
	err := readEach(len(all), func(i int) error {
		pq, err := c.partitionQueue(ctx, all[i].agent, all[i].p)
		if err != nil {
			return err
		}
		mu.Lock()
		queues[all[i]] = pq
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return queues, nil
}

// partitionQueue reads the backlog of an agent's partition from its consumer.
func (c *Client) partitionQueue(ctx context.Context, agent string, p int) (PartitionQueue, error) {
	pq := PartitionQueue{Partition: p}
	cons, err := c.JS.Consumer(ctx, subject.InboxStream(agent), subject.PartitionConsumer(agent, p))
	if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		pq.NoConsumer = true
		return pq, nil
	}
	if err != nil {
		return pq, fmt.Errorf("inspect: reading partition %d of %s: %w", p, agent, err)
	}
	info := cons.CachedInfo()
	pq.Pending, pq.AckPending, pq.Redelivered = info.NumPending, info.NumAckPending, info.NumRedelivered
	return pq, nil
}
