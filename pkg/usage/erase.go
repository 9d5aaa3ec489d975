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
// same id made later starts from nothing. The Meters of every process publish what they counted
// up to a FlushInterval later, so it zeroes the counters again once that has passed
// (eraseSettle): EraseTenant takes a little over a second. An invalid tenant id is refused.
func EraseTenant(ctx context.Context, js jetstream.JetStream, tenant string) error {
	if err := ZeroTenant(ctx, js, tenant); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return fmt.Errorf("erasing the usage counters of %s: %w", tenant, ctx.Err())
	case <-time.After(eraseSettle):
	}
	return ZeroTenant(ctx, js, tenant)
}

// ZeroTenant is one pass of EraseTenant: it zeroes and removes the counters tenant has now.
func ZeroTenant(ctx context.Context, js jetstream.JetStream, tenant string) error {
	if err := subject.CheckTenant("tenant", tenant); err != nil {
		return err // a filter is built of it
	}
	for _, f := range []struct{ stream, filter string }{
		{subject.UsageStream, subject.TenantUsageDays(tenant)},
		{subject.UsageTotalsStream, subject.TenantUsageTotals(tenant)},
	} {
		if err := eraseCounters(ctx, js, f.stream, f.filter); err != nil {
			return fmt.Errorf("erasing the usage counters of %s: %w", tenant, err)
		}
	}
	return nil
}

// eraseSettle is how long EraseTenant waits before its second pass: a Meter's flush, and the
// publish's own time.
const eraseSettle = FlushInterval + 250*time.Millisecond

// eraseCounters zeroes the counters of stream under filter and purges them up to the zeroing.
func eraseCounters(ctx context.Context, js jetstream.JetStream, stream, filter string) error {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("opening %s: %w", stream, err)
	}
	values, err := lastValues(ctx, js, s, filter)
	if err != nil || len(values) == 0 {
		return err
	}
	var last uint64
	for subj, v := range values {
		msg := &nats.Msg{Subject: subj, Header: nats.Header{}}
		msg.Header.Set(subject.HeaderIncr, strconv.FormatInt(-v, 10))
		ack, err := js.PublishMsg(ctx, msg)
		if err != nil {
			return fmt.Errorf("zeroing %s: %w", subj, err)
		}
		last = max(last, ack.Sequence)
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(filter), jetstream.WithPurgeSequence(last+1)); err != nil {
		return fmt.Errorf("purging %s: %w", stream, err)
	}
	return nil
}

// lastValues reads the value of each counter of s under filter, by subject, from the stream's
// leader: the subjects it holds under filter, then the last message of each. Not an ordered
// consumer's deliveries: its pending count may read zero before the last of them while writers
// add to the counters (bus.Scan), and a counter it missed would stay.
func lastValues(ctx context.Context, js jetstream.JetStream, s jetstream.Stream, filter string) (map[string]int64, error) {
	name := s.CachedInfo().Config.Name
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	out := make(map[string]int64, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		m, err := bus.LeaderLast(ctx, js.Conn(), name, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // purged since
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", subj, err)
		}
		if v, ok := counterValue(m.Data); ok {
			out[subj] = v
		}
	}
	return out, nil
}
