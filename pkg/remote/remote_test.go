package remote_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/remote"
	"github.com/agentbus/agentbus/pkg/schedule"
	"github.com/agentbus/agentbus/pkg/sse"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/timefmt"
	"github.com/agentbus/agentbus/pkg/webhooksig"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

const systemKey = "system-admin-key-0123456789"

// endpoint is a remote agent written against the protocol by hand: Echo's webhook echo, a
// counter kept in state, a post, a failure, a retry and a streamed chat.
type endpoint struct {
	*httptest.Server
	secret   atomic.Value // string
	mu       sync.Mutex
	requests []remote.Request
	// deadlines are the requests' deadlines as they were written.
	deadlines []string
	badSigs   int
	flaky     atomic.Int64 // requests of Data "flaky" seen
	stepRuns  atomic.Int64 // runs of twosteps' first step
}

func newEndpoint(t *testing.T) *endpoint {
	e := &endpoint{}
	e.Server = httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(e.Close)
	return e
}

func (e *endpoint) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	hdr := map[string]string{}
	for k := range r.Header {
		hdr[k] = r.Header.Get(k)
	}
	secret, _ := e.secret.Load().(string)
	if err := (webhooksig.Standard{Secret: secret}).Verify(hdr, body); err != nil || r.Header.Get("Agentbus-Protocol") != "1" {
		e.mu.Lock()
		e.badSigs++
		e.mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var req remote.Request
	var raw struct {
		Deadline string `json:"deadline"`
	}
	if err := json.Unmarshal(body, &req); err != nil || json.Unmarshal(body, &raw) != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	e.mu.Lock()
	e.requests = append(e.requests, req)
	e.deadlines = append(e.deadlines, raw.Deadline)
	e.mu.Unlock()
	answer := func(v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	switch {
	case req.Type == "Webhook":
		answer(map[string]any{"response": map[string]any{"status": 201, "contentType": req.Webhook.ContentType, "bodyBase64": req.Webhook.Body}})
	case req.Type == "Chat" && req.Stream && req.Message.Text == "events":
		// Server-sent events, with what a stream may hold besides data.
		w.Header().Set("Content-Type", "text/event-stream")
		for _, d := range []string{"You ", "said: ", req.Message.Text} {
			fmt.Fprintf(w, ": a comment\nevent: delta\ndata: {\"delta\":%q}\n\n", d)
			w.(http.Flusher).Flush()
		}
		fmt.Fprintf(w, "event: answer\ndata: {\"reply\":\ndata: {\"text\":%q}}\n\n", "You said: "+req.Message.Text)
	case req.Type == "Chat" && req.Stream:
		w.Header().Set("Content-Type", "application/x-ndjson")
		for _, d := range []string{"You ", "said: ", req.Message.Text} {
			fmt.Fprintf(w, "{\"delta\":%q}\n", d)
			w.(http.Flusher).Flush()
		}
		fmt.Fprintf(w, "{\"reply\":{\"text\":%q}}\n", "You said: "+req.Message.Text)
	case req.Type == "Chat":
		answer(map[string]any{"reply": map[string]any{"text": "You said: " + req.Message.Text}})
	case req.Message.Method == "count":
		var st struct {
			Count int `json:"count"`
		}
		_ = json.Unmarshal(req.State, &st)
		st.Count++
		answer(map[string]any{"reply": map[string]any{"data": map[string]any{"count": st.Count}}, "state": st})
	case req.Message.Method == "notify":
		answer(map[string]any{"reply": map[string]any{"text": "will do"},
			"posts": []map[string]any{{"text": "your report is ready", "data": map[string]any{"report": 7}}}})
	case req.Message.Method == "refuse":
		answer(map[string]any{"error": map[string]any{"status": 422, "message": "no such report"}})
	case req.Message.Method == "twosteps":
		// Two steps, then a wait for the signal "go", replayed from the journal.
		switch len(req.Journal) {
		case 0:
			e.stepRuns.Add(1)
			answer(map[string]any{"step": map[string]any{"name": "a", "result": 1}})
		case 1:
			answer(map[string]any{"step": map[string]any{"name": "b", "error": map[string]any{"status": 409, "message": "b is taken"}}})
		case 2:
			answer(map[string]any{"wait": map[string]any{"name": "go", "signals": []string{"go"}}, "reply": map[string]any{"text": "ignored"}})
		default:
			answer(map[string]any{"reply": map[string]any{"data": map[string]any{"journal": req.Journal}}})
		}
	case req.Message.Method == "callread":
		// A call to Echo's sum, then a read of the thread, as steps the host makes.
		switch len(req.Journal) {
		case 0:
			answer(map[string]any{"call": map[string]any{"name": "c", "agent": "Echo", "activation": "x", "method": "sum",
				"params": map[string]any{"values": []int{2, 3}}}})
		case 1:
			answer(map[string]any{"call": map[string]any{"name": "bad", "agent": "Echo", "activation": "x", "method": "sum",
				"params": map[string]any{"values": "no"}}})
		case 2:
			answer(map[string]any{"history": map[string]any{"name": "h", "size": 5}})
		default:
			answer(map[string]any{"reply": map[string]any{"data": map[string]any{"journal": req.Journal}}})
		}
	case req.Message.Method == "flaky":
		if e.flaky.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		answer(map[string]any{"reply": map[string]any{"data": map[string]any{"attempt": req.Attempt}}})
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

// call makes an HTTP call and decodes a JSON answer into out.
func call(t testing.TB, method, url, key string, body any, out any, hdr ...string) (int, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if out != nil && len(b) > 0 {
		require.NoError(t, json.Unmarshal(b, out), "%s", b)
	}
	return resp.StatusCode, resp.Header
}

func registration(name, url string) map[string]any {
	return map[string]any{"name": name, "url": url, "chat": true, "webhooks": []string{"echo"},
		"methods": []map[string]any{
			{"name": "count", "description": "Counts calls."}, {"name": "notify"}, {"name": "refuse"}, {"name": "flaky"},
		}}
}

// send sends a Data message and waits for the reply.
func send(t *testing.T, s *stacktest.Stack, agentName, activation, method string) (int, map[string]any) {
	var ans map[string]any
	status, _ := call(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/messaging/send?wait=true", s.Key,
		map[string]any{"agentName": agentName, "activationName": activation, "participantId": "ada", "type": "Data", "text": method, "data": map[string]any{}}, &ans)
	return status, ans
}

// The hosts of a process's remote agents share one directory: registering more agents adds no
// watch of the hosts bucket, where each watch would read every host's heartbeats.
func TestRemoteAgentsShareOneDirectory(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	ep := newEndpoint(t)
	watches := func() int {
		st, err := s.Res.JS.Stream(t.Context(), subject.KVStream(subject.HostsBucket))
		require.NoError(t, err)
		return st.CachedInfo().State.Consumers
	}
	before := 0
	for i, name := range []string{"RemoA", "RemoB", "RemoC"} {
		status, _ := call(t, http.MethodPost, s.URL+"/api/v1/admin/agents", systemKey, registration(name, ep.URL+"/agentbus"), nil)
		require.Equal(t, http.StatusCreated, status)
		require.NoError(t, s.WaitLive(t.Context(), name))
		if i == 0 {
			before = watches() // every process's watches made, the first remote agent served
		}
	}
	assert.Equal(t, before, watches(), "two more remote agents' hosts added watches of the hosts bucket")
}

func TestRemoteAgentServedLikeAGoAgent(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	ep := newEndpoint(t)
	var reg remote.Registration
	start := time.Now()
	status, _ := call(t, http.MethodPost, s.URL+"/api/v1/admin/agents", systemKey, registration("Remo", ep.URL+"/agentbus"), &reg)
	require.Equal(t, http.StatusCreated, status)
	require.True(t, strings.HasPrefix(reg.Secret, "whsec_"))
	ep.secret.Store(reg.Secret)
	require.NoError(t, s.WaitLive(t.Context(), "Remo"))
	t.Logf("a new registration is served after %v", time.Since(start).Round(time.Millisecond))
	assert.Less(t, time.Since(start), 2*time.Second, "served within 2 s")

	t.Run("webhook", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodPost, s.URL+"/api/user/webhooks/Remo/echo?apikey="+s.Key, strings.NewReader("<a>hi</a>"))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/xml")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		assert.Equal(t, http.StatusCreated, resp.StatusCode)
		assert.Equal(t, "application/xml", resp.Header.Get("Content-Type"))
		assert.Equal(t, "<a>hi</a>", string(b))
	})
	t.Run("state", func(t *testing.T) {
		for want := 1; want <= 3; want++ {
			status, ans := send(t, s, "Remo", "counter", "count")
			require.Equal(t, http.StatusOK, status, "%v", ans)
			assert.EqualValues(t, want, ans["response"].(map[string]any)["data"].(map[string]any)["count"])
		}
	})
	t.Run("post", func(t *testing.T) {
		status, _ := send(t, s, "Remo", "reports", "notify")
		require.Equal(t, http.StatusOK, status)
		var page struct {
			Messages []map[string]any `json:"messages"`
		}
		require.Eventually(t, func() bool {
			call(t, http.MethodGet, s.URL+"/api/v1/admin/tenants/default/messaging/history?agentName=Remo&activationName=reports&participantId=ada", s.Key, nil, &page)
			return len(page.Messages) == 3
		}, 5*time.Second, 20*time.Millisecond)
		assert.Equal(t, "your report is ready", page.Messages[0]["text"])
	})
	t.Run("refusal", func(t *testing.T) {
		status, ans := send(t, s, "Remo", "x", "refuse")
		assert.Equal(t, http.StatusUnprocessableEntity, status, "%v", ans)
		assert.Contains(t, fmt.Sprint(ans), "no such report")
	})
	t.Run("retry", func(t *testing.T) {
		status, ans := send(t, s, "Remo", "y", "flaky")
		require.Equal(t, http.StatusOK, status, "%v", ans)
		assert.EqualValues(t, 2, ans["response"].(map[string]any)["data"].(map[string]any)["attempt"])
	})
	t.Run("chat", func(t *testing.T) {
		var ans map[string]any
		status, _ := call(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/messaging/send?wait=true", s.Key,
			map[string]any{"agentName": "Remo", "activationName": "c", "participantId": "ada", "type": "Chat", "text": "hello"}, &ans)
		require.Equal(t, http.StatusOK, status)
		assert.Equal(t, "You said: hello", ans["response"].(map[string]any)["text"])
	})
	// The endpoint streams "hello" as NDJSON and "events" as server-sent events.
	for _, text := range []string{"hello", "events"} {
		t.Run("streamed chat "+text, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, s.URL+"/api/user/rest/converse?workflow=Remo&type=Chat&participantId=ada&text="+text, nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+s.Key)
			req.Header.Set("Accept", "text/event-stream")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			deltas, message := readConverseStream(t, resp)
			assert.Equal(t, []string{"You ", "said: ", text}, deltas)
			assert.Contains(t, message, "You said: "+text)
		})
	}
	ep.mu.Lock()
	assert.Zero(t, ep.badSigs, "every request is signed")
	for _, d := range ep.deadlines {
		assert.Regexp(t, timefmt.Pattern, d, "a deadline in the one form of every time")
	}
	ep.mu.Unlock()

	require.Equal(t, remote.DefaultSharedPartitions, inboxConsumersOf(t, s.Res, "Remo"), "a consumer per partition")
	status, _ = call(t, http.MethodDelete, s.URL+"/api/v1/admin/agents/Remo", systemKey, nil, nil)
	require.Equal(t, http.StatusNoContent, status)
	require.Eventually(t, func() bool { return !s.Ingress.AgentLive("Remo") }, 10*time.Second, 20*time.Millisecond, "no longer served")
	// Its inbox and consumers go with it, without waiting for their inactive threshold.
	removed := time.Now()
	require.Eventually(t, func() bool { return !hasInbox(t, s.Res, "Remo") }, 45*time.Second, 50*time.Millisecond,
		"the removed agent's inbox deleted")
	t.Logf("its inbox was deleted %v after it was no longer served", time.Since(removed).Round(time.Millisecond))
}

