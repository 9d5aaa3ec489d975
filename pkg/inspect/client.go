package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/placement"
	"github.com/agentbus/agentbus/pkg/registry"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/timefmt"
)

// Client asks the hosts and reads the inbox. Its fields are required.
type Client struct {
	NC  *nats.Conn
	JS  jetstream.JetStream
	Dir *registry.Directory
	// Partitions reads the partition count of an agent's inbox (bus.Resources.PartitionsOf).
	Partitions func(ctx context.Context, agent string) (int, error)
	// Queues, when set, gives the tenants' queues the hosts report (LoadBoard.Queues, with
	// their limits), those of tenant only unless it is "": Hosts lists them under their agents.
	Queues func(tenant string) []TenantQueue
}

// hostTimeout bounds the wait for one host's answer: a host answers from memory, so one that
// takes longer is stalled or cut off, and is listed as not answering.
const hostTimeout = 2 * time.Second

// ErrNotHeld: no host holds the request (it ran, never was, or is another instance's); ErrNotInBackoff:
// a host holds it, but it is not waiting to be retried.
var (
	ErrNotHeld      = errors.New("inspect: no host holds the request")
	ErrNotInBackoff = errors.New("inspect: the request is not in retry backoff")
)

// InstanceQueue is what waits for one workflow instance: its requests, by conversation.
type InstanceQueue struct {
	WorkflowID string `json:"workflowId"`
	AgentName  string `json:"agentName"`
	// Partition is the inbox partition of the instance's requests; Owner the live host that
	// owns it now, empty when no live host runs the agent.
	Partition int    `json:"partition"`
	Owner     string `json:"owner,omitempty"`
	// At is when the view was read (the reader's clock); ages are counted to it.
	At timefmt.Time `json:"at"`
	// Conversations are the instance's conversations with requests stored in the inbox, by
	// participant.
	Conversations []ConversationQueue `json:"conversations"`
	// Unanswered are the hosts of the agent that did not answer: what they hold is missing.
	Unanswered []string `json:"unansweredHosts,omitempty"`
}

// Empty reports whether nothing waits for the instance and every host answered.
func (q InstanceQueue) Empty() bool { return len(q.Conversations) == 0 && len(q.Unanswered) == 0 }

// ConversationQueue is the requests waiting for one conversation of an instance.
type ConversationQueue struct {
	ParticipantID string `json:"participantId"`
	// Stored counts the conversation's requests in the inbox: those hosts hold (queued or
	// running) and those not delivered yet. OldestStoredAt is when the oldest was stored, and
	// OldestAgeMs its age.
	Stored         int           `json:"stored"`
	OldestStoredAt *timefmt.Time `json:"oldestStoredAt,omitempty"`
	OldestAgeMs    int64         `json:"oldestAgeMs"`
	// NotHeld counts the stored requests no host that answered holds: not delivered yet, or
	// held by a host that did not answer.
	NotHeld int `json:"notHeld"`
	// Requests are the requests hosts hold, in inbox order, with their state.
	Requests []QueuedRequest `json:"requests"`
}

// QueuedRequest is a request a host holds.
type QueuedRequest struct {
	Request
	// Host holds it; AgeMs is how long ago the inbox stored it.
	Host  string `json:"host"`
	AgeMs int64  `json:"ageMs"`
}

// maxInboxConversations bounds the conversations whose oldest request is read from the inbox.
const maxInboxConversations = 100

