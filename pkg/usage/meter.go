package usage

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/agentbus/agentbus/pkg/idle"
	"github.com/agentbus/agentbus/pkg/subject"
)

// FlushInterval is how often a Meter publishes what it counted: how stale the usage a Reader
// sees is, at most, besides NATS's own delay.
const FlushInterval = time.Second

// EarlyFlushBytes is how many bytes a Meter counts (stored or removed) before it publishes them
// without waiting for the next FlushInterval: large writes (files, claims) reach the readers of
// every process within milliseconds, so that a tenant storing them fast through several
// processes passes its quota by little; small ones cost one publish a second.
const EarlyFlushBytes = 256 << 10

// maxUnacknowledged bounds the increments a Meter keeps to send again with their
// de-duplication ids after their publish failed; past it, the oldest are added back to the
// counts not yet sent, and may then be counted twice if they were stored after all.
const maxUnacknowledged = 10000

// maxFlushCounters is how many counters a flush publishes at once, beyond those sent again: a
// tenant's totals (instances, records' and timers' bytes) and bytes of each kind, for 4096
// tenants that all stored something within the second. Counters beyond it wait for the next
// flush.
const maxFlushCounters = (3 + int(numKinds)) * 4096

// flushTimeout bounds one flush of Run.
const flushTimeout = 2 * time.Second

// maxUnseen bounds the acknowledged increments a Meter counts as pending until its Reader has
// applied them (SeenBy); past it, the oldest are no longer counted, as if seen.
const maxUnseen = 4 * maxFlushCounters

// Meter counts what a process stores, per tenant, and publishes it to the usage counters once
// a FlushInterval (Run). Counting is a map update under a lock: no NATS round trip. It is safe
// for concurrent use; the nil Meter counts nothing.
type Meter struct {
	js  jetstream.JetStream
	log *slog.Logger
	// id starts the de-duplication ids of the meter's increments, so that one sent again
	// after its acknowledgement was lost is counted once.
	id string

	mu sync.Mutex
	// pending are the counts not yet sent, by counter. tenants are, by tenant, the counts a
	// Reader may not hold yet: those pending, those sent and not acknowledged, and those
	// acknowledged that reader has not applied yet (unseen; without a reader, none).
	pending map[counter]int64
	tenants map[string]*Usage
	reader  *Reader
	unseen  []ackedIncrement
	// unacknowledged are increments sent whose publish failed, to send again as they are.
	unacknowledged []*nats.Msg
	seq            uint64
	// unflushed is the bytes counted since the last flush, stored and removed alike; past
	// EarlyFlushBytes, a count kicks flushes for one now.
	unflushed int64
	// flushes runs Run's flushes: it rests while nothing is left to publish, and the next
	// count wakes it.
	flushes *idle.Loop
}

// ackedIncrement is an increment of a counter that the stream stored at seq.
type ackedIncrement struct {
	c      counter
	n      int64
	stream string
	seq    uint64
}

// counter names one usage counter: a kind's bytes of a tenant on a day, or (kinds
// instancesTotal, stateTotal, timersTotal) one of a tenant's totals.
type counter struct {
	tenant string
	kind   Kind
	day    int32
}

// subject is the counter's subject.
func (c counter) subject() string {
	if c.kind >= numKinds {
		return subject.UsageTotal(c.tenant, totalNames[c.kind-numKinds])
	}
	return subject.UsageDay(c.tenant, c.kind.String(), dayStart(c.day).Format(subject.UsageDayLayout))
}