// hasInbox reports whether the agent has an inbox stream.
func hasInbox(t *testing.T, res *bus.Resources, agentName string) bool {
	t.Helper()
	has, err := res.HasInbox(t.Context(), agentName)
	require.NoError(t, err)
	return has
}

// inboxConsumersOf counts the inbox consumers of the agent's partitions.
func inboxConsumersOf(t *testing.T, res *bus.Resources, agentName string) int {
	t.Helper()
	n := 0
	inbox, err := res.JS.Stream(t.Context(), subject.InboxStream(agentName))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0
	}
	require.NoError(t, err)
	names := inbox.ConsumerNames(t.Context())
	for name := range names.Name() {
		for p := range remote.MaxSharedPartitions {
			if name == subject.PartitionConsumer(agentName, p) {
				n++
			}
		}
	}
	require.NoError(t, names.Err())
	return n
}

func TestRemoteAgentRegistrationIsTenantSafe(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	ep := newEndpoint(t)
	const mine = "/api/v1/admin/tenants/default/agents"
	var reg remote.Registration
	status, _ := call(t, http.MethodPost, s.URL+mine, s.Key, registration("Mine", ep.URL), &reg)
	require.Equal(t, http.StatusCreated, status)
	ep.secret.Store(reg.Secret)
	assert.Equal(t, []string{"default"}, reg.Tenants)

	status, _ = call(t, http.MethodPost, s.URL+mine, s.Key, registration("Inside", "http://10.1.2.3/agent"), nil)
	assert.Equal(t, http.StatusUnprocessableEntity, status, "a tenant's url must be on the allow-list")
	status, _ = call(t, http.MethodPost, s.URL+mine, s.Key, registration("Echo", ep.URL), nil)
	assert.Equal(t, http.StatusConflict, status, "a Go agent's name")
	status, _ = call(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/other/agents", s.OtherKey, registration("Mine", ep.URL), nil)
	assert.Equal(t, http.StatusConflict, status, "a name is the deployment's")
	var list struct {
		Agents []remote.Registration `json:"agents"`
	}
	call(t, http.MethodGet, s.URL+"/api/v1/admin/tenants/other/agents", s.OtherKey, nil, &list)
	assert.Empty(t, list.Agents, "another tenant lists none of ours")
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		status, _ = call(t, m, s.URL+"/api/v1/admin/tenants/other/agents/Mine", s.OtherKey, nil, nil)
		assert.Equal(t, http.StatusNotFound, status, m)
		status, _ = call(t, m, s.URL+mine+"/Mine", s.OtherKey, nil, nil)
		assert.Equal(t, http.StatusForbidden, status, m)
	}
	status, _ = call(t, http.MethodPut, s.URL+"/api/v1/admin/tenants/other/agents/Mine", s.OtherKey, registration("Mine", ep.URL), nil)
	assert.Equal(t, http.StatusNotFound, status)

	require.NoError(t, s.WaitLive(t.Context(), "Mine"))
	status, ans := send(t, s, "Mine", "a", "count")
	require.Equal(t, http.StatusOK, status, "%v", ans)
	var other map[string]any
	status, _ = call(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/other/messaging/send?wait=true", s.OtherKey,
		map[string]any{"agentName": "Mine", "activationName": "a", "participantId": "ada", "type": "Data", "text": "count", "data": map[string]any{}}, &other)
	assert.Equal(t, http.StatusNotFound, status, "another tenant cannot call it: %v", other)

	call(t, http.MethodGet, s.URL+mine, s.Key, nil, &list)
	require.Len(t, list.Agents, 1)
	assert.Empty(t, list.Agents[0].Secret, "a list shows no secret")
	status, _ = call(t, http.MethodDelete, s.URL+mine+"/Mine", s.Key, nil, nil)
	assert.Equal(t, http.StatusNoContent, status)
}