// Instance reads what waits for the workflow instance of the tenant: it asks every live host
// of the instance's agent (the partition's owner, and one still finishing requests of it) what it
// holds, and reads from the inbox how many requests each conversation has stored and when the
// oldest was stored.
func (c *Client) Instance(ctx context.Context, tenant, workflowID string) (InstanceQueue, error) {
	wf, err := ident.ParseWorkflowID(workflowID)
	if err != nil {
		return InstanceQueue{}, err
	}
	if wf.Tenant != tenant {
		return InstanceQueue{}, fmt.Errorf("inspect: workflow %q is not of tenant %q", workflowID, tenant)
	}
	p, owner, err := c.Placement(ctx, wf)
	if err != nil {
		return InstanceQueue{}, err
	}
	ans := InstanceQueue{WorkflowID: workflowID, AgentName: wf.Agent, Partition: p, Owner: owner,
		Conversations: []ConversationQueue{}}

	var (
		wg       sync.WaitGroup
		held     []Held
		missed   []string
		stored   map[string]uint64
		oldest   map[string]time.Time
		inboxErr error
	)
	wg.Go(func() {
		stored, oldest, inboxErr = c.inboxOf(ctx, wf.Agent, p, tenant, workflowID)
	})
	wg.Go(func() {
		held, missed = c.askHosts(ctx, wf.Agent, Query{Op: OpHeld, Tenant: tenant, WorkflowID: workflowID})
	})
	wg.Wait()
	if inboxErr != nil {
		return InstanceQueue{}, inboxErr
	}
	ans.At = timefmt.Now()
	ans.Unanswered = missed

	byParticipant := make(map[string]*ConversationQueue)
	conv := func(participant string) *ConversationQueue {
		cq := byParticipant[participant]
		if cq == nil {
			cq = &ConversationQueue{ParticipantID: participant, Requests: []QueuedRequest{}}
			byParticipant[participant] = cq
		}
		return cq
	}
	for subj, n := range stored {
		in, err := subject.ParseStoredInbox(subj)
		if err != nil {
			continue
		}
		cq := conv(in.Participant)
		cq.Stored += int(n)
		if t, ok := oldest[subj]; ok {
			cq.OldestStoredAt = &timefmt.Time{Time: t}
			cq.OldestAgeMs = ans.At.Sub(t).Milliseconds()
		}
	}
	for _, hv := range held {
		for _, hc := range hv.Conversations {
			if hc.Tenant != tenant || hc.WorkflowID != workflowID {
				continue // not asked for: a host answers only for the instance
			}
			cq := conv(hc.ParticipantID)
			for _, r := range hc.Requests {
				cq.Requests = append(cq.Requests, QueuedRequest{Request: r, Host: hv.Host, AgeMs: ans.At.Sub(r.StoredAt.Time).Milliseconds()})
			}
			cq.NotHeld -= hc.Count
		}
	}
	for _, cq := range byParticipant {
		cq.NotHeld = max(0, cq.NotHeld+cq.Stored)
		slices.SortFunc(cq.Requests, func(a, b QueuedRequest) int { return compareUint(a.Sequence, b.Sequence) })
		if cq.OldestStoredAt == nil && len(cq.Requests) > 0 {
			t := cq.Requests[0].StoredAt
			cq.OldestStoredAt, cq.OldestAgeMs = &t, ans.At.Sub(t.Time).Milliseconds()
		}
		ans.Conversations = append(ans.Conversations, *cq)
	}
	slices.SortFunc(ans.Conversations, func(a, b ConversationQueue) int { return strings.Compare(a.ParticipantID, b.ParticipantID) })
	return ans, nil
}

func compareUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Placement returns the inbox partition of the workflow instance's requests and the live host
// that owns it, as every host computes it from the heartbeats (package placement): "" when no
// live host runs the agent.
func (c *Client) Placement(ctx context.Context, wf ident.Workflow) (partition int, owner string, err error) {
	partitions, err := c.Partitions(ctx, wf.Agent)
	if err != nil {
		return 0, "", fmt.Errorf("inspect: %w", err)
	}
	p := subject.InboxPartition(wf.Tenant, wf.ID(), partitions)
	return p, c.owner(wf.Agent, partitions, p), nil
}

// owner is the live host that owns the agent's partition p of partitions; "" when no live host
// runs the agent.
func (c *Client) owner(agent string, partitions, p int) string {
	hosts := c.Dir.LiveHosts(agent)
	if len(hosts) == 0 {
		return ""
	}
	ids := make([]string, len(hosts))
	for i, h := range hosts {
		ids[i] = h.ID
	}
	owners := placement.Assign(agent, partitions, ids)
	if p < 0 || p >= len(owners) {
		return ""
	}
	return owners[p]
}

// inboxOf reads how many requests of each conversation of the instance the inbox stores, and
// when the oldest of each (up to maxInboxConversations) was stored.
func (c *Client) inboxOf(ctx context.Context, agent string, p int, tenant, workflowID string) (map[string]uint64, map[string]time.Time, error) {
	st, err := c.JS.Stream(ctx, subject.InboxStream(agent))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil, nil // no inbox: nothing waits
	}
	if err != nil {
		return nil, nil, fmt.Errorf("inspect: reading the inbox: %w", err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject.InstanceInbox(agent, p, tenant, workflowID)))
	if err != nil {
		return nil, nil, fmt.Errorf("inspect: reading the inbox: %w", err)
	}
	stored := info.State.Subjects
	oldest := make(map[string]time.Time, len(stored))
	subjects := make([]string, 0, len(stored))
	for subj := range stored {
		subjects = append(subjects, subj)
	}
	slices.Sort(subjects)
	if len(subjects) > maxInboxConversations {
		subjects = subjects[:maxInboxConversations]
	}
	var mu sync.Mutex
	_ = readEach(len(subjects), func(i int) error {
		m, err := bus.LeaderGet(ctx, c.NC, subject.InboxStream(agent), 1, subjects[i])
		if err != nil {
			return nil // acknowledged meanwhile, or unreadable: its age stays unknown
		}
		mu.Lock()
		oldest[subjects[i]] = m.Time
		mu.Unlock()
		return nil
	})
	return stored, oldest, nil
}

