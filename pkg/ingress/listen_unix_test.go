//go:build unix

package ingress_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/sse"
	"github.com/agentbus/agentbus/pkg/stack"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// The flood of TestSlowListenersCostTheirBuffer.
const (
	floodListeners = 50
	floodMessages  = 2000
	floodSize      = 8 << 10
)

// TestSlowListenersCostTheirBuffer floods a thread with 2,000 messages of 8 KB while 50 listen
// streams never read. Each costs the ingress at most its buffers, not the flood: the heap grows
// by at most listeners × (the listen buffer and the follow's read-ahead) beyond what the same
// flood to a thread nobody follows costs, and the kernel holds at most the connection's send
// buffer for each (where /proc/net/tcp tells). A listener that reads gets every message in order;
// one that did not read gets what its buffers held, then the overflow event naming the last
// message it got.
func TestSlowListenersCostTheirBuffer(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	store := historyStore(t, s)
	// Each key may hold DefaultMaxListenersPerKey streams: spread the listeners over enough keys.
	listenKeys := []string{s.Key}
	for len(listenKeys)*ingress.DefaultMaxListenersPerKey < floodListeners+1 {
		k, _ := storeKey(t, s, "default", keys.RoleUser, "listener")
		listenKeys = append(listenKeys, k)
	}

	quiet := floodGrowth(t, func() { flood(t, store, "quiet") })

	// Each stream takes the messages stored once it has said ": listening": the flood starts
	// after every stream has.
	slow := make([]slowListener, floodListeners)
	for i := range slow {
		slow[i] = openSlowListener(t, s.URL, listenKeys[i%len(listenKeys)], "busy")
	}
	got := make(chan []string, 1)
	read := readProgress{listening: make(chan struct{})}
	read.comment.Store("")
	go func() { got <- readWholeThread(t, s.URL, listenKeys[len(listenKeys)-1], "busy", floodMessages, &read) }()
	select {
	case <-read.listening:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the reading listener's stream never said it listens")
	}
	require.Equal(t, float64(len(slow)+1), metricValue(t, s.URL, "agentbus_ingress_listeners"), "open listen streams")

	var ids []string
	busy := floodGrowth(t, func() {
		flood(t, store, "busy")
		select {
		case ids = <-got:
		case <-time.After(60 * time.Second):
			require.FailNow(t, "the reading listener did not get the flood within 60 s",
				"it had %d messages from %d streams (%s); the last began with %q",
				read.messages.Load(), read.streams.Load(), read.gaps(), read.comment.Load())
		}
	})
	perListener := int64(ingress.DefaultListenBufferBytes + (history.FollowPrefetch+1)*(floodSize+1024))
	bound := floodListeners*perListener + 16<<20 // and 16 MiB for the heap's own noise
	t.Logf("heap growth: flood with %d listeners that never read %.1f MiB, without listeners %.1f MiB; "+
		"difference %.1f MiB, %.0f KiB a listener; bound %.1f MiB (%.0f KiB a listener)",
		floodListeners, mib(busy), mib(quiet), mib(busy-quiet), float64(busy-quiet)/floodListeners/1024,
		mib(bound), float64(perListener)/1024)
	assert.LessOrEqual(t, busy-quiet, bound, "slow listeners hold more than their buffers")
	if queued, ok := sendQueued(t, s.URL); ok {
		// Linux doubles SO_SNDBUF for its bookkeeping and lets the write that fills it overshoot;
		// a buffer the kernel grows by itself reaches tcp_wmem's maximum, 4 MiB by default.
		kernelBound := int64(floodListeners * 3 * ingress.ListenSendBuffer)
		t.Logf("kernel send queues of the ingress's connections: %.1f MiB, %.0f KiB a listener; bound %.1f MiB",
			mib(queued), float64(queued)/floodListeners/1024, mib(kernelBound))
		assert.LessOrEqual(t, queued, kernelBound, "the kernel holds more than the send buffers for slow listeners")
	}

	require.Len(t, ids, floodMessages, "the reading listener's messages")
	for i, id := range ids {
		require.Equal(t, floodID(i), id, "message %d, in order", i)
	}
	checkOverflowed(t, slow[0])
	assert.Positive(t, metricValue(t, s.URL, "agentbus_ingress_listener_overflows_total"), "overflows counted")
}