// TestConcurrentReplacesOverHTTP: admins replacing one registration at once with PUT are all
// answered 200, the last writer winning.
func TestConcurrentReplacesOverHTTP(t *testing.T) {
	const writers = 8
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	status, _ := call(t, http.MethodPost, s.URL+"/api/v1/admin/agents", systemKey, registration("Racy", "http://127.0.0.1:10/agent"), nil)
	require.Equal(t, http.StatusCreated, status)
	urls := map[string]bool{}
	statuses := make([]int, writers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		url := fmt.Sprintf("http://127.0.0.1:10/agent-%d", w)
		urls[url] = true
		wg.Go(func() {
			<-start
			statuses[w], _ = call(t, http.MethodPut, s.URL+"/api/v1/admin/agents/Racy", systemKey, registration("Racy", url), nil)
		})
	}
	close(start)
	wg.Wait()
	for w, status := range statuses {
		assert.Equal(t, http.StatusOK, status, "writer %d", w)
	}
	var got remote.Registration
	status, _ = call(t, http.MethodGet, s.URL+"/api/v1/admin/agents/Racy", systemKey, nil, &got)
	require.Equal(t, http.StatusOK, status)
	assert.True(t, urls[got.URL], "the registration is one writer's: %s", got.URL)
	status, _ = call(t, http.MethodDelete, s.URL+"/api/v1/admin/agents/Racy", systemKey, nil, nil)
	require.Equal(t, http.StatusNoContent, status)
}

