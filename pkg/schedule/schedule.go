// Package schedule keeps the agents' timers: named message schedules of a workflow instance, held
// by JetStream itself (the Nats-Schedule header of nats-server 2.12 and later) in the
// AGENTBUS_SCHEDULES stream, so that they survive every process and need no timer of ours.
//
// A schedule's one message is the request it sends when it is due. The server publishes that
// request to the schedule's fired subject in the same stream; Relay moves fired requests to the
// inbox, where a host handles them like any other request of their conversation. Publishing a
// schedule of the same name again replaces it; Cancel removes it.
//
// A metered Store (Meter) counts what the schedules take in the stream in their tenants' usage:
// each schedule carries its own size (subject.HeaderStoredBytes), which setting it again or
// cancelling it reads back, and which the copy a one-time schedule fires carries to the relay
// after the server removed the schedule.
//
// It does not run handlers (package agent does) nor serve HTTP (package ingress lists and cancels
// schedules through it).
package schedule

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/timefmt"
	"github.com/agentbus/agentbus/pkg/usage"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// ErrInvalid means a schedule's pattern, time zone or name was refused.
var ErrInvalid = errors.New("invalid schedule")

// Schedule is one named timer of a workflow instance.
type Schedule struct {
	// Name identifies the schedule within its instance.
	Name string `json:"name"`
	// Tenant and WorkflowID name the instance that owns the schedule.
	Tenant     string `json:"tenantId"`
	WorkflowID string `json:"workflowId"`
	// Pattern is when it fires, as JetStream's Nats-Schedule header states it: "@at {RFC 3339
	// time}" once, "@every {duration}" repeatedly (at least 1s), or a cron expression with six
	// fields (seconds first) or one of @hourly, @daily, @weekly, @monthly, @yearly.
	Pattern string `json:"schedule"`
	// TimeZone is the IANA zone a cron pattern is read in; empty means UTC.
	TimeZone string `json:"timeZone,omitempty"`
	// Request is what the schedule sends each time it fires. Its request id is made anew for
	// each firing.
	Request *agentbusv1.Request `json:"-"`
	// Sequence is the schedule message's sequence in the stream (set by List).
	Sequence uint64 `json:"-"`
	// Created is when the schedule was last set (set by List).
	Created time.Time `json:"createdAt"`
}

// At is the pattern of a schedule that fires once at t, to the millisecond.
func At(t time.Time) string { return "@at " + timefmt.Format(t) }

// Every is the pattern of a schedule that fires every d (at least one second).
func Every(d time.Duration) string { return "@every " + d.String() }

// Store sets, lists and cancels schedules.
type Store struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	meter  *usage.Meter
}

// NewStore returns a Store over the schedules stream (bus.Resources.Schedules).
func NewStore(js jetstream.JetStream, stream jetstream.Stream) *Store {
	return &Store{js: js, stream: stream}
}

// Meter makes s count what the schedules it sets, cancels and relays take in the stream, in
// their tenants' usage (usage.Meter.AddTimers), and returns s.
func (s *Store) Meter(m *usage.Meter) *Store {
	s.meter = m
	return s
}

// firedTTL is how long a fired request stays in the stream when no host relays it (every host
// down): longer than any outage a timer should survive, short enough that the stream does not
// grow without bound.
const firedTTL = 7 * 24 * time.Hour

// Set publishes the schedule, replacing one of the same name. dedupeID, when not empty, makes a
// second Set with the same id within the de-duplication window a no-op: a handler run again
// after a crash sets its schedules once.
func (s *Store) Set(ctx context.Context, sch Schedule, dedupeID string) error {
	if err := validName(sch.Name); err != nil {
		return err
	}
	req := proto.Clone(sch.Request).(*agentbusv1.Request)
	req.Timer = sch.Name
	data, err := proto.Marshal(req)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	msg := &nats.Msg{Subject: subject.Schedule(sch.Tenant, sch.WorkflowID, sch.Name), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.ScheduleHeader, sch.Pattern)
	msg.Header.Set(jetstream.ScheduleTargetHeader, subject.ScheduleFired(sch.Tenant, sch.WorkflowID, sch.Name))
	msg.Header.Set(jetstream.ScheduleTTLHeader, firedTTL.String())
	if sch.TimeZone != "" {
		msg.Header.Set(jetstream.ScheduleTimeZoneHeader, sch.TimeZone)
	}
	if dedupeID != "" {
		msg.Header.Set(jetstream.MsgIDHeader, dedupeID)
	}
	// The server makes every schedule replace the one before it on its subject: said here, so
	// that the size below is what the stream stores.
	msg.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	size := withStoredBytes(msg)
	var replaced int64
	if s.meter != nil {
		var err error
		if replaced, err = s.storedBytes(ctx, msg.Subject); err != nil {
			return fmt.Errorf("reading schedule %q: %w", sch.Name, err)
		}
	}
	ack, err := bus.Publish(ctx, s.js, msg)
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.Code == 400 {
			return fmt.Errorf("%w: %s", ErrInvalid, apiErr.Description)
		}
		return fmt.Errorf("setting schedule %q: %w", sch.Name, err)
	}
	if !ack.Duplicate {
		s.meter.AddTimers(sch.Tenant, size-replaced)
	}
	return nil
}

