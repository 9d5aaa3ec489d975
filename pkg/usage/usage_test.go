package usage_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/instance"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/usage"
)

// watch follows the usage counters of res for the test.
func watch(t *testing.T, res *bus.Resources) *usage.Reader {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := usage.Watch(ctx, res.JS, res.Config, nil)
	require.NoError(t, err)
	t.Cleanup(r.Close)
	return r
}

// meter is a Meter on a connection of its own to res's server.
func meter(t *testing.T, res *bus.Resources) *usage.Meter {
	t.Helper()
	m, err := usage.NewMeter(res.JS.Conn(), nil)
	require.NoError(t, err)
	return m
}

// flush publishes what m counted. A flush of many counters takes a few seconds on a loaded
// machine with the race detector (16,384 acknowledged publishes in TestAFlushOfManyCounters).
func flush(t *testing.T, m *usage.Meter) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, m.Flush(ctx))
}

// usageOf waits until r's usage of tenant is want, and fails the test if it does not become so.
func usageOf(t *testing.T, r *usage.Reader, tenant string, want usage.Usage) {
	t.Helper()
	assert.Eventually(t, func() bool { return r.Of(tenant) == want }, 5*time.Second, 5*time.Millisecond,
		"usage of %s: have %+v, want %+v", tenant, r.Of(tenant), want)
}

// bytes is a Usage of history, files and payloads bytes and instances.
func bytes(history, files, payloads, instances int64) usage.Usage {
	u := usage.Usage{Instances: instances}
	u.Bytes[usage.History], u.Bytes[usage.Files], u.Bytes[usage.Payloads] = history, files, payloads
	return u
}

// TestRunRestsWhileNothingIsCounted: Run publishes what is counted within about a
// FlushInterval, then rests while nothing is counted, and the next count starts it again.
func TestRunRestsWhileNothingIsCounted(t *testing.T) {
	res := natstest.Bus(t, bus.Config{})
	r := watch(t, res)
	m := meter(t, res)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()

	m.Add("acme", usage.History, 10)
	usageOf(t, r, "acme", bytes(10, 0, 0, 0))
	require.Eventually(t, func() bool { return usage.Resting(m) }, 5*usage.FlushInterval, 10*time.Millisecond,
		"the flushes rest once everything is published")
	m.AddInstance("acme")
	assert.False(t, usage.Resting(m), "a count wakes it")
	usageOf(t, r, "acme", bytes(10, 0, 0, 1))
	m.Add("acme", usage.Files, 5)
	usageOf(t, r, "acme", bytes(10, 5, 0, 1))
}

// TestMetersAddUpInEveryReader: what two meters count for two tenants is added up in the
// counters, which a reader started before and one started after both see; a tenant's figures
// are its own, and what a meter has not published yet it reports as pending.
func TestMetersAddUpInEveryReader(t *testing.T) {
	res := natstest.Bus(t, bus.Config{})
	early := watch(t, res)
	m1, m2 := meter(t, res), meter(t, res)

	m1.Add("acme", usage.History, 1000)
	m1.Add("acme", usage.Files, 300)
	m1.AddInstance("acme")
	m2.Add("acme", usage.History, 24)
	m2.Add("acme", usage.Payloads, 5000)
	m2.CountClaim("acme", -5000, time.Now())
	m2.AddInstance("acme")
	m2.Add("beta", usage.History, 7)
	assert.Equal(t, bytes(1000, 300, 0, 1), m1.Pending("acme"))
	assert.Equal(t, bytes(7, 0, 0, 0), m2.Pending("beta"))
	flush(t, m1)
	flush(t, m2)
	assert.Equal(t, usage.Usage{}, m1.Pending("acme"), "nothing pending once published")

	usageOf(t, early, "acme", bytes(1024, 300, 0, 2))
	usageOf(t, early, "beta", bytes(7, 0, 0, 0))
	late := watch(t, res)
	assert.Equal(t, bytes(1024, 300, 0, 2), late.Of("acme"), "a reader started later reads the counters at once")
	assert.Equal(t, []string{"acme", "beta"}, late.Tenants())
	assert.Equal(t, int64(1324), late.Of("acme").Total())
	assert.Equal(t, usage.Usage{}, late.Of("nobody"))

	m1.Add("beta", usage.History, 3)
	flush(t, m1)
	usageOf(t, early, "beta", bytes(10, 0, 0, 0))
	usageOf(t, late, "beta", bytes(10, 0, 0, 0))
}

