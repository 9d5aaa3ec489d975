package ingress_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/sse"
	"github.com/agentbus/agentbus/pkg/stack"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// The helpers of the package's tests: every test talks to a whole stack over HTTP.

// systemKey is the system-admin key (AGENTBUS_ADMIN_KEY) of the stacks that take one.
const systemKey = "system-admin-key-0123456789"

// Short names of the methods, for tables of requests.
const get, post, put, del, patch = http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch

// Paths of tenant "default" and of the system, for tables of requests.
const (
	wh       = "/api/user/webhooks/"
	conv     = "/api/user/rest/converse"
	sendPath = "/api/v1/admin/tenants/default/messaging/send"
	msgs     = "/api/v1/admin/tenants/default/messaging/"
	tenants  = "/api/v1/admin/tenants"
	ownKeys  = "/api/v1/admin/tenants/default/keys"
	sysKeys  = "/api/v1/admin/keys"
)

// adminRefusal is a request the admin API refuses, and the problem it must answer.
type adminRefusal struct {
	name, method, path, key, body string
	hdr                           []string
	want                          int
	slug                          string
	// allow is the Allow header of a 405, when the case checks it.
	allow string
}

// checkAdminRefusal sends the refused request and checks its problem's status and type, and the
// Allow header when the case names one. It returns the answer's headers and body.
func checkAdminRefusal(t *testing.T, s *stacktest.Stack, tc adminRefusal) (http.Header, []byte) {
	t.Helper()
	var body any
	if tc.body != "" {
		body = tc.body
	}
	status, h, b := adminReq(t, s, tc.method, tc.path, tc.key, body, tc.hdr...)
	p := problemOf(t, status, h.Get("Content-Type"), b, tc.want)
	assert.Equal(t, "urn:agentbus:problem:"+tc.slug, p["type"], "problem type")
	if tc.allow != "" {
		assert.Equal(t, tc.allow, h.Get("Allow"))
	}
	return h, b
}

// routeCase is one request of a table and the status it must get.
type routeCase struct {
	name, method string
	// path holds the query too.
	path string
	hdr  []string
	body string
	want int
}

// newRequest builds a request with hdr as header name/value pairs.
func newRequest(t *testing.T, ctx context.Context, method, u string, body io.Reader, hdr ...string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	require.NoError(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return req
}

// doRequest sends a request and returns its status, headers and whole body.
func doRequest(t *testing.T, method, u string, body io.Reader, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(newRequest(t, context.Background(), method, u, body, hdr...))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, b
}

// doCT is doRequest returning the content type instead of all headers.
func doCT(t *testing.T, method, u string, body io.Reader, hdr ...string) (int, string, []byte) {
	t.Helper()
	status, h, b := doRequest(t, method, u, body, hdr...)
	return status, h.Get("Content-Type"), b
}

// bearerHeader is the header pair that carries key, none when key is empty.
func bearerHeader(key string) []string {
	if key == "" {
		return nil
	}
	return []string{"Authorization", "Bearer " + key}
}

// jsonBody is a request body: nil is none, a string or []byte is sent as is, anything else as
// JSON.
func jsonBody(t *testing.T, body any) io.Reader {
	t.Helper()
	switch b := body.(type) {
	case nil:
		return nil
	case string:
		return strings.NewReader(b)
	case []byte:
		return bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		require.NoError(t, err)
		return bytes.NewReader(raw)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// q builds a query of name/value pairs.
func q(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	return v
}

// decode decodes a JSON object.
func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m), "decoding %q", b)
	return m
}

// problemOf checks that an answer is problem+json with the status and returns its body.
func problemOf(t *testing.T, status int, ct string, b []byte, want int) map[string]any {
	t.Helper()
	require.Equal(t, want, status, "status; body %s", b)
	require.Equal(t, "application/problem+json", ct, "content type")
	p := decode(t, b)
	typ, _ := p["type"].(string)
	require.True(t, p["status"] == float64(want) && strings.HasPrefix(typ, "urn:agentbus:problem:") && p["title"] != "",
		"problem body %v", p)
	return p
}

// call POSTs body to a webhook and returns status, content type and body.
func call(t *testing.T, base, workflow, method string, query url.Values, body []byte, hdr ...string) (int, string, []byte) {
	t.Helper()
	u := base + "/api/user/webhooks/" + url.PathEscape(workflow) + "/" + url.PathEscape(method) + "?" + query.Encode()
	return doCT(t, http.MethodPost, u, bytes.NewReader(body), hdr...)
}

