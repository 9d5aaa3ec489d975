package ingress_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// TestOpenAPIWebhooksDescribeDeliveredEvents subscribes a receiver to every event type of a
// stack, stores messages of every type (a tool call and a timer's post among them) and a dead
// letter, and checks every delivery the receiver gets against the document's webhook of its
// event type: method, the Standard Webhooks headers, the content type and the body. Each webhook
// of the document must have been delivered, and each delivery's signature must verify with the
// subscription's secret.
func TestOpenAPIWebhooksDescribeDeliveredEvents(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{echo.New(), contractFailing()}})
	rcv := newEventReceiver(t)
	var sub struct {
		Secret string `json:"secret"`
	}
	adminOK(t, s, http.MethodPost, "/api/v1/admin/tenants/default/subscriptions", s.Key,
		map[string]any{"url": rcv.URL + "/events", "events": []string{"message.incoming", "message.outgoing", "deadletter.created"}}, http.StatusCreated, &sub)

	sendWant := func(want int, fields ...any) {
		t.Helper()
		status, _, b := send(t, s, "default", "wait=true", msg(append([]any{"activationName", "events"}, fields...)...), bearerHeader(s.Key)...)
		require.Equal(t, want, status, "%s", b)
	}
	sendWant(http.StatusOK, "type", "Chat", "text", "hello", "data", map[string]any{"mood": []any{1, "x", nil}})
	sendWant(http.StatusOK, "type", "Data", "text", "sum", "data", map[string]any{"values": []int{2, 3}})
	sendWant(http.StatusConflict, "type", "Data", "text", "fail", "data", map[string]any{"status": http.StatusConflict})
	sendWant(http.StatusOK, "type", "Data", "text", "remind", "data", map[string]any{"text": "stretch", "ms": 1})
	sendWant(http.StatusOK, "type", "File", "text", "a.txt", "data", map[string]any{"content": "aGVsbG8=", "fileName": "a.txt", "contentType": "text/plain"})
	status, _, b := call(t, s.URL, "Echo", "echo", q("apikey", s.Key, "participantId", "ada"), []byte(`{"n":1}`), "Content-Type", "application/json")
	require.Equal(t, http.StatusOK, status, "%s", b)
	status, _, b = converse(t, s, q("workflow", "Echo", "type", "Chat", "text", `call sum {"values":[2,3]}`, "participantId", "ada", "apikey", s.Key), "")
	require.Equal(t, http.StatusOK, status, "%s", b)
	status, _, b = call(t, s.URL, "Failing", "fail", q("apikey", s.Key), nil)
	require.Equal(t, http.StatusInternalServerError, status, "%s", b)

	// Every kind of event those make: both directions of each message type, a tool call, a
	// timer's message and the post it makes, a dead letter.
	want := []string{
		"message.incoming 0", "message.outgoing 0", "message.incoming 1", "message.outgoing 1",
		"message.incoming 2", "message.outgoing 2", "message.incoming 4", "message.outgoing 4",
		"tool call", "timer", "post stretch", "deadletter.created",
	}
	var missing []string
	require.Eventually(t, func() bool {
		missing = rcv.missing(want)
		return len(missing) == 0
	}, 30*time.Second, 20*time.Millisecond, "deliveries of %v", &missing)

	delivered := map[string]int{}
	for _, d := range rcv.deliveries() {
		delivered[d.event.Type]++
		assert.NoError(t, checkDelivery(doc, d.event.Type, d), "%s %s", d.header.Get("webhook-id"), d.body)
		assert.NoError(t, webhooksig.Standard{Secret: sub.Secret}.Verify(flatHeader(d.header), d.body), "the signature of %s", d.header.Get("webhook-id"))
	}
	for name := range doc.Webhooks {
		assert.Positive(t, delivered[name], "no delivery of webhook %s", name)
	}
	t.Logf("deliveries checked against the webhooks: %v", delivered)

	// The webhooks are told apart: an event fits its own webhook only.
	first := rcv.deliveries()[0]
	for name := range doc.Webhooks {
		if name != first.event.Type {
			assert.Error(t, checkDelivery(doc, name, first), "a %s event checked as %s", first.event.Type, name)
		}
	}
}

// checkDelivery checks a delivery against the document's webhook name, as a request to it.
func checkDelivery(doc *openapi3.T, name string, d delivery) error {
	item := doc.Webhooks[name]
	if item == nil {
		return fmt.Errorf("the document has no webhook %q", name)
	}
	op := item.GetOperation(d.method)
	if op == nil {
		return fmt.Errorf("webhook %s has no %s operation", name, d.method)
	}
	req := httptest.NewRequest(d.method, "/events", bytes.NewReader(d.body))
	req.Header = d.header.Clone()
	route := &routers.Route{Spec: doc, Path: name, PathItem: item, Method: d.method, Operation: op}
	in := &openapi3filter.RequestValidationInput{Request: req, Route: route, Options: &openapi3filter.Options{MultiError: true}}
	return openapi3filter.ValidateRequest(context.Background(), in)
}

// delivery is a request an eventReceiver got.
type delivery struct {
	method string
	header http.Header
	body   []byte
	event  deliveredEvent
}

// deliveredEvent is what eventReceiver reads of a body to tell the kinds of events apart.
type deliveredEvent struct {
	Type string `json:"type"`
	Data struct {
		Message *struct {
			MessageType int               `json:"messageType"`
			Text        *string           `json:"text"`
			Metadata    map[string]string `json:"metadata"`
		} `json:"message"`
	} `json:"data"`
}

// kinds names the kinds of event e is, as TestOpenAPIWebhooksDescribeDeliveredEvents waits for
// them.
func (e deliveredEvent) kinds() []string {
	m := e.Data.Message
	if m == nil {
		return []string{e.Type}
	}
	kinds := []string{fmt.Sprintf("%s %d", e.Type, m.MessageType)}
	if m.Metadata["toolCallId"] != "" {
		kinds = append(kinds, "tool call")
	}
	if m.Metadata["timer"] != "" {
		kinds = append(kinds, "timer")
	}
	if e.Type == "message.outgoing" && m.Text != nil && *m.Text == "stretch" {
		kinds = append(kinds, "post stretch")
	}
	return kinds
}

// eventReceiver is a subscription's receiver that records every delivery and accepts it.
type eventReceiver struct {
	*httptest.Server
	mu  sync.Mutex
	got []delivery
}

func newEventReceiver(t *testing.T) *eventReceiver {
	t.Helper()
	r := &eventReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		d := delivery{method: req.Method, header: req.Header.Clone(), body: body}
		_ = json.Unmarshal(body, &d.event) // a body that is not JSON fails its check
		r.mu.Lock()
		r.got = append(r.got, d)
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *eventReceiver) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// missing returns the kinds of want that no delivery so far was.
func (r *eventReceiver) missing(want []string) []string {
	seen := map[string]bool{}
	for _, d := range r.deliveries() {
		for _, k := range d.event.kinds() {
			seen[k] = true
		}
	}
	var missing []string
	for _, k := range want {
		if !seen[k] {
			missing = append(missing, k)
		}
	}
	return missing
}

// flatHeader returns the first value of each header, as webhooksig's verifiers take them.
func flatHeader(h http.Header) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		out[k] = v[0]
	}
	return out
}
