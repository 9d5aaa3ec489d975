package usage

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/subject"
)

// Reader holds every tenant's usage in memory, as the usage counters have it: it follows the
// counter streams and applies each counter's new value as it is published, so that reading a
// tenant's usage (Of) costs no NATS round trip. A tenant's bytes of a kind are the sum of its
// days whose data may still be in the store: a day counts until its end plus the kind's
// retention has passed, so the usage may still hold up to a day of data that aged out.
type Reader struct {
	cfg bus.Config
	log *slog.Logger
	// now is the clock the days are judged by; tests move it.
	now func() time.Time

	mu      sync.RWMutex
	tenants map[string]*tally

	follows []jetstream.ConsumeContext
	// applied is, by stream, the sequence of the last counter value applied (Seen); its
	// entries are made by Watch and not changed after.
	applied map[string]*atomic.Uint64
}

// tally is one tenant's counters.
type tally struct {
	days map[int32]*[numKinds]int64
	// totals are the totals counters' values, by kind less numKinds.
	totals [numTotals]int64
	// sums are the bytes of each kind within its retention, as of a moment before validUntil;
	// a zero validUntil means they are to be summed again.
	sums       [numKinds]int64
	validUntil time.Time
}

// Watch reads the usage counters of the deployment whose bus is sized by cfg (as Ensure applied
// it: bus.Resources.Config), and follows them until Close. It returns once it holds every
// counter stored when it was called, or ctx ends. While JetStream answers as a cluster still
// electing its leaders does, it tries again (bus.Starting).
func Watch(ctx context.Context, js jetstream.JetStream, cfg bus.Config, log *slog.Logger) (*Reader, error) {
	return bus.Starting(ctx, func(ctx context.Context) (*Reader, error) {
		return watch(ctx, js, cfg, log)
	})
}

// watch is one try of Watch; it stops what it started when it fails.
func watch(ctx context.Context, js jetstream.JetStream, cfg bus.Config, log *slog.Logger) (*Reader, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Reader{cfg: cfg, log: log, now: time.Now, tenants: make(map[string]*tally), applied: make(map[string]*atomic.Uint64)}
	for _, f := range []struct{ stream, filter string }{
		{subject.UsageStream, subject.UsageDaySubjects()},
		{subject.UsageTotalsStream, subject.UsageTotalSubjects()},
	} {
		if err := r.follow(ctx, js, f.stream, f.filter); err != nil {
			r.Close()
			return nil, err
		}
	}
	return r, nil
}

// follow applies the counters of one stream, from the last value of each on, and waits until
// it applied those stored now.
func (r *Reader) follow(ctx context.Context, js jetstream.JetStream, stream, filter string) error {
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return fmt.Errorf("following %s: %w", stream, err)
	}
	loaded := make(chan struct{})
	var once sync.Once
	if info := cons.CachedInfo(); info == nil || info.NumPending == 0 {
		once.Do(func() { close(loaded) })
	}
	// Set before Watch returns r, and read only after.
	applied := new(atomic.Uint64)
	r.applied[stream] = applied
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		r.apply(msg.Subject(), msg.Data())
		md, err := msg.Metadata()
		if err != nil {
			return
		}
		// An ordered consumer delivers in the stream's order.
		applied.Store(md.Sequence.Stream)
		if md.NumPending == 0 {
			once.Do(func() { close(loaded) })
		}
	})
	if err != nil {
		return fmt.Errorf("following %s: %w", stream, err)
	}
	r.follows = append(r.follows, cc)
	select {
	case <-loaded:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("reading %s: %w", stream, ctx.Err())
	}
}

// Seen reports whether r has applied the counter values of stream up to its sequence seq: a
// value a Meter published and the stream acknowledged at seq is in what Of answers. The nil
// Reader has seen everything.
func (r *Reader) Seen(stream string, seq uint64) bool {
	if r == nil {
		return true
	}
	a := r.applied[stream]
	return a == nil || a.Load() >= seq
}

// Close stops following the counters; Of answers what it had.
func (r *Reader) Close() {
	for _, cc := range r.follows {
		cc.Stop()
	}
	r.follows = nil
}

// apply takes a counter's new value.
func (r *Reader) apply(subj string, data []byte) {
	v, ok := counterValue(data)
	if !ok {
		r.log.Warn("usage counter without a value", "subject", subj)
		return
	}
	if tenant, what, err := subject.ParseUsageTotal(subj); err == nil {
		total, ok := totalNamed(what)
		if !ok {
			return
		}
		r.mu.Lock()
		r.tally(tenant).totals[total-numKinds] = v
		r.mu.Unlock()
		return
	}
	c, ok := parseDayCounter(subj)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.tally(c.tenant)
	day := t.days[c.day]
	if day == nil {
		day = new([numKinds]int64)
		t.days[c.day] = day
	}
	day[c.kind] = v
	t.validUntil = time.Time{}
}

// tally is tenant's tally, made if there is none; r.mu is held.
func (r *Reader) tally(tenant string) *tally {
	t := r.tenants[tenant]
	if t == nil {
		t = &tally{days: make(map[int32]*[numKinds]int64)}
		r.tenants[tenant] = t
	}
	return t
}

// counterValue reads a counter message's value: {"val":"123"}.
func counterValue(data []byte) (int64, bool) {
	rest, ok := bytes.CutPrefix(data, []byte(`{"val":"`))
	if !ok {
		return 0, false
	}
	num, ok := bytes.CutSuffix(rest, []byte(`"}`))
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(string(num), 10, 64)
	return v, err == nil
}

// Of is tenant's usage now: zero for a tenant that never stored anything.
func (r *Reader) Of(tenant string) Usage {
	now := r.now()
	r.mu.RLock()
	t := r.tenants[tenant]
	if t == nil {
		r.mu.RUnlock()
		return Usage{}
	}
	if now.Before(t.validUntil) {
		u := Usage{Bytes: t.sums}.withTotals(t.totals)
		r.mu.RUnlock()
		return u
	}
	r.mu.RUnlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sum(t, now)
	return Usage{Bytes: t.sums}.withTotals(t.totals)
}

// sum adds up t's days within each kind's retention at now, and forgets the days beyond every
// kind's; r.mu is held.
func (r *Reader) sum(t *tally, now time.Time) {
	t.sums = [numKinds]int64{}
	t.validUntil = now.Add(24 * time.Hour)
	for d, day := range t.days {
		end, kept := dayStart(d+1), false
		for k := range numKinds {
			until := end.Add(kinds[k].window(r.cfg))
			if !now.Before(until) {
				continue
			}
			kept = true
			t.sums[k] += day[k]
			if until.Before(t.validUntil) {
				t.validUntil = until
			}
		}
		if !kept {
			delete(t.days, d)
		}
	}
	for k := range t.sums {
		// A claim deleted by another process than the one that stored it may be counted
		// before it is: for a second, never less than nothing.
		t.sums[k] = max(t.sums[k], 0)
	}
}

// Tenants lists the tenants that have counters, sorted.
func (r *Reader) Tenants() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.tenants))
	for t := range r.tenants {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}
