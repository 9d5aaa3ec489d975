// Package deadletter keeps the requests whose handler failed on every attempt: a workflow host
// moves such a request, with its last error, from the inbox to the AGENTBUS_DEADLETTERS stream,
// so that it no longer holds up its conversation, and an operator lists the dead letters of a
// tenant, looks at one, and sends it again (replay) or throws it away (discard).
//
// A dead letter is the inbox message as it was, so a replay is the same request, with the same
// requestId, published to the inbox again. It counts in its tenant's storage usage while it
// exists (usage.Kept). It does not decide who may see dead letters; the ingress checks the
// caller's tenant first.
package deadletter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/msgkind"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/timefmt"
	"github.com/agentbus/agentbus/pkg/tracing"
	"github.com/agentbus/agentbus/pkg/usage"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// Errors callers test for.
var (
	// ErrNotFound means the tenant has no dead letter with that id.
	ErrNotFound = errors.New("no such dead letter")
	// ErrGone means the dead letter's request was too large for one message and its stored copy
	// has expired, so it cannot be sent again.
	ErrGone = errors.New("the dead letter's request has expired")
)

// Letter is one dead letter.
type Letter struct {
	// ID is the dead letter's sequence in the stream: stable, and increasing with time.
	ID            uint64            `json:"id"`
	TenantID      string            `json:"tenantId"`
	AgentName     string            `json:"agentName"`
	WorkflowID    string            `json:"workflowId"`
	ParticipantID string            `json:"participantId"`
	RequestID     string            `json:"requestId"`
	Type          string            `json:"type"`
	Method        string            `json:"method,omitempty"`
	Text          string            `json:"text,omitempty"`
	Params        map[string]string `json:"params,omitempty"`
	Data          json.RawMessage   `json:"data,omitempty"`
	// BodySize is the size of a webhook call's body, which is not shown.
	BodySize int `json:"bodySize,omitempty"`
	// Error is the handler's last error, as the host logged it.
	Error    string `json:"error"`
	Attempts int    `json:"attempts"`
	// ReceivedAt is when the ingress accepted the request, DeadAt when it was given up.
	ReceivedAt timefmt.Time `json:"receivedAt"`
	DeadAt     timefmt.Time `json:"deadAt"`
}

// Store reads and writes dead letters: a bus.Kept store over the dead-letter stream (the
// undelivered events of pkg/subscription are its other use).
type Store struct {
	kept   bus.Kept
	js     jetstream.JetStream
	claims *bus.Blobs
	meter  *usage.Meter
}

// NewStore returns a Store over the bus's dead-letter stream.
func NewStore(res *bus.Resources, claims *bus.Blobs) *Store {
	s := &Store{js: res.JS, claims: claims}
	s.kept = bus.Kept{Stream: res.DeadLetters, JS: res.JS, Noun: "dead letter", NotFound: ErrNotFound,
		Count: func(tenant string, bytes int64, kept time.Time) { s.meter.AddAt(tenant, usage.Kept, bytes, kept) }}
	return s
}

// Meter makes the store count the dead letters it keeps and removes in their tenants' usage
// (usage.Kept); call it before the store is used.
func (s *Store) Meter(m *usage.Meter) { s.meter = m }

// Add keeps a request as a dead letter: data is the inbox message's payload as delivered (a
// request too large for one message stays in the claims store, which Add does not touch),
// inboxSeq its sequence in the inbox, cause the last error. A second Add of the same delivery
// within the dedupe window stores nothing new and returns the first one's id.
func (s *Store) Add(ctx context.Context, req *agentbusv1.Request, data []byte, inboxSeq uint64, attempts int, cause string) (uint64, error) {
	msg := &nats.Msg{
		Subject: subject.DeadLetter(req.GetTenantId(), req.GetAgentName(), req.GetWorkflowId(), req.GetParticipantId()),
		Data:    data,
		Header:  nats.Header{},
	}
	return s.kept.Add(ctx, req.GetTenantId(), msg, subject.DeadLetterMsgID(req.GetTenantId(), req.GetAgentName(), inboxSeq), cause, uint64(max(attempts, 0)))
}

// ListOptions select a page of dead letters.
type ListOptions struct {
	// After continues after this id (the Next of the previous page); 0 starts at the oldest.
	After uint64
	// Limit is the page size: default 50, at most 200.
	Limit int
	// Agent keeps only the dead letters of this agent when not empty.
	Agent string
	// WorkflowID, with Agent, keeps only the dead letters of this workflow instance.
	WorkflowID string
}

// Page sizes of List.
const (
	DefaultLimit = bus.KeptDefaultLimit
	MaxLimit     = bus.KeptMaxLimit
)

// List returns a page of the tenant's dead letters, oldest first, and the id to continue after
// (0 when there are no more).
func (s *Store) List(ctx context.Context, tenant string, opt ListOptions) ([]Letter, uint64, error) {
	filter := subject.TenantDeadLetters(tenant)
	if opt.Agent != "" {
		filter = subject.AgentDeadLetters(tenant, opt.Agent)
	}
	if opt.Agent != "" && opt.WorkflowID != "" {
		filter = subject.InstanceDeadLetters(tenant, opt.Agent, opt.WorkflowID)
	}
	raws, next, err := s.kept.Page(ctx, filter, opt.After, opt.Limit)
	if err != nil {
		return nil, 0, err
	}
	var out []Letter
	for _, raw := range raws {
		l, err := Decode(raw)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, l)
	}
	return out, next, nil
}

// Get returns one of the tenant's dead letters.
func (s *Store) Get(ctx context.Context, tenant string, id uint64) (Letter, error) {
	raw, err := s.get(ctx, tenant, id)
	if err != nil {
		return Letter{}, err
	}
	return Decode(raw)
}