// withStoredBytes sets msg's subject.HeaderStoredBytes to what msg takes in the stream, that
// header included, and returns it.
func withStoredBytes(msg *nats.Msg) int64 {
	msg.Header.Del(subject.HeaderStoredBytes)
	base := bus.RecordBytes(msg.Subject, bus.HeaderBytes(msg.Header), len(msg.Data))
	line := int64(len(subject.HeaderStoredBytes) + len(": ") + len("\r\n"))
	if len(msg.Header) == 0 {
		line += int64(len("NATS/1.0\r\n") + len("\r\n") + 4) // a header block, and its length in the record
	}
	n := base + line
	for range 3 { // its own digits: settles in one or two steps
		n = base + line + int64(len(strconv.FormatInt(n, 10)))
	}
	msg.Header.Set(subject.HeaderStoredBytes, strconv.FormatInt(n, 10))
	return n
}

// storedBytes reads the size a schedule of subj stored with itself (0 when there is none, or it
// was set before sizes were).
func (s *Store) storedBytes(ctx context.Context, subj string) (int64, error) {
	raw, err := s.stream.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return headerBytesValue(raw.Header), nil
}

// headerBytesValue reads subject.HeaderStoredBytes; 0 when it is missing or not a number.
func headerBytesValue(h nats.Header) int64 {
	n, _ := strconv.ParseInt(h.Get(subject.HeaderStoredBytes), 10, 64)
	return max(n, 0)
}

// Cancel removes the instance's schedule of that name. It reports whether there was one: a name
// Set would refuse names none, and is not looked up (it would not fit in a subject).
func (s *Store) Cancel(ctx context.Context, tenant, workflowID, name string) (bool, error) {
	if validName(name) != nil {
		return false, nil
	}
	subj := subject.Schedule(tenant, workflowID, name)
	raw, err := s.stream.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("reading schedule %q: %w", name, err)
	}
	// Only up to the schedule read: one set again meanwhile stays, as if set after the cancel.
	if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(raw.Sequence+1)); err != nil {
		return false, fmt.Errorf("cancelling schedule %q: %w", name, err)
	}
	s.meter.AddTimers(tenant, -headerBytesValue(raw.Header))
	return true, nil
}

// DeleteTenant cancels every timer of a tenant being deleted and drops what they fired that no
// host relayed yet: a deleted tenant's recurring timers would otherwise fire for ever, each
// running a handler for a tenant that is gone, in the relay and on the hosts every tenant
// shares. What they took is counted off the tenant's usage; one set between the reading and the
// purge goes without being counted off.
func (s *Store) DeleteTenant(ctx context.Context, tenant string) error {
	subjects, err := s.subjects(ctx, subject.TenantSchedules(tenant))
	if err != nil {
		return err
	}
	var stored int64
	for _, subj := range subjects {
		raw, err := s.stream.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading schedule: %w", err)
		}
		stored += headerBytesValue(raw.Header)
	}
	for _, filter := range []string{subject.TenantSchedules(tenant), subject.TenantSchedulesFired(tenant)} {
		if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(filter)); err != nil {
			return fmt.Errorf("cancelling the tenant's timers: %w", err)
		}
	}
	s.meter.AddTimers(tenant, -stored)
	return nil
}

// List returns the instance's schedules, by name.
func (s *Store) List(ctx context.Context, tenant, workflowID string) ([]Schedule, error) {
	return s.list(ctx, subject.InstanceSchedules(tenant, workflowID))
}

// Pending reports whether the instance has a schedule that may still fire.
func (s *Store) Pending(ctx context.Context, tenant, workflowID string) (bool, error) {
	subjects, err := s.subjects(ctx, subject.InstanceSchedules(tenant, workflowID))
	return len(subjects) > 0, err
}

// subjects returns the stream's subjects that match filter and hold a message.
func (s *Store) subjects(ctx context.Context, filter string) ([]string, error) {
	info, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, fmt.Errorf("listing schedules: %w", err)
	}
	out := make([]string, 0, len(info.State.Subjects))
	for subj, n := range info.State.Subjects {
		if n > 0 {
			out = append(out, subj)
		}
	}
	return out, nil
}

func (s *Store) list(ctx context.Context, filter string) ([]Schedule, error) {
	subjects, err := s.subjects(ctx, filter)
	if err != nil {
		return nil, err
	}
	out := make([]Schedule, 0, len(subjects))
	for _, subj := range subjects {
		raw, err := s.stream.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // fired (once) or cancelled in between
		}
		if err != nil {
			return nil, fmt.Errorf("reading schedule: %w", err)
		}
		sch, err := decode(raw)
		if err != nil {
			return nil, err
		}
		out = append(out, sch)
	}
	sortByName(out)
	return out, nil
}

func decode(raw *jetstream.RawStreamMsg) (Schedule, error) {
	req := new(agentbusv1.Request)
	if err := proto.Unmarshal(raw.Data, req); err != nil {
		return Schedule{}, fmt.Errorf("decoding schedule %s: %w", raw.Subject, err)
	}
	name, err := subject.ScheduleName(raw.Subject)
	if err != nil {
		return Schedule{}, err
	}
	return Schedule{
		Name: name, Tenant: req.GetTenantId(), WorkflowID: req.GetWorkflowId(),
		Pattern: raw.Header.Get(jetstream.ScheduleHeader), TimeZone: raw.Header.Get(jetstream.ScheduleTimeZoneHeader),
		Request: req, Sequence: raw.Sequence, Created: raw.Time.UTC(),
	}, nil
}

// MaxName bounds a schedule's name.
const MaxName = 128

// validName checks a schedule's name: 1 to MaxName bytes of text (subject.CheckText).
func validName(name string) error {
	if name == "" || subject.CheckText("", name, MaxName) != nil {
		return fmt.Errorf("%w: a schedule name is 1-%d bytes of text without control characters", ErrInvalid, MaxName)
	}
	return nil
}
