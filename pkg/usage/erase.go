package usage

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/subject"
)

// EraseTenant zeroes every usage counter of tenant and then removes them from the counter
// streams, for a tenant whose data was erased: every Reader following the streams reads the
// zeros (a purge alone would leave each holding the tenant's last values), and a tenant of the
// same id made later starts from nothing. It works in passes eraseSettle apart (ZeroTenant is
// one): the Meters of every process publish what they counted up to a FlushInterval later, and
// a zero stays in the stream until a Reader's consumer has had the time to deliver it, since one
// purged before its delivery is never delivered. It returns once a pass found every counter at
// zero, and old enough to remove, usually in a little over a second; after erasePasses passes
// it leaves the zeros that are left, which a tenant made with the id later starts from. An
// invalid tenant id is refused.
func EraseTenant(ctx context.Context, js jetstream.JetStream, tenant string) error {
	for pass := 1; ; pass++ {
		done, err := zeroTenant(ctx, js, tenant)
		if err != nil || done || pass == erasePasses {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("erasing the usage counters of %s: %w", tenant, ctx.Err())
		case <-time.After(eraseSettle):
		}
	}
}

// ZeroTenant is one pass of EraseTenant: it zeroes the counters tenant has now, keeping the
// zeros, and removes those of its counters that have been zero for zeroDelivered or longer.
func ZeroTenant(ctx context.Context, js jetstream.JetStream, tenant string) error {
	_, err := zeroTenant(ctx, js, tenant)
	return err
}

// zeroTenant is ZeroTenant, and reports whether it removed every counter of tenant.
func zeroTenant(ctx context.Context, js jetstream.JetStream, tenant string) (bool, error) {
	if err := subject.CheckTenant("tenant", tenant); err != nil {
		return false, err // a filter is built of it
	}
	done := true
	for _, f := range []struct{ stream, filter string }{
		{subject.UsageStream, subject.TenantUsageDays(tenant)},
		{subject.UsageTotalsStream, subject.TenantUsageTotals(tenant)},
	} {
		removed, err := eraseCounters(ctx, js, f.stream, f.filter)
		if err != nil {
			return false, fmt.Errorf("erasing the usage counters of %s: %w", tenant, err)
		}
		done = done && removed
	}
	return done, nil
}

// eraseSettle is how long EraseTenant waits between passes: a Meter's flush, and the publish's
// own time.
const eraseSettle = FlushInterval + 250*time.Millisecond

// zeroDelivered is how old a zero is removed (by the time the stream stored it): the Readers'
// consumers have delivered it by then. Below eraseSettle, so that a pass removes the zeros of
// the pass before it.
const zeroDelivered = time.Second

// erasePasses bounds EraseTenant's passes: zeros published by the last stay.
const erasePasses = 4

// eraseCounters zeroes the counters of stream under filter that hold a value, and removes
// what each of them held before its zero; it removes the counters that have been zero for
// zeroDelivered. Each counter is purged on its own subject, up to what was read of it: an
// increment published meanwhile, to any of them, is left for the next pass. It reports whether
// it removed every counter it found.
func eraseCounters(ctx context.Context, js jetstream.JetStream, stream, filter string) (bool, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return false, fmt.Errorf("opening %s: %w", stream, err)
	}
	values, err := lastValues(ctx, js, s, filter)
	if err != nil {
		return false, err
	}
	removedAll := true
	for subj, v := range values {
		upTo := v.seq + 1
		switch {
		case v.value != 0:
			msg := &nats.Msg{Subject: subj, Header: nats.Header{}}
			msg.Header.Set(subject.HeaderIncr, strconv.FormatInt(-v.value, 10))
			ack, err := js.PublishMsg(ctx, msg)
			if err != nil {
				return false, fmt.Errorf("zeroing %s: %w", subj, err)
			}
			upTo, removedAll = ack.Sequence, false
		case time.Since(v.time) < zeroDelivered:
			upTo, removedAll = v.seq, false
		}
		if err := s.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(upTo)); err != nil {
			return false, fmt.Errorf("purging %s of %s: %w", subj, stream, err)
		}
	}
	return removedAll, nil
}

// counterRead is a counter's last message as read: its value, sequence and time.
type counterRead struct {
	value int64
	seq   uint64
	time  time.Time
}

// lastValues reads the value of each counter of s under filter, by subject, from the stream's
// leader: the subjects it holds under filter, then the last message of each. Not an ordered
// consumer's deliveries: its pending count may read zero before the last of them while writers
// add to the counters (bus.Scan), and a counter it missed would stay.
func lastValues(ctx context.Context, js jetstream.JetStream, s jetstream.Stream, filter string) (map[string]counterRead, error) {
	name := s.CachedInfo().Config.Name
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	out := make(map[string]counterRead, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		m, err := bus.LeaderLast(ctx, js.Conn(), name, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // purged since
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", subj, err)
		}
		if v, ok := counterValue(m.Data); ok {
			out[subj] = counterRead{value: v, seq: m.Sequence, time: m.Time}
		}
	}
	return out, nil
}