// converse POSTs body to the converse endpoint, as JSON when there is one.
func converse(t *testing.T, s *stacktest.Stack, query url.Values, body string, hdr ...string) (int, string, []byte) {
	t.Helper()
	if body != "" {
		hdr = append([]string{"Content-Type", "application/json"}, hdr...)
	}
	return doCT(t, http.MethodPost, s.URL+"/api/user/rest/converse?"+query.Encode(), strings.NewReader(body), hdr...)
}

// send POSTs a JSON body to the send endpoint of tenant (path; "" for the tenant-less one) and
// returns status, content type and body. query is appended as is ("wait=true").
func send(t *testing.T, s *stacktest.Stack, tenant, query string, body any, hdr ...string) (int, string, []byte) {
	t.Helper()
	u := s.URL + "/api/v1/admin/tenants/" + tenant + "/messaging/send"
	if tenant == "" {
		u = s.URL + "/api/v1/admin/messaging/send"
	}
	if query != "" {
		u += "?" + query
	}
	hdr = append([]string{"Content-Type", "application/json"}, hdr...)
	return doCT(t, http.MethodPost, u, jsonBody(t, body), hdr...)
}

// doGet GETs path on the stack with the query and header pairs and returns status, content type
// and body.
func doGet(t *testing.T, base, path string, query url.Values, hdr ...string) (int, string, []byte) {
	t.Helper()
	return doCT(t, http.MethodGet, base+path+"?"+query.Encode(), nil, hdr...)
}

// adminReq sends an admin API request with key as a Bearer token (none when empty) and body as
// JSON (a string is sent as is; nil sends nothing). hdr are extra header name/value pairs.
func adminReq(t *testing.T, s *stacktest.Stack, method, path, key string, body any, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	return doRequest(t, method, s.URL+path, jsonBody(t, body), append(bearerHeader(key), hdr...)...)
}

// adminOK sends an admin request that must answer want with JSON, and decodes it into out
// (unless nil).
func adminOK(t *testing.T, s *stacktest.Stack, method, path, key string, body any, want int, out any) http.Header {
	t.Helper()
	status, h, b := adminReq(t, s, method, path, key, body)
	require.Equal(t, want, status, "%s %s: %s", method, path, b)
	if out != nil {
		require.Equal(t, "application/json", h.Get("Content-Type"), "%s %s", method, path)
		require.NoError(t, json.Unmarshal(b, out), "%s %s: decoding %s", method, path, b)
	}
	return h
}

// do sends a request with key as a Bearer token (none when empty) and returns its status,
// headers and body.
func do(t *testing.T, method, u, key string, body io.Reader) (int, http.Header, []byte) {
	t.Helper()
	return doRequest(t, method, u, body, bearerHeader(key)...)
}

// doPeek sends a request with body as is (none when empty) and returns status, content type and
// body. An event stream is read up to its first event or comment, then dropped, so that every
// route can be called the same way.
func doPeek(t *testing.T, base, method, path, body string, hdr ...string) (int, string, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	resp, err := http.DefaultClient.Do(newRequest(t, ctx, method, base+path, rd, hdr...))
	require.NoError(t, err)
	defer resp.Body.Close()
	ct := resp.Header.Get("Content-Type")
	if strings.HasPrefix(ct, "text/event-stream") {
		var b bytes.Buffer
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if sc.Text() == "" && b.Len() > 0 {
				break
			}
			b.WriteString(sc.Text() + "\n")
		}
		return resp.StatusCode, ct, b.Bytes()
	}
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, ct, b
}

// scanEvents reads an event stream, handing each event or comment to emit until emit returns
// false or the stream ends.
func scanEvents(r io.Reader, emit func(sse.Event) bool) {
	rd := sse.NewReader(r)
	rd.KeepComments = true
	_ = rd.Each(emit)
}

// isoQuery encodes name/value pairs as a query string with its '?'.
func isoQuery(kv ...string) string { return "?" + q(kv...).Encode() }

// with returns a copy of v with each name of the name/value pairs set to its value; an empty
// value removes the name.
func with(v url.Values, kv ...string) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = slices.Clone(vs)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			out.Del(kv[i])
		} else {
			out.Set(kv[i], kv[i+1])
		}
	}
	return out
}