// TestCheckReportsFailures: an endpoint that checks no signature, takes any protocol version and
// closes every connection fails exactly those cases of Check.
func TestCheckReportsFailures(t *testing.T) {
	lax := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Connection", "close")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"reply":{"text":"ok"}}`)
	}))
	defer lax.Close()
	reg := remote.Registration{Name: "Lax", URL: lax.URL, Chat: true, Secret: webhooksig.NewStandardSecret(),
		Methods: []remote.Method{{Name: "m"}}}
	failed := map[string]bool{}
	for _, r := range remote.Check(t.Context(), reg) {
		if !r.OK {
			failed[r.Case] = true
		}
	}
	assert.Equal(t, map[string]bool{
		"unsigned request refused with 401":                  true,
		"wrongly signed request refused with 401":            true,
		"protocol version 2 refused with 400":                true,
		"keep-alive: a second request reuses the connection": true,
	}, failed)
}

// readConverseStream reads a streamed converse answer (package sse): the text of each "delta"
// event, and the data of the "message" event.
func readConverseStream(t *testing.T, resp *http.Response) (deltas []string, message string) {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	}
	err := sse.NewReader(resp.Body).Each(func(ev sse.Event) bool {
		switch ev.Event {
		case "delta":
			var d struct{ Delta string }
			require.NoError(t, json.Unmarshal([]byte(ev.Data), &d), "delta %s", ev.Data)
			deltas = append(deltas, d.Delta)
		case "message":
			message = ev.Data
		}
		return true
	})
	require.NoError(t, err)
	return deltas, message
}