// flood appends floodMessages of floodSize bytes to the thread of activation, as the host does.
func flood(t *testing.T, store *history.Store, activation string) {
	t.Helper()
	ctx := context.Background()
	wf := "default:Echo:Supervisor Workflow:" + activation
	cur, err := store.Cursor(ctx, "default", wf, "p")
	require.NoError(t, err)
	text := strings.Repeat("x", floodSize)
	for i := range floodMessages {
		require.NoError(t, store.Append(ctx, "default", wf, "p", &cur, &history.Message{ID: floodID(i), Text: &text}))
	}
}

func floodID(i int) string { return fmt.Sprintf("flood-%04d", i) }

// floodGrowth is how much the live heap grew while do ran.
func floodGrowth(t *testing.T, do func()) int64 {
	t.Helper()
	before := liveHeap()
	do()
	return liveHeap() - before
}

func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// sendQueued sums the bytes waiting in the kernel's send queues of the TCP connections the server
// at base accepted, from Linux's /proc/net/tcp and tcp6 (tx_queue); false where there are none.
func sendQueued(t *testing.T, base string) (int64, bool) {
	t.Helper()
	u, err := url.Parse(base)
	require.NoError(t, err)
	_, port, err := net.SplitHostPort(u.Host)
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	local := fmt.Sprintf(":%04X", p)
	var total int64
	read := false
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		read = true
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local_address rem_address st tx_queue:rx_queue …
			f := strings.Fields(line)
			if len(f) < 5 || !strings.HasSuffix(f[1], local) || f[3] != "01" {
				continue
			}
			tx, _, _ := strings.Cut(f[4], ":")
			n, err := strconv.ParseInt(tx, 16, 64)
			require.NoError(t, err, "%s: %q", table, line)
			total += n
		}
	}
	return total, read
}

// listenPath is the listen request of the flood's thread of activation.
func listenPath(key, activation string) string {
	return "/api/v1/admin/tenants/default/messaging/listen?" +
		url.Values{"apikey": {key}, "agentName": {"Echo"}, "activationName": {activation}, "participantId": {"p"}}.Encode()
}

// openSlowListener opens a listen stream and reads its answer's head and first comment (the
// stream then takes every message stored from then on), and nothing more: the test reads the
// rest later, if at all. Its receive buffer is fixed before it connects (the kernel would grow it
// to tens of megabytes), so that the kernel does not take in the whole flood for it.
func openSlowListener(t *testing.T, base, key, activation string) slowListener {
	t.Helper()
	u, err := url.Parse(base)
	require.NoError(t, err)
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		if cerr := rc.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10) }); cerr != nil {
			return cerr
		}
		return err
	}}
	c, err := d.Dial("tcp", u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", listenPath(key, activation), u.Host)
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var first []byte
	buf := make([]byte, 64)
	for !bytes.HasSuffix(first, []byte("\n\n")) {
		n, err := resp.Body.Read(buf)
		first = append(first, buf[:n]...)
		require.NoError(t, err, "the stream's first comment; read %q", first)
	}
	require.Equal(t, ": listening\n\n", string(first))
	return slowListener{c, resp}
}

// slowListener is a listen stream whose client has read only its answer's head and first comment.
type slowListener struct {
	conn net.Conn
	resp *http.Response
}

// readProgress is how far readWholeThread got, for the message of a test that waited for it in
// vain: the messages and streams so far, and the comment that began the last stream (": listening"
// or ": last-event-id not found").
type readProgress struct {
	messages, streams atomic.Int64
	comment           atomic.Value // string
	// listening is closed once the first stream has said it listens.
	listening chan struct{}

	mu  sync.Mutex
	ids []string // a copy of the ids received, for gaps
}

// gaps names the first message received and the messages missing between those received.
func (p *readProgress) gaps() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ids) == 0 {
		return "none received"
	}
	out := fmt.Sprintf("the first %s", p.ids[0])
	for i := 1; i < len(p.ids); i++ {
		var a, b int
		_, errA := fmt.Sscanf(p.ids[i-1], "flood-%d", &a)
		_, errB := fmt.Sscanf(p.ids[i], "flood-%d", &b)
		if errA == nil && errB == nil && b != a+1 {
			out += fmt.Sprintf(", %s after %s", p.ids[i], p.ids[i-1])
		}
	}
	return out + ", the last " + p.ids[len(p.ids)-1]
}