// withFields returns a copy of base with the name/value pairs set over it.
func withFields(base map[string]any, kv ...any) map[string]any {
	m := maps.Clone(base)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

// msg is a send body to Echo's default activation for participant Alice, with the name/value
// pairs set over it.
func msg(fields ...any) map[string]any {
	return withFields(map[string]any{"agentName": "Echo", "activationName": "default", "participantId": "Alice"}, fields...)
}

// chatMsg is the JSON of a send body of the Chat "hi" to Echo's default activation for
// participant p, with the name/value pairs set over it.
func chatMsg(fields ...any) string {
	return mustJSON(withFields(map[string]any{"agentName": "Echo", "activationName": "default", "participantId": "p", "type": "Chat", "text": "hi"}, fields...))
}

// postLater POSTs body to u in the background, outside the test's goroutine; the status comes
// on the channel, 0 when the request failed.
func postLater(u, contentType string, body []byte) <-chan int {
	done := make(chan int, 1)
	go func() {
		resp, err := http.Post(u, contentType, bytes.NewReader(body))
		if err != nil {
			done <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		done <- resp.StatusCode
	}()
	return done
}

// answerOf checks that a call waiting for its reply got a 200 and decodes its answer.
func answerOf(t *testing.T, status int, b []byte) history.SyncAnswer {
	t.Helper()
	require.Equal(t, http.StatusOK, status, "%s", b)
	var a history.SyncAnswer
	require.NoError(t, json.Unmarshal(b, &a), "answer %s", b)
	return a
}

// chatText sends text as a converse Chat of participant to workflow and returns the reply's
// text.
func chatText(t *testing.T, s *stacktest.Stack, workflow, participant, text string) string {
	t.Helper()
	status, _, b := converse(t, s, q("workflow", workflow, "type", "Chat", "participantId", participant, "text", text, "apikey", s.Key), "")
	a := answerOf(t, status, b)
	require.True(t, a.Response != nil && a.Response.Text != nil, "answer %s", b)
	return *a.Response.Text
}

// metricValue reads one unlabelled metric from GET /metrics; -1 when it is not there.
func metricValue(t *testing.T, base, name string) float64 {
	t.Helper()
	_, _, b := doRequest(t, http.MethodGet, base+"/metrics", nil)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			_, err := fmt.Sscan(v, &f)
			require.NoError(t, err, "%s", line)
			return f
		}
	}
	return -1
}

// readEvents reads an event stream to its end; comments are left out.
func readEvents(r io.Reader) []sse.Event {
	var out []sse.Event
	scanEvents(r, func(ev sse.Event) bool {
		if !ev.IsComment() {
			out = append(out, ev)
		}
		return true
	})
	return out
}

// streamConverse POSTs a converse call that asks for an event stream, checks that one opened
// and reads it to its end.
func streamConverse(t *testing.T, s *stacktest.Stack, query url.Values) []sse.Event {
	t.Helper()
	status, ct, b := doCT(t, http.MethodPost, s.URL+"/api/user/rest/converse?"+query.Encode(), nil, "Accept", "text/event-stream")
	require.Equal(t, http.StatusOK, status, "stream answer: %s", b)
	require.Equal(t, "text/event-stream", ct, "stream answer")
	return readEvents(bytes.NewReader(b))
}

// deltaText checks that every event is a delta and joins their text.
func deltaText(t *testing.T, events []sse.Event) string {
	t.Helper()
	var joined strings.Builder
	for _, e := range events {
		var d struct{ Delta string }
		require.Equal(t, "delta", e.Event, "event %+v, want a delta", e)
		require.NoError(t, json.Unmarshal([]byte(e.Data), &d), "event %+v, want a delta", e)
		joined.WriteString(d.Delta)
	}
	return joined.String()
}

// finalText checks that a stream's last event is the message that ends it, and returns its
// text.
func finalText(t *testing.T, last sse.Event) string {
	t.Helper()
	var final history.SyncAnswer
	require.Equal(t, "message", last.Event, "last event %+v", last)
	require.NoError(t, json.Unmarshal([]byte(last.Data), &final), "last event %+v", last)
	require.True(t, final.Response != nil && final.Response.Text != nil, "last event %+v", last)
	return *final.Response.Text
}

// customStack is a whole stack started with settings stacktest.Options does not carry.
type customStack struct {
	*stacktest.Stack
	// keys holds a tenant-admin key of each tenant named at the start.
	keys map[string]string
}