// TestRemoteAgentsPerTenantLimited: a tenant admin registers as many remote agents as the
// deployment allows a tenant, one more is refused with 409 remote-agent-limit, and a removal
// makes room; replacing one at the limit and a system admin's registrations are not refused.
func TestRemoteAgentsPerTenantLimited(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey, MaxRemoteAgentsPerTenant: 2})
	ep := newEndpoint(t)
	const mine = "/api/v1/admin/tenants/default/agents"
	for _, name := range []string{"One", "Two"} {
		status, _ := call(t, http.MethodPost, s.URL+mine, s.Key, registration(name, ep.URL), nil)
		require.Equal(t, http.StatusCreated, status, name)
	}
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
	}
	status, _ := call(t, http.MethodPost, s.URL+mine, s.Key, registration("Three", ep.URL), &p)
	assert.Equal(t, http.StatusConflict, status)
	assert.Equal(t, "urn:agentbus:problem:remote-agent-limit", p.Type)
	status, _ = call(t, http.MethodPut, s.URL+mine+"/Two", s.Key, registration("Two", ep.URL+"/v2"), nil)
	assert.Equal(t, http.StatusOK, status, "a replacement at the limit")
	status, _ = call(t, http.MethodPost, s.URL+"/api/v1/admin/agents", systemKey, registration("Sys", ep.URL), nil)
	assert.Equal(t, http.StatusCreated, status, "a system admin's registration is not the tenant's")
	status, _ = call(t, http.MethodDelete, s.URL+mine+"/One", s.Key, nil, nil)
	require.Equal(t, http.StatusNoContent, status)
	status, _ = call(t, http.MethodPost, s.URL+mine, s.Key, registration("Three", ep.URL), nil)
	assert.Equal(t, http.StatusCreated, status, "after a removal")
}