// inspectable lists the hosts with a fresh heartbeat, leaving ones included, that run the agent
// (every host when agent is "") and answer on their inspect subject.
func (c *Client) inspectable(agent string) []registry.SeenHost {
	var out []registry.SeenHost
	for _, h := range c.Dir.Hosts() {
		if h.Has(registry.FeatureInspect) && (agent == "" || slices.Contains(h.Agents, agent)) {
			out = append(out, h)
		}
	}
	return out
}

// askHosts sends q to every inspectable host of the agent at once and returns their answers to
// OpHeld, and the hosts that did not answer.
func (c *Client) askHosts(ctx context.Context, agent string, q Query) ([]Held, []string) {
	hosts := c.inspectable(agent)
	answers := make([]Held, len(hosts))
	ok := make([]bool, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Go(func() { ok[i] = c.ask(ctx, h.ID, q, &answers[i]) == nil && answers[i].Error == "" })
	}
	wg.Wait()
	var held []Held
	var missed []string
	for i, h := range hosts {
		if ok[i] {
			held = append(held, answers[i])
		} else {
			missed = append(missed, h.ID)
		}
	}
	return held, missed
}

// ask sends q to one host and decodes its answer into out.
func (c *Client) ask(ctx context.Context, host string, q Query, out any) error {
	data, err := json.Marshal(q)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, hostTimeout)
	defer cancel()
	m, err := c.NC.RequestWithContext(ctx, subject.Inspect(host), data)
	if err != nil {
		return fmt.Errorf("inspect: asking host %s: %w", host, err)
	}
	if err := json.Unmarshal(m.Data, out); err != nil {
		return fmt.Errorf("inspect: host %s answered: %w", host, err)
	}
	return nil
}

// Host reads what one host holds: every conversation, or only the tenant's when tenant is set.
func (c *Client) Host(ctx context.Context, hostID, tenant string) (Held, error) {
	var ans Held
	if err := c.ask(ctx, hostID, Query{Op: OpHeld, Tenant: tenant}, &ans); err != nil {
		return Held{}, err
	}
	if ans.Error != "" {
		return Held{}, fmt.Errorf("inspect: host %s: %s", hostID, ans.Error)
	}
	return ans, nil
}

// Retry runs a request of the instance that waits in retry backoff at once. It returns the
// request as it stood, ErrNotHeld when no host holds it and ErrNotInBackoff (with the request)
// when one holds it but it does not wait to be retried.
func (c *Client) Retry(ctx context.Context, tenant, workflowID, requestID string) (QueuedRequest, error) {
	wf, err := ident.ParseWorkflowID(workflowID)
	if err != nil {
		return QueuedRequest{}, err
	}
	if wf.Tenant != tenant {
		return QueuedRequest{}, ErrNotHeld
	}
	hosts := c.inspectable(wf.Agent)
	answers := make([]Retried, len(hosts))
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	q := Query{Op: OpRetry, Tenant: tenant, WorkflowID: workflowID, RequestID: requestID}
	for i, h := range hosts {
		wg.Go(func() { errs[i] = c.ask(ctx, h.ID, q, &answers[i]) })
	}
	wg.Wait()
	var (
		found    *QueuedRequest
		notAsked []string
	)
	now := time.Now()
	for i, a := range answers {
		if errs[i] != nil {
			notAsked = append(notAsked, hosts[i].ID)
			continue
		}
		if a.Request == nil {
			continue
		}
		r := QueuedRequest{Request: *a.Request, Host: a.Host, AgeMs: now.Sub(a.Request.StoredAt.Time).Milliseconds()}
		switch a.Outcome {
		case RetryStarted:
			return r, nil
		case RetryNotInBackoff:
			found = &r
		}
	}
	switch {
	case found != nil:
		return *found, ErrNotInBackoff
	case len(notAsked) > 0:
		return QueuedRequest{}, fmt.Errorf("inspect: hosts %s did not answer: %w", strings.Join(notAsked, ", "), errs[slices.IndexFunc(errs, func(e error) bool { return e != nil })])
	}
	return QueuedRequest{}, ErrNotHeld
}