// startStack runs a whole stack with cfg, its ingress on a loopback listener, and makes each
// tenant named with a tenant-admin key the ingress knows; Key and OtherKey are the keys of
// tenants "default" and "other" when they are named. Zero fields of cfg get a fresh store, the
// Echo agent, two partitions, a 10 s shutdown grace and stacktest.Logger(t). It stops when the
// test ends.
func startStack(t *testing.T, cfg stack.Config, tenants ...string) *customStack {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = natstest.StoreDir(t)
	}
	if len(cfg.Agents) == 0 {
		cfg.Agents = []*agent.Agent{echo.New()}
	}
	if cfg.Bus.Partitions == 0 {
		cfg.Bus.Partitions = 2
	}
	if cfg.Host.ShutdownGrace == 0 {
		cfg.Host.ShutdownGrace = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = stacktest.Logger(t)
	}
	cfg.HTTPAddr = "127.0.0.1:0"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := stack.Start(ctx, cfg)
	require.NoError(t, err, "starting stack")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		assert.NoError(t, st.Stop(ctx), "stopping stack")
	})
	s := &customStack{Stack: &stacktest.Stack{Stack: st, Dir: cfg.DataDir}, keys: map[string]string{}}
	for _, tenant := range tenants {
		require.NoError(t, st.Keys.EnsureTenant(ctx, tenant))
		s.keys[tenant], _ = storeKey(t, s.Stack, tenant, keys.RoleTenantAdmin, "test")
	}
	s.Key, s.OtherKey = s.keys["default"], s.keys["other"]
	return s
}

// secondIngress is an ingress on a stack's NATS, on its own connection as another process
// would be, served over HTTP at URL.
type secondIngress struct {
	*ingress.Server
	URL  string
	conn *nats.Conn
	lag  *atomic.Int64
}

// Lag delays from now on everything the NATS server sends the ingress by d: the watches of its
// caches, the answers to its requests, the messages of its subscriptions. So lags an ingress
// whose NATS server is loaded, or far from the others of its cluster.
func (in *secondIngress) Lag(d time.Duration) { in.lag.Store(int64(d)) }

// startIngress starts a second ingress with cfg (Conn, Bus and Logger are filled in) and waits
// until it knows the stack's key.
func startIngress(t *testing.T, s *stacktest.Stack, cfg ingress.Config) *secondIngress {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lag := new(atomic.Int64)
	nc, err := s.NATS.Connect("second ingress", nats.InProcessServer(laggingServer{s.NATS.Server, lag}))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	cfg.Conn, cfg.Bus, cfg.Logger = nc, bus.Config{Partitions: 4}, stacktest.Logger(t)
	srv, err := ingress.New(ctx, cfg)
	require.NoError(t, err)
	// Closing an ingress whose connection a test closed fails; that is not the test's concern.
	t.Cleanup(func() { _ = srv.Close() })
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	require.Eventually(t, func() bool { return srv.KeyKnown(s.Key) }, 10*time.Second, 5*time.Millisecond,
		"the second ingress never knew the stack's key")
	return &secondIngress{Server: srv, URL: hs.URL, conn: nc, lag: lag}
}

// laggingServer connects a client in process to a NATS server, and delays every byte the server
// sends the client by the duration lag holds when the bytes arrive.
type laggingServer struct {
	srv *server.Server
	lag *atomic.Int64
}

func (l laggingServer) InProcessConn() (net.Conn, error) {
	c, err := l.srv.InProcessConn()
	if err != nil {
		return nil, err
	}
	lc := &laggingConn{Conn: c, lag: l.lag, chunks: make(chan lagChunk, 1024)}
	go lc.pump()
	return lc, nil
}

// laggingConn is a connection whose reads return what arrived lag earlier.
type laggingConn struct {
	net.Conn
	lag     *atomic.Int64
	chunks  chan lagChunk
	err     error // why pump stopped; read once chunks is closed
	pending []byte
}

// lagChunk is what one read of the underlying connection got, and when it is to be read.
type lagChunk struct {
	due time.Time
	b   []byte
}

func (c *laggingConn) pump() {
	for {
		b := make([]byte, 32<<10)
		n, err := c.Conn.Read(b)
		if n > 0 {
			c.chunks <- lagChunk{due: time.Now().Add(time.Duration(c.lag.Load())), b: b[:n]}
		}
		if err != nil {
			c.err = err
			close(c.chunks)
			return
		}
	}
}

func (c *laggingConn) Read(p []byte) (int, error) {
	if len(c.pending) == 0 {
		ch, ok := <-c.chunks
		if !ok {
			return 0, c.err
		}
		time.Sleep(time.Until(ch.due))
		c.pending = ch.b
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// modelStack runs a stack whose Echo chats through the OpenAI-compatible server h, as model.
func modelStack(t *testing.T, h http.Handler, model string, timeout time.Duration) *stacktest.Stack {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	m, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1", Model: model, Timeout: timeout, MaxRetries: -1, HTTPClient: srv.Client()})
	require.NoError(t, err)
	return stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{echo.New(echo.WithModel(m))}})
}

