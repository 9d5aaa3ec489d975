// Package schedule keeps the agents' timers: named message schedules of a workflow instance, held
// by JetStream itself (the Nats-Schedule header of nats-server 2.12 and later), so that they
// survive every process and need no timer of ours. A tenant's timers are kept in the stream of
// its shard (subject.TimerShard, bus.Resources.Timers): the server fires each stream's due
// timers one after the other and the streams at once, so that one tenant's thousands of timers
// falling due together hold up only the tenants of its shard. Timers set before the shards, in
// AGENTBUS_SCHEDULES (bus.Resources.Schedules), fire and are relayed from there until they are
// set again (which moves them to the shard) or cancelled.
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
	"slices"
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
	js jetstream.JetStream
	// shards are the timer streams by shard; legacy is the stream of the timers a release before
	// the shards set, its stream nil where there is none.
	shards []timers
	legacy timers
	meter  *usage.Meter
}

// timers is one stream of timers and its shard number (subject.LegacyTimers for the legacy one).
type timers struct {
	shard  int
	stream jetstream.Stream
}

// NewStore returns a Store over the timer streams of res (bus.Resources.Timers and Schedules),
// publishing through js.
func NewStore(js jetstream.JetStream, res *bus.Resources) *Store {
	s := &Store{js: js, legacy: timers{subject.LegacyTimers, res.Schedules}}
	for shard, st := range res.Timers {
		s.shards = append(s.shards, timers{shard, st})
	}
	return s
}

// home is the stream tenant's timers are set in.
func (s *Store) home(tenant string) timers { return s.shards[subject.TimerShard(tenant)] }

// streams are the streams a tenant's timers may be in: its shard's, and the legacy one if any.
func (s *Store) streams(tenant string) []timers {
	if s.legacy.stream == nil {
		return []timers{s.home(tenant)}
	}
	return []timers{s.home(tenant), s.legacy}
}

// all are every timer stream: the legacy one if any, then the shards.
func (s *Store) all() []timers {
	if s.legacy.stream == nil {
		return s.shards
	}
	return append([]timers{s.legacy}, s.shards...)
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
	home := s.home(sch.Tenant)
	msg := &nats.Msg{Subject: subject.Schedule(home.shard, sch.Tenant, sch.WorkflowID, sch.Name), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.ScheduleHeader, sch.Pattern)
	msg.Header.Set(jetstream.ScheduleTargetHeader, subject.ScheduleFired(home.shard, sch.Tenant, sch.WorkflowID, sch.Name))
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
		if replaced, err = storedBytes(ctx, home.stream, msg.Subject); err != nil {
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
	// One of that name set before the shards is replaced too, once this one is stored (a refused
	// pattern leaves it as it was). A Set that fails here is tried again by the handler's retry,
	// which removes it then.
	if s.legacy.stream == nil {
		return nil
	}
	legacy, err := s.cancelIn(ctx, s.legacy, sch.Tenant, sch.WorkflowID, sch.Name)
	if err != nil {
		return err
	}
	if legacy > 0 {
		s.meter.AddTimers(sch.Tenant, -legacy)
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

// storedBytes reads the size a schedule of subj in stream stored with itself (0 when there is
// none, or it was set before sizes were).
func storedBytes(ctx context.Context, stream jetstream.Stream, subj string) (int64, error) {
	raw, err := stream.GetLastMsgForSubject(ctx, subj)
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
	found := false
	for _, st := range s.streams(tenant) {
		size, err := s.cancelIn(ctx, st, tenant, workflowID, name)
		if err != nil {
			return false, err
		}
		if size >= 0 {
			s.meter.AddTimers(tenant, -size)
			found = true
		}
	}
	return found, nil
}

// cancelIn removes the instance's schedule of that name from st, and returns the size it stored
// with itself; -1 when st has none. The caller counts it off.
func (s *Store) cancelIn(ctx context.Context, st timers, tenant, workflowID, name string) (int64, error) {
	subj := subject.Schedule(st.shard, tenant, workflowID, name)
	raw, err := st.stream.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return -1, nil
	} else if err != nil {
		return 0, fmt.Errorf("reading schedule %q: %w", name, err)
	}
	// Only up to the schedule read: one set again meanwhile stays, as if set after the cancel.
	if err := st.stream.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(raw.Sequence+1)); err != nil {
		return 0, fmt.Errorf("cancelling schedule %q: %w", name, err)
	}
	return headerBytesValue(raw.Header), nil
}

// DeleteTenant cancels every timer of a tenant being deleted and drops what they fired that no
// host relayed yet: a deleted tenant's recurring timers would otherwise fire for ever, each
// running a handler for a tenant that is gone, in the relay and on the hosts every tenant
// shares. What they took is counted off the tenant's usage; one set between the reading and the
// purge goes without being counted off.
func (s *Store) DeleteTenant(ctx context.Context, tenant string) error {
	for _, st := range s.streams(tenant) {
		subjects, err := subjectsOf(ctx, st.stream, subject.TenantSchedules(st.shard, tenant))
		if err != nil {
			return err
		}
		var stored int64
		for _, subj := range subjects {
			n, err := storedBytes(ctx, st.stream, subj)
			if err != nil {
				return fmt.Errorf("reading schedule: %w", err)
			}
			stored += n
		}
		for _, filter := range []string{subject.TenantSchedules(st.shard, tenant), subject.TenantSchedulesFired(st.shard, tenant)} {
			if err := st.stream.Purge(ctx, jetstream.WithPurgeSubject(filter)); err != nil {
				return fmt.Errorf("cancelling the tenant's timers: %w", err)
			}
		}
		s.meter.AddTimers(tenant, -stored)
	}
	return nil
}

// List returns the instance's schedules, by name.
func (s *Store) List(ctx context.Context, tenant, workflowID string) ([]Schedule, error) {
	var out []Schedule
	for _, st := range s.streams(tenant) {
		list, err := list(ctx, st.stream, subject.InstanceSchedules(st.shard, tenant, workflowID))
		if err != nil {
			return nil, err
		}
		for _, sch := range list {
			// Set again in the shard between the two readings: the newer one.
			if !slices.ContainsFunc(out, func(o Schedule) bool { return o.Name == sch.Name }) {
				out = append(out, sch)
			}
		}
	}
	sortByName(out)
	return out, nil
}

// Pending reports whether the instance has a schedule that may still fire.
func (s *Store) Pending(ctx context.Context, tenant, workflowID string) (bool, error) {
	for _, st := range s.streams(tenant) {
		subjects, err := subjectsOf(ctx, st.stream, subject.InstanceSchedules(st.shard, tenant, workflowID))
		if err != nil || len(subjects) > 0 {
			return len(subjects) > 0, err
		}
	}
	return false, nil
}

// subjectsOf returns stream's subjects that match filter and hold a message.
func subjectsOf(ctx context.Context, stream jetstream.Stream, filter string) ([]string, error) {
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(filter))
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

// list returns stream's schedules under filter.
func list(ctx context.Context, stream jetstream.Stream, filter string) ([]Schedule, error) {
	subjects, err := subjectsOf(ctx, stream, filter)
	if err != nil {
		return nil, err
	}
	out := make([]Schedule, 0, len(subjects))
	for _, subj := range subjects {
		raw, err := stream.GetLastMsgForSubject(ctx, subj)
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