// NewMeter returns a Meter that publishes over nc; Run sends what it counts. log receives its
// failures to publish; nil discards them.
func NewMeter(nc *nats.Conn, log *slog.Logger) (*Meter, error) {
	// A JetStream context of its own: waiting for its asynchronous publishes waits for no one
	// else's. A flush publishes one increment per counter counted since the last: with many
	// tenants, more than the default 4000 in flight.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(maxUnacknowledged+maxFlushCounters))
	if err != nil {
		return nil, fmt.Errorf("opening JetStream: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Meter{js: js, log: log, id: nuid.Next(), pending: make(map[counter]int64), tenants: make(map[string]*Usage),
		flushes: idle.NewLoop(FlushInterval, FlushInterval)}, nil
}

// Add counts bytes of kind k that tenant stored now; negative bytes were removed.
func (m *Meter) Add(tenant string, k Kind, bytes int64) { m.AddAt(tenant, k, bytes, time.Now()) }

// AddAt counts bytes of kind k that tenant stored at the time stored: what is removed is
// subtracted from the day it was counted on.
func (m *Meter) AddAt(tenant string, k Kind, bytes int64, stored time.Time) {
	if m == nil || bytes == 0 || tenant == "" || k >= numKinds {
		return
	}
	c := counter{tenant: tenant, kind: k, day: dayOf(stored)}
	m.mu.Lock()
	m.pending[c] += bytes
	m.count(c, bytes)
	m.unflushed += max(bytes, -bytes)
	early := m.unflushed >= EarlyFlushBytes
	m.mu.Unlock()
	if early {
		m.flushes.Kick()
		return
	}
	m.flushes.Wake()
}

// CountClaim counts a claim-checked payload (bus.ClaimMeter).
func (m *Meter) CountClaim(tenant string, bytes int64, stored time.Time) {
	m.AddAt(tenant, Payloads, bytes, stored)
}

// AddInstance counts a workflow instance tenant created.
func (m *Meter) AddInstance(tenant string) { m.addTotal(tenant, instancesTotal, 1) }

// AddState counts what a write of one of tenant's instance records changed: the bytes the new
// revision takes in the store less those of the revision it replaced (0 for a new record).
func (m *Meter) AddState(tenant string, bytes int64) { m.addTotal(tenant, stateTotal, bytes) }

// AddTimers counts what setting, replacing, cancelling or firing one of tenant's timers changed
// in the bytes its schedules take in the store.
func (m *Meter) AddTimers(tenant string, bytes int64) { m.addTotal(tenant, timersTotal, bytes) }

// addTotal adds n to one of tenant's totals counters.
func (m *Meter) addTotal(tenant string, total Kind, n int64) {
	if m == nil || tenant == "" || n == 0 {
		return
	}
	c := counter{tenant: tenant, kind: total}
	m.mu.Lock()
	m.pending[c] += n
	m.count(c, n)
	m.mu.Unlock()
	m.flushes.Wake()
}

// count adds n of counter c to its tenant's counts in tenants, and drops the tenant's entry
// once they are all zero: an entry is the sum of what is outstanding, so a later count makes
// it again with the right value; m.mu is held.
func (m *Meter) count(c counter, n int64) {
	u := m.tenants[c.tenant]
	if u == nil {
		u = new(Usage)
		m.tenants[c.tenant] = u
	}
	if c.kind >= numKinds {
		*u.total(c.kind) += n
	} else {
		u.Bytes[c.kind] += n
	}
	if *u == (Usage{}) {
		delete(m.tenants, c.tenant)
	}
}

// SeenBy makes m count an increment as pending until r has applied the counter's value that
// holds it, instead of until the stream acknowledged it: between the two, r answers the value
// before the increment, and a quota checked against r's usage and m's Pending would miss it.
// It is called before m counts anything.
func (m *Meter) SeenBy(r *Reader) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reader = r
}

// Pending is what m counted of tenant that a Reader in the same process may not hold yet: not
// published yet, or (SeenBy) not applied by that Reader yet.
func (m *Meter) Pending(tenant string) Usage {
	if m == nil {
		return Usage{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forgetSeen()
	if u := m.tenants[tenant]; u != nil {
		return *u
	}
	return Usage{}
}

// forgetSeen stops counting the acknowledged increments that m's reader has applied, oldest
// first, and the oldest beyond maxUnseen; m.mu is held.
func (m *Meter) forgetSeen() {
	i := 0
	for ; i < len(m.unseen); i++ {
		a := m.unseen[i]
		if len(m.unseen)-i <= maxUnseen && !m.reader.Seen(a.stream, a.seq) {
			break
		}
		m.count(a.c, -a.n)
	}
	if i == len(m.unseen) {
		m.unseen = m.unseen[:0]
	} else {
		m.unseen = m.unseen[i:]
	}
}

// acknowledged stops counting an increment the stream stored at ack, at once without a reader
// or once the reader has applied it.
func (m *Meter) acknowledged(msg *nats.Msg, ack *jetstream.PubAck) {
	c, n, ok := parseIncrement(msg)
	if !ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.reader == nil || ack == nil {
		m.count(c, -n)
		return
	}
	m.unseen = append(m.unseen, ackedIncrement{c: c, n: n, stream: ack.Stream, seq: ack.Sequence})
}

// nothingToPublish reports whether nothing is left to publish.
func (m *Meter) nothingToPublish() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.pending) == 0 && len(m.unacknowledged) == 0
}