// storeKey makes a key in the stack's key store, as the admin API does, and waits until the
// ingress knows it. It returns the secret and the record.
func storeKey(t *testing.T, s *stacktest.Stack, tenant string, role keys.Role, name string) (string, keys.Key) {
	t.Helper()
	secret, rec, err := s.Keys.Create(context.Background(), keys.NewKey{Tenant: tenant, Role: role, Name: name})
	require.NoError(t, err, "creating key %q", name)
	waitKnown(t, s, secret)
	return secret, rec
}

// revokedKey makes a key and revokes it, and waits until the ingress refuses it.
func revokedKey(t *testing.T, s *stacktest.Stack, tenant string, role keys.Role, name string) (string, keys.Key) {
	t.Helper()
	secret, rec := storeKey(t, s, tenant, role, name)
	require.NoError(t, s.Keys.Revoke(context.Background(), secret))
	waitUnknown(t, s, secret, "revocation not seen within 1s")
	return secret, rec
}

// waitKnown waits until the ingress accepts the secrets.
func waitKnown(t *testing.T, s *stacktest.Stack, secrets ...string) {
	t.Helper()
	for _, k := range secrets {
		require.NoError(t, s.WaitKnown(context.Background(), k))
	}
}

// waitUnknown waits at most a second until the ingress refuses secret.
func waitUnknown(t *testing.T, s *stacktest.Stack, secret string, msgAndArgs ...any) {
	t.Helper()
	require.Eventually(t, func() bool { return !s.Ingress.KeyKnown(secret) }, time.Second, 2*time.Millisecond, msgAndArgs...)
}

// createKey makes a key through the admin API with the key by, and checks the answer.
func createKey(t *testing.T, s *stacktest.Stack, tenant, by, name, role string) newKey {
	t.Helper()
	path := "/api/v1/admin/keys"
	if tenant != "" {
		path = "/api/v1/admin/tenants/" + tenant + "/keys"
	}
	var k newKey
	h := adminOK(t, s, http.MethodPost, path, by, map[string]string{"name": name, "role": role}, http.StatusCreated, &k)
	require.True(t, strings.HasPrefix(k.Key, keys.Prefix), "created key = %+v", k)
	require.NotEmpty(t, k.ID, "created key = %+v", k)
	require.Equal(t, name, k.Name, "created key = %+v", k)
	require.Equal(t, role, k.Role, "created key = %+v", k)
	require.Equal(t, tenant, k.Tenant, "created key = %+v", k)
	require.False(t, k.CreatedAt.IsZero(), "created key = %+v", k)
	require.Nil(t, k.RevokedAt, "created key = %+v", k)
	assert.Equal(t, "no-store", h.Get("Cache-Control"), "created key headers")
	assert.Equal(t, path+"/"+k.ID, h.Get("Location"), "created key headers")
	return k
}

// callEcho calls the Echo webhook of the key's tenant on the ingress at base and returns the
// status.
func callEcho(t *testing.T, base, key string) int {
	t.Helper()
	status, _, _ := call(t, base, "Echo", "echo", q("apikey", key), []byte(`{}`))
	return status
}

// echoBecomes polls the Echo webhook with key until it answers want, for at most within.
func echoBecomes(t *testing.T, s *stacktest.Stack, key string, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := callEcho(t, s.URL, key)
		if got == want || time.Now().After(deadline) {
			require.Equal(t, want, got, "webhook answer within %v", within)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// subscribeInbox subscribes a new connection to every request published to any agent's inbox.
func subscribeInbox(t *testing.T, s *stacktest.Stack) *nats.Subscription {
	t.Helper()
	nc, err := s.NATS.Connect("test")
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	sub, err := nc.SubscribeSync(subject.AllInboxSubjects)
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	return sub
}

// nextPublished is the next request published to the inbox (markers skipped), with its envelope.
func nextPublished(t *testing.T, sub *nats.Subscription) (*nats.Msg, *agentbusv1.Request) {
	t.Helper()
	for {
		m, err := sub.NextMsg(10 * time.Second)
		require.NoError(t, err, "waiting for a request on the inbox")
		if subject.IsInboxMarker(m.Subject) {
			continue
		}
		req := new(agentbusv1.Request)
		require.NoError(t, proto.Unmarshal(m.Data, req))
		return m, req
	}
}