// TestDeletedTenantsRemoteAgentsGo: deleting a tenant removes its remote agents, and its timers:
// no process goes on serving the agents, their names are free again, a tenant created later
// with the same id has none of them, and the timers fire no more.
func TestDeletedTenantsRemoteAgentsGo(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey, TenantIDHold: -1}) // "other" is made again at once
	ep := newEndpoint(t)
	const theirs = "/api/v1/admin/tenants/other/agents"
	var reg remote.Registration
	status, _ := call(t, http.MethodPost, s.URL+theirs, s.OtherKey, registration("Theirs", ep.URL), &reg)
	require.Equal(t, http.StatusCreated, status)
	ep.secret.Store(reg.Secret)
	require.NoError(t, s.WaitLive(t.Context(), "Theirs"))
	timers := schedule.NewStore(s.Res.JS, s.Res)
	const wf = "other:Theirs:Supervisor Workflow:a"
	req := &agentbusv1.Request{TenantId: "other", WorkflowId: wf, AgentName: "Theirs", WorkflowType: "Supervisor Workflow",
		ActivationName: "a", ParticipantId: "u", Kind: agentbusv1.Kind_KIND_DATA, Method: "count"}
	require.NoError(t, timers.Set(t.Context(), schedule.Schedule{Name: "hourly", Tenant: "other", WorkflowID: wf,
		Pattern: schedule.Every(time.Hour), Request: req}, ""))

	status, _ = call(t, http.MethodDelete, s.URL+"/api/v1/admin/tenants/other", systemKey, nil, nil)
	require.Equal(t, http.StatusNoContent, status)
	pending, err := timers.Pending(t.Context(), "other", wf)
	require.NoError(t, err)
	assert.False(t, pending, "the deleted tenant's timer is gone")
	var list struct {
		Agents []remote.Registration `json:"agents"`
	}
	status, _ = call(t, http.MethodGet, s.URL+"/api/v1/admin/agents", systemKey, nil, &list)
	require.Equal(t, http.StatusOK, status)
	assert.Empty(t, list.Agents, "the deleted tenant's agent is gone")
	require.Eventually(t, func() bool {
		_, err := s.Res.Registry.Get(t.Context(), subject.AgentKey("Theirs"))
		return errors.Is(err, jetstream.ErrKeyNotFound)
	}, 10*time.Second, 20*time.Millisecond, "the agent is still in the registry")

	status, _ = call(t, http.MethodPost, s.URL+"/api/v1/admin/tenants", systemKey, map[string]string{"id": "other"}, nil)
	require.Equal(t, http.StatusCreated, status)
	var key struct {
		Key string `json:"key"`
	}
	status, _ = call(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/other/keys", systemKey, map[string]string{"name": "new", "role": "tenant-admin"}, &key)
	require.Equal(t, http.StatusCreated, status)
	status, _ = call(t, http.MethodGet, s.URL+theirs, key.Key, nil, &list)
	require.Equal(t, http.StatusOK, status)
	assert.Empty(t, list.Agents, "a new tenant of the same id inherits nothing")
	status, _ = call(t, http.MethodPost, s.URL+"/api/v1/admin/agents", systemKey, registration("Theirs", ep.URL), nil)
	assert.Equal(t, http.StatusCreated, status, "the name is free again")
}