// TestPendingUntilTheReaderHasIt: a meter seen by a reader counts what it published as pending
// until the reader has applied it, so that its pending counts, read before the reader's usage,
// never add up with it to less than was counted, however late the reader follows; once the
// reader has it all, nothing is pending.
func TestPendingUntilTheReaderHasIt(t *testing.T) {
	res := natstest.Bus(t, bus.Config{})
	r := watch(t, res)
	m := meter(t, res)
	m.SeenBy(r)
	var want usage.Usage
	for i := range 100 {
		m.Add("acme", usage.Files, 100_000)
		m.AddInstance("acme")
		want.Add(bytes(0, 100_000, 0, 1))
		flush(t, m)
		got := m.Pending("acme")
		got.Add(r.Of("acme"))
		require.GreaterOrEqual(t, got.Total(), want.Total(), "bytes after flush %d", i)
		require.GreaterOrEqual(t, got.Instances, want.Instances, "instances after flush %d", i)
	}
	usageOf(t, r, "acme", want)
	// The reader records how far it applied just after applying: Of may answer a value a
	// moment before the meter learns it was applied.
	assert.Eventually(t, func() bool { return m.Pending("acme") == usage.Usage{} }, 5*time.Second, time.Millisecond,
		"nothing pending once the reader has it")

	// Stored and removed within one flush: nothing is sent, and nothing stays pending.
	m.Add("beta", usage.Payloads, 5000)
	m.Add("beta", usage.Payloads, -5000)
	assert.Equal(t, usage.Usage{}, m.Pending("beta"))
	flush(t, m)
	assert.Equal(t, usage.Usage{}, m.Pending("beta"))
	assert.Zero(t, usage.PendingTenants(m), "no tenant keeps an entry once nothing is pending")
}

// TestDaysAgeOutWithTheirKind: bytes count while the day they were stored on may still be in
// the store: history and files for the history's max age, large payloads and kept messages for
// the inbox's, each from the end of its day.
func TestDaysAgeOutWithTheirKind(t *testing.T) {
	res := natstest.Bus(t, bus.Config{HistoryMaxAge: 30 * 24 * time.Hour, InboxMaxAge: 7 * 24 * time.Hour})
	r := watch(t, res)
	m := meter(t, res)
	now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	tenDaysAgo := now.Add(-10 * 24 * time.Hour)
	m.AddAt("acme", usage.History, 100, tenDaysAgo)
	m.AddAt("acme", usage.Files, 200, tenDaysAgo)
	m.AddAt("acme", usage.Payloads, 400, tenDaysAgo)
	m.AddAt("acme", usage.Payloads, 800, now)
	m.AddAt("acme", usage.Kept, 1600, tenDaysAgo)
	m.AddAt("acme", usage.Kept, 3200, now)
	flush(t, m)

	at := func(when time.Time) usage.Usage {
		usage.SetClock(r, func() time.Time { return when })
		return r.Of("acme")
	}
	withKept := func(u usage.Usage, kept int64) usage.Usage { u.Bytes[usage.Kept] = kept; return u }
	require.Eventually(t, func() bool { return at(now) == withKept(bytes(100, 200, 800, 0), 3200) }, 5*time.Second, 5*time.Millisecond,
		"the payloads and kept messages of ten days ago are past the inbox's 7 days: %+v", at(now))
	// Today ends at midnight; its payloads and kept messages leave 7 days after that.
	todayEnd := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	assert.Equal(t, withKept(bytes(100, 200, 800, 0), 3200), at(todayEnd.Add(7*24*time.Hour-time.Second)))
	assert.Equal(t, bytes(100, 200, 0, 0), at(todayEnd.Add(7*24*time.Hour)))
	// The day of ten days ago ended on the 11th; its history and files leave 30 days after.
	oldEnd := time.Date(2026, 11, 11, 0, 0, 0, 0, time.UTC)
	assert.Equal(t, bytes(100, 200, 0, 0), at(oldEnd.Add(30*24*time.Hour-time.Second)))
	assert.Equal(t, bytes(0, 0, 0, 0), at(oldEnd.Add(30*24*time.Hour)))
}

// TestAFlushThatFailedIsSentAgain: increments whose publish failed (no counter stream yet) are
// kept and counted once by a later flush; the counts made in between are added.
func TestAFlushThatFailedIsSentAgain(t *testing.T) {
	srv := natstest.Server(t, "")
	nc := natstest.Conn(t, srv)
	m, err := usage.NewMeter(nc, nil)
	require.NoError(t, err)
	m.Add("acme", usage.History, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	require.Error(t, m.Flush(ctx), "no counter stream to take it")

	js, err := jetstream.New(nc)
	require.NoError(t, err)
	res, err := bus.Ensure(ctx, js, bus.Config{Partitions: 1})
	require.NoError(t, err)
	r := watch(t, res)
	m.Add("acme", usage.History, 5)
	flush(t, m)
	usageOf(t, r, "acme", bytes(15, 0, 0, 0))
	flush(t, m)
	assert.Never(t, func() bool { return r.Of("acme") != bytes(15, 0, 0, 0) }, 200*time.Millisecond, 10*time.Millisecond,
		"an empty flush sends nothing")
}

// TestLevelReadsTheAccountsLimit: the store's level is the account's storage used against its
// limit (the embedded server's, as its account's); against the fallback when the account has
// none; and unknown (0) without either.
func TestLevelReadsTheAccountsLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	res := natstest.Bus(t, bus.Config{})
	l := usage.NewLevel(res.JS, 0, 1, nil)
	require.NoError(t, l.Read(ctx))
	used, limit := l.Now()
	assert.Positive(t, limit, "the embedded server gives its account a limit")
	before := used
	_, err := res.JS.Publish(ctx, "agentbus.msg.acme.a.b", make([]byte, 100_000))
	require.NoError(t, err)
	require.NoError(t, l.Read(ctx))
	used, _ = l.Now()
	assert.GreaterOrEqual(t, used-before, int64(100_000))

	bare := natstest.ServerAt(t, "", "127.0.0.1:-1", "")
	js := natstest.JetStream(t, bare)
	for _, tc := range []struct {
		name     string
		fallback int64
	}{{"fallback", 1 << 30}, {"none", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			l := usage.NewLevel(js, tc.fallback, 1, nil)
			require.NoError(t, l.Read(ctx))
			_, limit := l.Now()
			assert.Equal(t, tc.fallback, limit)
		})
	}
}