// readWholeThread follows a thread until it has n messages, resuming with Last-Event-ID when the
// stream ends, and returns their ids in the order received; progress counts as it reads.
func readWholeThread(t *testing.T, base, key, activation string, n int, progress *readProgress) []string {
	var ids []string
	for attempt := 0; len(ids) < n && attempt < 100; attempt++ {
		progress.streams.Add(1)
		req, err := http.NewRequest(http.MethodGet, base+listenPath(key, activation), nil)
		if err != nil {
			return ids
		}
		if len(ids) > 0 {
			req.Header.Set("Last-Event-ID", ids[len(ids)-1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return ids
		}
		first := true
		scanEvents(resp.Body, func(ev sse.Event) bool {
			if first {
				progress.comment.Store(ev.Comment)
				if attempt == 0 {
					close(progress.listening)
				}
				first = false
			}
			if ev.Event == "message" {
				ids = append(ids, ev.ID)
				progress.messages.Add(1)
				progress.mu.Lock()
				progress.ids = append(progress.ids, ev.ID)
				progress.mu.Unlock()
			}
			return len(ids) < n
		})
		resp.Body.Close()
	}
	return ids
}

// checkOverflowed reads a listener that read nothing during the flood: the messages its buffer
// held, from the first, then the overflow event naming the last of them, then the end.
func checkOverflowed(t *testing.T, l slowListener) {
	t.Helper()
	require.NoError(t, l.conn.SetReadDeadline(time.Now().Add(20*time.Second)))
	events := readEvents(l.resp.Body)
	var msgs []string
	var overflow *sse.Event
	for i, ev := range events {
		switch ev.Event {
		case "message":
			require.Nil(t, overflow, "a message after the overflow event")
			msgs = append(msgs, ev.ID)
		case "overflow":
			overflow = &events[i]
		}
	}
	require.NotNil(t, overflow, "no overflow event among %d events", len(events))
	require.NotEmpty(t, msgs)
	require.Less(t, len(msgs), floodMessages, "it held the whole flood")
	for i, id := range msgs {
		require.Equal(t, floodID(i), id, "held message %d", i)
	}
	var o map[string]any
	require.NoError(t, json.Unmarshal([]byte(overflow.Data), &o), "%s", overflow.Data)
	assert.Equal(t, "urn:agentbus:problem:listener-overflow", o["type"])
	assert.Equal(t, msgs[len(msgs)-1], o["lastEventId"])
	assert.Contains(t, o["detail"], "Last-Event-ID")
}

// TestListenersCappedPerKeyAndTenant: beyond its caps a key or a tenant gets 429 for another
// listen stream, and a place is free again once a stream ends.
func TestListenersCappedPerKeyAndTenant(t *testing.T) {
	t.Parallel()
	s := startStack(t, stack.Config{Ingress: ingress.Config{MaxListenersPerKey: 2, MaxListenersPerTenant: 3}}, "acme")
	other, _ := storeKey(t, s.Stack, "acme", keys.RoleUser, "second")
	path := func(key string) string {
		return s.URL + strings.Replace(listenPath(key, "caps"), "/tenants/default/", "/tenants/acme/", 1)
	}
	open := func(key string) (*http.Response, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		resp, err := http.DefaultClient.Do(newRequest(t, ctx, http.MethodGet, path(key), nil))
		require.NoError(t, err)
		t.Cleanup(func() { cancel(); resp.Body.Close() })
		return resp, cancel
	}
	refused := func(key, says string) {
		t.Helper()
		status, h, b := doRequest(t, http.MethodGet, path(key), nil)
		p := problemOf(t, status, h.Get("Content-Type"), b, http.StatusTooManyRequests)
		assert.Equal(t, "urn:agentbus:problem:too-many-listeners", p["type"])
		assert.Contains(t, p["detail"], says)
		assert.NotEmpty(t, h.Get("Retry-After"))
	}
	first, closeFirst := open(s.keys["acme"])
	require.Equal(t, http.StatusOK, first.StatusCode)
	second, _ := open(s.keys["acme"])
	require.Equal(t, http.StatusOK, second.StatusCode)
	refused(s.keys["acme"], "API key")
	third, _ := open(other)
	require.Equal(t, http.StatusOK, third.StatusCode)
	refused(other, "tenant")

	closeFirst()
	require.Eventually(t, func() bool {
		resp, cancel := open(s.keys["acme"])
		defer cancel()
		return resp.StatusCode == http.StatusOK
	}, 5*time.Second, 20*time.Millisecond, "the closed stream's place was not given back")
}