// TestRemoteAgentPartitions: a remote agent's inbox has the registration's partition count,
// whatever the processes' own setting, and its hosts pull that many partitions. Left out, it is
// 4 for an agent one tenant calls (a tenant's own, or a global one restricted to one tenant) and
// 16 for one several tenants share, whose partitions bound the backlog one tenant's requests wait
// behind. A count out of bounds is refused: a tenant's agent may have up to 16.
func TestRemoteAgentPartitions(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey, Partitions: 8})
	ep := newEndpoint(t)
	const (
		global = "/api/v1/admin/agents"
		mine   = "/api/v1/admin/tenants/default/agents"
	)
	for _, tc := range []struct {
		name, path, key string
		set             map[string]any
		want            int
	}{
		{"RemoShared", global, systemKey, nil, remote.DefaultSharedPartitions},
		{"RemoOneTenant", global, systemKey, map[string]any{"tenants": []string{"default"}}, remote.DefaultPartitions},
		{"RemoMine", mine, s.Key, nil, remote.DefaultPartitions},
		{"RemoTwo", mine, s.Key, map[string]any{"partitions": 2}, 2},
		{"RemoWide", global, systemKey, map[string]any{"partitions": 64}, 64},
	} {
		reg := registration(tc.name, ep.URL+"/agentbus")
		maps.Copy(reg, tc.set)
		var got remote.Registration
		status, _ := call(t, http.MethodPost, s.URL+tc.path, tc.key, reg, &got)
		require.Equal(t, http.StatusCreated, status, tc.name)
		assert.Equal(t, tc.want, got.Partitions, tc.name)
		ep.secret.Store(got.Secret)
		require.NoError(t, s.WaitLive(t.Context(), tc.name))
		n, err := s.Res.PartitionsOf(t.Context(), tc.name)
		require.NoError(t, err)
		assert.Equal(t, tc.want, n, "%s's inbox", tc.name)
		status, ans := send(t, s, tc.name, "a", "count")
		require.Equal(t, http.StatusOK, status, "%s: %v", tc.name, ans)
		require.Eventually(t, func() bool { return inboxConsumersOf(t, s.Res, tc.name) == tc.want }, 5*time.Second, 20*time.Millisecond,
			"%s: a consumer per partition", tc.name)
	}
	for _, tc := range []struct {
		path, key  string
		partitions int
		detail     string
	}{
		{mine, s.Key, -1, "from 1 to 16"},
		{mine, s.Key, remote.MaxPartitions + 1, "from 1 to 16"},
		{global, systemKey, remote.MaxSharedPartitions + 1, "from 1 to 1024"},
	} {
		reg := registration("RemoBad", ep.URL+"/agentbus")
		reg["partitions"] = tc.partitions
		var p map[string]any
		status, _ := call(t, http.MethodPost, s.URL+tc.path, tc.key, reg, &p)
		assert.Equal(t, http.StatusBadRequest, status, "partitions %d", tc.partitions)
		assert.Contains(t, p["detail"], "partitions must be "+tc.detail)
	}
}