// TestStoresCountWhatTheyStore: a metered history store counts each record as the stream holds
// it, and a metered instance store the instances it creates (not the updates) and what their
// records take in the bucket, as they grow and shrink, written from a record it wrote or read.
func TestStoresCountWhatTheyStore(t *testing.T) {
	res := natstest.Bus(t, bus.Config{})
	r := watch(t, res)
	m := meter(t, res)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	hs := history.NewStore(res.Messages, res.Topics, res.JS)
	hs.Meter(m)
	var cur history.Cursor
	for i := range 5 {
		text := strings.Repeat("hello ", i*50)
		in := &history.Message{ID: "in-" + strconv.Itoa(i), RequestID: "r" + strconv.Itoa(i), Text: &text}
		out := &history.Message{ID: "out-" + strconv.Itoa(i), RequestID: "r" + strconv.Itoa(i), Direction: history.Out, Text: &text}
		require.NoError(t, hs.Append(ctx, "acme", "acme:Echo:Supervisor Workflow:x", "ada", &cur, in, out))
	}
	is := instance.NewStore(res.Instances).Meter(m)
	rec, err := is.Put(ctx, instance.Record{Tenant: "acme", WorkflowID: "acme:Echo:Supervisor Workflow:x", Status: instance.Running})
	require.NoError(t, err)
	rec.Events++
	rec.State = json.RawMessage(`{"notes":"` + strings.Repeat("x", 5000) + `"}`)
	_, err = is.Put(ctx, rec)
	require.NoError(t, err)
	read, err := is.Get(ctx, "acme", rec.WorkflowID)
	require.NoError(t, err)
	read.State = json.RawMessage(`{"notes":"short"}`)
	_, err = is.Put(ctx, read)
	require.NoError(t, err)
	flush(t, m)

	info, err := res.Messages.Info(ctx)
	require.NoError(t, err)
	kv, err := res.JS.Stream(ctx, subject.KVStream(subject.InstancesBucket))
	require.NoError(t, err)
	kvInfo, err := kv.Info(ctx)
	require.NoError(t, err)
	want := bytes(int64(info.State.Bytes), 0, 0, 1)
	want.State = int64(kvInfo.State.Bytes)
	usageOf(t, r, "acme", want)
	assert.Equal(t, int64(info.State.Bytes+kvInfo.State.Bytes), r.Of("acme").Total(), "the records count in the total")
}

// TestStateBelowZeroCountsAsZero: records written before their writes were counted count from
// their next write by what it changed, which may take a tenant's state bytes below 0: the
// total counts them as 0, and the report shows 0.
func TestStateBelowZeroCountsAsZero(t *testing.T) {
	res := natstest.Bus(t, bus.Config{})
	r := watch(t, res)
	m := meter(t, res)
	m.Add("acme", usage.History, 100)
	m.AddState("acme", -40)
	flush(t, m)
	want := bytes(100, 0, 0, 0)
	want.State = -40
	usageOf(t, r, "acme", want)
	assert.Equal(t, int64(100), r.Of("acme").Total())
	assert.Zero(t, usage.NewReport("acme", r.Of("acme"), usage.Quota{}).Bytes.State)
}

// TestAFlushOfManyCounters: a meter that counted for more tenants than a flush publishes at
// once publishes the rest with the next, and reports them as pending meanwhile.
func TestAFlushOfManyCounters(t *testing.T) {
	res := natstest.Bus(t, bus.Config{})
	r := watch(t, res)
	m := meter(t, res)
	const tenants = usage.MaxFlushCounters + 100
	for i := range tenants {
		m.AddInstance("t" + strconv.Itoa(i))
	}
	flush(t, m)
	pending := 0
	for i := range tenants {
		if m.Pending("t"+strconv.Itoa(i)).Instances == 1 {
			pending++
		}
	}
	assert.Equal(t, 100, pending, "left for the next flush")
	flush(t, m)
	require.Eventually(t, func() bool { return len(r.Tenants()) == tenants }, 20*time.Second, 50*time.Millisecond)
	for _, tenant := range []string{"t0", "t" + strconv.Itoa(tenants-1)} {
		assert.Equal(t, int64(1), r.Of(tenant).Instances, tenant)
	}
}
