package usage

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
	values, err := lastValues(ctx, js, stream, filter)
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
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("opening %s: %w", stream, err)
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(filter), jetstream.WithPurgeSequence(last+1)); err != nil {
		return fmt.Errorf("purging %s: %w", stream, err)
	}
	return nil
}

// lastValues reads the value of each counter of stream under filter, by subject.
func lastValues(ctx context.Context, js jetstream.JetStream, stream, filter string) (map[string]int64, error) {
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", stream, err)
	}
	defer func() {
		if info := cons.CachedInfo(); info != nil {
			_ = js.DeleteConsumer(context.WithoutCancel(ctx), stream, info.Name)
		}
	}()
	out := make(map[string]int64)
	if info := cons.CachedInfo(); info != nil && info.NumPending == 0 {
		return out, nil
	}
	for done := false; !done; {
		batch, err := cons.FetchNoWait(256)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", stream, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			if v, ok := counterValue(m.Data()); ok {
				out[m.Subject()] = v
			}
			// An ordered consumer delivers in order: none is left after the one that says so.
			if md, err := m.Metadata(); err == nil && md.NumPending == 0 {
				done = true
			}
		}
		if err := batch.Error(); err != nil && !done {
			return nil, fmt.Errorf("reading %s: %w", stream, err)
		}
		if got == 0 {
			break // none pending
		}
	}
	return out, nil
}