// get reads one of the tenant's dead letters: another tenant's is not found, as one that does
// not exist.
func (s *Store) get(ctx context.Context, tenant string, id uint64) (*jetstream.RawStreamMsg, error) {
	return s.kept.Get(ctx, id, subject.TenantDeadLetters(tenant))
}

// Replay publishes the dead letter's request to the inbox again, to be handled as if it had just
// arrived (a fresh count of attempts), and then removes the dead letter. The request keeps its
// requestId; nobody waits for its reply, which is stored in history (and in the result cache
// when the caller had sent an idempotency key). The republished message carries ctx's trace
// context, so that the handler's span is a child of the replay's.
func (s *Store) Replay(ctx context.Context, tenant string, id uint64) (Letter, error) {
	raw, err := s.get(ctx, tenant, id)
	if err != nil {
		return Letter{}, err
	}
	l, err := Decode(raw)
	if err != nil {
		return Letter{}, err
	}
	req := new(agentbusv1.Request)
	if err := proto.Unmarshal(raw.Data, req); err != nil {
		return Letter{}, fmt.Errorf("decoding dead letter %d: %w", id, err)
	}
	if ref := req.GetEnvelopeRef(); ref != nil {
		if _, err := s.claims.Get(ctx, ref); err != nil {
			if errors.Is(err, jetstream.ErrObjectNotFound) {
				return Letter{}, ErrGone
			}
			return Letter{}, fmt.Errorf("checking the dead letter's stored request: %w", err)
		}
	}
	data := raw.Data
	if req.GetReplyTo() != "" {
		// The caller that waited for the dead request is long gone; a later one must not get
		// this reply.
		req.ReplyTo = ""
		if data, err = proto.Marshal(req); err != nil {
			return Letter{}, fmt.Errorf("encoding dead letter %d: %w", id, err)
		}
	}
	msg := &nats.Msg{Subject: subject.Inbox(req.GetAgentName(), req.GetTenantId(), req.GetWorkflowId(), req.GetParticipantId()),
		Data: data, Header: nats.Header{}}
	// The replay's handler run continues the trace of whoever replayed it (the ingress's span of
	// the replay request), not the dead request's, which ended when it was given up.
	tracing.Inject(ctx, msg.Header)
	msg.Header.Set(subject.HeaderReplay, strconv.FormatUint(id, 10))
	if _, err := s.js.PublishMsg(ctx, msg, jetstream.WithMsgID(subject.ReplayMsgID(tenant, req.GetRequestId(), id))); err != nil {
		return Letter{}, fmt.Errorf("publishing the replayed request: %w", err)
	}
	if err := s.kept.Remove(ctx, tenant, raw); err != nil && !errors.Is(err, ErrNotFound) { // not found: removed meanwhile
		return Letter{}, fmt.Errorf("replayed, then %w", err)
	}
	return l, nil
}

// Discard removes a dead letter, and the stored copy of its request when it was too large for
// one message.
func (s *Store) Discard(ctx context.Context, tenant string, id uint64) error {
	raw, err := s.get(ctx, tenant, id)
	if err != nil {
		return err
	}
	if err := s.kept.Remove(ctx, tenant, raw); err != nil {
		return err
	}
	req := new(agentbusv1.Request)
	if proto.Unmarshal(raw.Data, req) == nil && req.GetEnvelopeRef() != nil {
		if err := s.claims.Delete(ctx, req.GetEnvelopeRef()); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return fmt.Errorf("removing the dead letter's stored request: %w", err)
		}
	}
	return nil
}

// PurgeTenant removes every dead letter of a tenant (the tenant is being deleted).
func (s *Store) PurgeTenant(ctx context.Context, tenant string) error {
	return s.kept.Purge(ctx, subject.TenantDeadLetters(tenant), tenant)
}

// Decode reads a stored dead letter, as the stream holds it. A request kept by claim check
// shows its routing fields.
func Decode(raw *jetstream.RawStreamMsg) (Letter, error) {
	req := new(agentbusv1.Request)
	if err := proto.Unmarshal(raw.Data, req); err != nil {
		return Letter{}, fmt.Errorf("decoding dead letter %d: %w", raw.Sequence, err)
	}
	attempts := bus.Attempts(raw)
	kind := msgkind.Of(req.GetKind())
	l := Letter{
		ID:            raw.Sequence,
		TenantID:      req.GetTenantId(),
		AgentName:     req.GetAgentName(),
		WorkflowID:    req.GetWorkflowId(),
		ParticipantID: req.GetParticipantId(),
		RequestID:     req.GetRequestId(),
		Type:          kind.Name,
		Params:        req.GetParams(),
		BodySize:      len(req.GetBody()),
		Error:         raw.Header.Get(subject.HeaderError),
		Attempts:      attempts,
		DeadAt:        timefmt.Of(raw.Time.UTC()),
	}
	if ms := req.GetCreatedAtMs(); ms > 0 {
		l.ReceivedAt = timefmt.Of(time.UnixMilli(ms).UTC())
	}
	if kind.Method {
		l.Method = req.GetMethod()
	} else {
		l.Text = req.GetText()
	}
	if d := req.GetData(); len(d) > 0 && json.Valid(d) {
		l.Data = json.RawMessage(d)
	}
	return l, nil
}

// Page is the answer of the dead-letter list: a page of letters, oldest first. Next, when not 0,
// is the after of the next page.
type Page struct {
	DeadLetters []Letter `json:"deadLetters"`
	Next        uint64   `json:"next,omitempty"`
}

// Replayed is the answer of a replay: which dead letter was sent again, and the request it
// became again.
type Replayed struct {
	Replayed   uint64 `json:"replayed"`
	RequestID  string `json:"requestId"`
	WorkflowID string `json:"workflowId"`
}