// Run publishes what m counted every FlushInterval, and as soon as EarlyFlushBytes are counted,
// until ctx ends. What is counted after the last of these is published by a Flush of the
// caller's, with the time it has left. While nothing is left to publish its flushes rest: an
// idle host's meter does not wake every second. Calls must not overlap.
func (m *Meter) Run(ctx context.Context) {
	m.flushes.Start(FlushInterval, func() bool {
		if m.nothingToPublish() {
			return true
		}
		fctx, cancel := context.WithTimeout(ctx, flushTimeout)
		if err := m.Flush(fctx); err != nil && ctx.Err() == nil {
			m.log.Warn("publishing usage counts", "err", err)
		}
		cancel()
		return false
	})
	<-ctx.Done()
	m.flushes.Stop()
}

// FlushLast is the last Flush of an owner that stopped counting: it publishes what is left within
// a second of ctx, and logs a failure.
func (m *Meter) FlushLast(ctx context.Context) {
	if m == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := m.Flush(ctx); err != nil {
		m.log.Warn("publishing the last usage counts", "err", err)
	}
}

// Flush publishes what m counted, one increment per counter, and the increments of earlier
// flushes that failed. Those that fail again are kept for the next flush.
func (m *Meter) Flush(ctx context.Context) error {
	if m == nil {
		return nil
	}
	batch := m.take()
	if len(batch) == 0 {
		return nil
	}
	futures := make([]jetstream.PubAckFuture, len(batch))
	var failed []*nats.Msg
	var errs []error
	for i, msg := range batch {
		f, err := m.js.PublishMsgAsync(msg)
		if err != nil {
			failed, errs = append(failed, msg), append(errs, err)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case ack := <-f.Ok():
			m.acknowledged(batch[i], ack)
		case err := <-f.Err():
			failed, errs = append(failed, batch[i]), append(errs, err)
		case <-ctx.Done():
			failed, errs = append(failed, batch[i]), append(errs, ctx.Err())
		}
	}
	m.keep(failed)
	if len(errs) > 0 {
		return fmt.Errorf("%d of %d increments not acknowledged: %w", len(failed), len(batch), errs[0])
	}
	return nil
}

// take returns the increments to send: those not acknowledged before, then one for each
// counter counted since.
func (m *Meter) take() []*nats.Msg {
	m.mu.Lock()
	defer m.mu.Unlock()
	batch := m.unacknowledged
	m.unacknowledged = nil
	taken := 0
	for c, n := range m.pending {
		if n == 0 {
			delete(m.pending, c)
			continue
		}
		if taken == maxFlushCounters {
			break
		}
		taken++
		delete(m.pending, c)
		m.seq++
		msg := nats.NewMsg(c.subject())
		msg.Header.Set(subject.HeaderIncr, strconv.FormatInt(n, 10))
		msg.Header.Set(jetstream.MsgIDHeader, m.id+"."+strconv.FormatUint(m.seq, 10))
		batch = append(batch, msg)
	}
	// The increments taken stay in tenants (Pending) until acknowledged, and then until seen.
	m.forgetSeen()
	m.unflushed = 0
	return batch
}

// keep holds failed increments for the next flush, at most maxUnacknowledged of them.
func (m *Meter) keep(failed []*nats.Msg) {
	if len(failed) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unacknowledged = append(m.unacknowledged, failed...)
	over := len(m.unacknowledged) - maxUnacknowledged
	if over <= 0 {
		return
	}
	for _, msg := range m.unacknowledged[:over] {
		c, n, ok := parseIncrement(msg)
		if ok {
			m.pending[c] += n
		}
	}
	m.unacknowledged = append(m.unacknowledged[:0], m.unacknowledged[over:]...)
}

// parseIncrement reads back the counter and increment of a message take made.
func parseIncrement(msg *nats.Msg) (counter, int64, bool) {
	n, err := strconv.ParseInt(msg.Header.Get(subject.HeaderIncr), 10, 64)
	if err != nil {
		return counter{}, 0, false
	}
	if tenant, what, err := subject.ParseUsageTotal(msg.Subject); err == nil {
		total, ok := totalNamed(what)
		return counter{tenant: tenant, kind: total}, n, ok
	}
	c, ok := parseDayCounter(msg.Subject)
	return c, n, ok
}

// totalNamed returns the kind of a totals counter's name.
func totalNamed(name string) (Kind, bool) {
	for i, n := range totalNames {
		if n == name {
			return numKinds + Kind(i), true
		}
	}
	return 0, false
}

// parseDayCounter reads a day counter's subject.
func parseDayCounter(subj string) (counter, bool) {
	tenant, kind, day, err := subject.ParseUsageDay(subj)
	if err != nil {
		return counter{}, false
	}
	k, ok := kindNamed(kind)
	if !ok {
		return counter{}, false
	}
	t, err := time.Parse(subject.UsageDayLayout, day)
	if err != nil {
		return counter{}, false
	}
	return counter{tenant: tenant, kind: k, day: dayOf(t)}, true
}
