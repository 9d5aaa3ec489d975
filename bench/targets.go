package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/remote"
	"github.com/agentbus/agentbus/pkg/stack"
	"github.com/agentbus/agentbus/pkg/subject"
)

// Targets: the endpoint of the stack that the load goes to (the bare phase imitates it).
const (
	targetWebhook  = "webhook"   // POST /api/user/webhooks/{workflow}/echo?apikey=…&n=1, body o.Body
	targetSend     = "send"      // POST /api/v1/admin/tenants/default/messaging/send: a Data message, 202 at once
	targetSendWait = "send-wait" // the same with ?wait=true: 200 with Echo's reply
	targetConverse = "converse"  // POST /api/user/rest/converse?workflow=…&type=Data&text=echo: 200 with Echo's reply
)

// targets lists the targets in the order the usage gives them.
var targets = []string{targetWebhook, targetSend, targetSendWait, targetConverse}

// benchParams are the query parameters (besides the key) of every webhook request.
var benchParams = map[string]string{"n": "1"}

// benchTenant and benchParticipant are the tenant the load addresses and the participant that
// send and converse name.
const (
	benchTenant      = "default"
	benchParticipant = "bench"
)

// workflowID is the workflow the i-th instance of the load is addressed to.
func workflowID(o options, i int) string {
	return tenantOf(o, i) + ":Echo:Supervisor Workflow:" + activation(i)
}

// tenantOf is the tenant of the i-th instance of the load: benchTenant, or with -tenants N, the
// tenant of its place among the N (the instances are dealt round-robin to them).
func tenantOf(o options, i int) string {
	if o.Tenants <= 1 {
		return benchTenant
	}
	return fmt.Sprintf("bench-%d", i%o.Tenants)
}

// benchTenants are the tenants of -tenants n: bench-0, bench-1, …
func benchTenants(o options) []string {
	out := make([]string, o.Tenants)
	for j := range out {
		out[j] = tenantOf(o, j)
	}
	return out
}

// activation is the activation name of the i-th instance of the load.
func activation(i int) string { return fmt.Sprintf("bench-%d", i) }

// request is one request of the load.
type request struct {
	url  string
	body []byte
}

// endpoint is what a phase's load goes to: one request per instance, sent round-robin, each with
// the same Authorization header and to be answered with the same status.
type endpoint struct {
	reqs   []request
	auth   string // Authorization header; empty for none
	status int    // the status every answer must have
	// others, when set, returns the CPU time used so far by each of the other processes that
	// serve the load, by name; profile starts CPU profiles of d of them, into files named
	// prefix.name, and returns a function that waits until they are written.
	others func() map[string]procUsage
	// msgs, when set, returns the messages the NATS server has received and sent so far.
	msgs    func() (in, out int64)
	profile func(prefix string, d time.Duration) (wait func())
	// backlog, when set, returns the requests accepted and not yet handled (in Echo's inbox):
	// an answer that comes before the handler runs (send's 202) leaves it growing while the host
	// lags behind the ingress.
	backlog func(ctx context.Context) (uint64, error)
}

// shape is what tells the requests of a load apart by size alone: the length of the request
// target (path and query) plus that of the body. Requests to instances whose activation names are
// equally long have the same shape and get equally long answers.
func shape(requestURI string, bodyLen int64) int64 { return int64(len(requestURI)) + bodyLen }

func (r request) shape() (int64, error) {
	u, err := url.Parse(r.url)
	if err != nil {
		return 0, err
	}
	return shape(u.RequestURI(), int64(len(r.body))), nil
}

// newEndpoint builds the load of o.Target against the server at base with key: the agentbus
// phase's with the real key, the bare phase's with a made-up one of the same length, so that
// both send requests of the same sizes.
func newEndpoint(o options, base, key string) (endpoint, error) {
	ep := endpoint{reqs: make([]request, o.Instances), auth: "Bearer " + key, status: http.StatusOK}
	switch o.Target {
	case targetWebhook:
		ep.auth = ""
		query := url.Values{"apikey": {key}}
		for k, v := range benchParams {
			query.Set(k, v)
		}
		qs := query.Encode()
		for i := range ep.reqs {
			if len(o.tenantKeys) > 0 {
				query.Set("apikey", o.tenantKeys[i%len(o.tenantKeys)])
				qs = query.Encode()
			}
			ep.reqs[i] = request{url: base + "/api/user/webhooks/" + url.PathEscape(workflowID(o, i)) + "/echo?" + qs, body: o.Body}
		}
	case targetSend, targetSendWait:
		target := base + "/api/v1/admin/tenants/" + benchTenant + "/messaging/send"
		if o.Target == targetSendWait {
			target += "?wait=true"
		} else {
			ep.status = http.StatusAccepted
		}
		for i := range ep.reqs {
			body, err := json.Marshal(struct {
				AgentName      string          `json:"agentName"`
				ActivationName string          `json:"activationName"`
				ParticipantID  string          `json:"participantId"`
				Type           string          `json:"type"`
				Text           string          `json:"text"`
				Data           json.RawMessage `json:"data"`
			}{echo.Name, activation(i), benchParticipant, "Data", "echo", o.Body})
			if err != nil {
				return endpoint{}, fmt.Errorf("-body must be a JSON object for -target %s: %w", o.Target, err)
			}
			ep.reqs[i] = request{url: target, body: body}
		}
	case targetConverse:
		for i := range ep.reqs {
			// The workflow as the usage spells it: colons kept, the space as %20.
			ep.reqs[i] = request{
				url:  base + "/api/user/rest/converse?workflow=" + url.PathEscape(workflowID(o, i)) + "&type=Data&text=echo&participantId=" + benchParticipant,
				body: o.Body,
			}
		}
	default:
		return endpoint{}, fmt.Errorf("unknown target %q", o.Target)
	}
	return ep, nil
}

// startAgentbus starts the whole stack in-process on a temporary store, seeds a tenant-admin key
// and returns the load of o.Target against o.Instances Echo instances and a function that stops
// the stack and removes the store.
func startAgentbus(ctx context.Context, o options) (ep endpoint, stop func() error, err error) {
	if o.URL != "" {
		ep, err := newEndpoint(o, strings.TrimSuffix(o.URL, "/"), o.Key)
		return ep, func() error { return nil }, err
	}
	dir, err := os.MkdirTemp("", "agentbus-bench-")
	if err != nil {
		return endpoint{}, nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := stack.Start(sctx, stack.Config{
		DataDir:  dir,
		HTTPAddr: "127.0.0.1:0",
		Agents:   []*agent.Agent{echo.New()},
		Bus:      bus.Config{Partitions: o.Partitions},
		Host:     agent.HostConfig{IdleAfter: o.PartitionIdleAfter},
		Ingress: ingress.Config{
			RateLimit:       ingress.Rate{PerSecond: o.RateLimit},
			TenantRateLimit: ingress.Rate{PerSecond: o.RateLimit},
		},
		Logger: nil,
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return endpoint{}, nil, fmt.Errorf("starting the stack: %w", err)
	}
	stop = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return errors.Join(st.Stop(ctx), os.RemoveAll(dir))
	}
	defer func() {
		if err != nil {
			_ = stop()
		}
	}()

	if err = registerIdleAgents(ctx, st, o.RemoteAgents); err != nil {
		return endpoint{}, nil, err
	}
	tenants := []string{benchTenant}
	if o.Tenants > 1 {
		tenants = benchTenants(o)
	}
	var key string
	for _, tenant := range tenants {
		if err = st.Keys.EnsureTenant(ctx, tenant); err != nil {
			return endpoint{}, nil, fmt.Errorf("creating tenant: %w", err)
		}
		if key, _, err = st.Keys.Create(ctx, keys.NewKey{Tenant: tenant, Role: keys.RoleTenantAdmin, Name: "bench"}); err != nil {
			return endpoint{}, nil, fmt.Errorf("creating key: %w", err)
		}
		if o.Tenants > 1 {
			o.tenantKeys = append(o.tenantKeys, key)
		}
	}
	// Keys reach the ingress through its watch of the keys bucket, in the order they were made.
	kctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for !st.Ingress.KeyKnown(key) {
		if !sleepUntil(kctx, time.Now().Add(2*time.Millisecond)) {
			err = fmt.Errorf("waiting for the key to reach the ingress: %w", kctx.Err())
			return endpoint{}, nil, err
		}
	}
	if ep, err = newEndpoint(o, st.URL, key); err != nil {
		return endpoint{}, nil, err
	}
	ep.backlog = func(ctx context.Context) (uint64, error) { return st.Res.InboxRequests(ctx, echo.Name) }
	ep.msgs = func() (in, out int64) {
		v, err := st.NATS.Varz(nil)
		if err != nil {
			return 0, 0
		}
		return v.InMsgs, v.OutMsgs
	}
	return ep, stop, nil
}

// registerIdleAgents registers n remote agents of the system admin that nothing calls, and waits
// until the stack's hosts created their inbox consumers.
func registerIdleAgents(ctx context.Context, st *stack.Stack, n int) error {
	if n <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	store := remote.NewStore(st.Res, nil, 0)
	for i := range n {
		// The partitions of a tenant's own agent (remote.DefaultPartitions).
		reg := remote.Registration{Name: fmt.Sprintf("Idle%d", i), URL: "http://127.0.0.1:9/idle", Chat: true, Partitions: remote.DefaultPartitions}
		if _, err := store.Put(ctx, "", reg, false); err != nil {
			return fmt.Errorf("registering idle remote agent %d: %w", i, err)
		}
	}
	for i := 0; i < n; {
		have := 0
		if inbox, err := st.Res.JS.Stream(ctx, subject.InboxStream(fmt.Sprintf("Idle%d", i))); err == nil {
			names := inbox.ConsumerNames(ctx)
			for range names.Name() {
				have++
			}
			if names.Err() == nil && have == bus.InboxPartitions(inbox) {
				i++
				continue
			}
		}
		if !sleepUntil(ctx, time.Now().Add(50*time.Millisecond)) {
			return fmt.Errorf("waiting for the consumers of idle remote agent %d (%d): %w", i, have, ctx.Err())
		}
	}
	return nil
}

// answers are what the bare phase answers: the agentbus phase's status and headers, and a body as
// long as the agentbus phase's answer to a request of each shape.
type answers struct {
	status int
	header http.Header      // without Date and Content-Length, which net/http sets
	bodies map[int64][]byte // by request shape
}

// webhookAnswers are the answers of the webhook target, computed: the JSON that Echo's echo
// method gives for o.Body, whatever the shape, with the headers the ingress sends (a
// 36-character request id and the content type).
func webhookAnswers(o options) (*answers, error) {
	body, err := echoAnswer(o.Body, benchParams)
	if err != nil {
		return nil, err
	}
	a := &answers{
		status: http.StatusOK,
		header: http.Header{"X-Request-Id": {"00000000-0000-4000-8000-000000000000"}, "Content-Type": {"application/json"}},
		bodies: map[int64][]byte{},
	}
	ep, err := newEndpoint(o, "http://127.0.0.1:1", keys.Generate())
	if err != nil {
		return nil, err
	}
	for _, r := range ep.reqs {
		s, err := r.shape()
		if err != nil {
			return nil, err
		}
		a.bodies[s] = body
	}
	return a, nil
}

// probeAnswers measures the answers of o.Target from the real thing: it starts the stack, sends
// one request of each shape, keeps what came back and stops the stack. The answers of send and
// converse hold ids whose lengths follow the activation name's, and the handler's reply.
func probeAnswers(ctx context.Context, o options) (a *answers, err error) {
	ep, stop, err := startAgentbus(ctx, o)
	if err != nil {
		return nil, err
	}
	client := newClient(1)
	defer func() {
		client.CloseIdleConnections()
		if serr := stop(); serr != nil && err == nil {
			err = fmt.Errorf("stopping the stack: %w", serr)
		}
	}()
	a = &answers{status: ep.status, bodies: map[int64][]byte{}}
	for _, r := range ep.reqs {
		s, err := r.shape()
		if err != nil {
			return nil, err
		}
		if _, ok := a.bodies[s]; ok {
			continue
		}
		body, header, err := probe(ctx, client, ep, r)
		if err != nil {
			return nil, fmt.Errorf("measuring the answer of %s: %w", o.Target, err)
		}
		if a.header == nil {
			header.Del("Date")
			header.Del("Content-Length")
			a.header = header
		}
		a.bodies[s] = body
	}
	return a, nil
}

// probe sends one request of ep and returns the answer's body and headers.
func probe(ctx context.Context, client *http.Client, ep endpoint, r request) ([]byte, http.Header, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := newRequest(ctx, ep, r)
	if err != nil {
		return nil, nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, unwrapURLError(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("reading body: %w", err)
	}
	if resp.StatusCode != ep.status {
		return nil, nil, fmt.Errorf("status %d, want %d: %s", resp.StatusCode, ep.status, bytes.TrimSpace(body[:min(len(body), 300)]))
	}
	return body, resp.Header, nil
}

// startBare serves, on a loopback port, a plain handler that reads the body and answers with the
// status, headers and a body as long as the agentbus phase's answer (o.answers, computed or
// measured when not given), and returns the load of o.Target against it, of the same shape as
// the agentbus phase's, and a function that stops the server.
//
// The handler tells requests to instances with activation names of different lengths apart by
// their shape, which costs it nothing: it counts the body's bytes anyway.
func startBare(ctx context.Context, o options) (ep endpoint, stop func() error, err error) {
	ans := o.answers
	if ans == nil {
		if o.Target == targetWebhook {
			ans, err = webhookAnswers(o)
		} else {
			ans, err = probeAnswers(ctx, o)
		}
		if err != nil {
			return endpoint{}, nil, err
		}
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body, ok := ans.bodies[shape(r.RequestURI, n)]
		if !ok {
			http.Error(w, "bench: no answer for a request of this shape", http.StatusInternalServerError)
			return
		}
		header := w.Header()
		for k, v := range ans.header {
			header[k] = v
		}
		w.WriteHeader(ans.status)
		_, _ = w.Write(body)
	})
	base, stop, err := serveLoopback(h)
	if err != nil {
		return endpoint{}, nil, err
	}
	defer func() {
		if err != nil {
			_ = stop()
		}
	}()

	// A made-up key of the real one's length keeps the requests' sizes the same.
	if ep, err = newEndpoint(o, base, keys.Generate()); err != nil {
		return endpoint{}, nil, err
	}
	if ep.status != ans.status {
		return endpoint{}, nil, fmt.Errorf("answers of status %d for a target that wants %d", ans.status, ep.status)
	}
	for _, r := range ep.reqs {
		s, err := r.shape()
		if err != nil {
			return endpoint{}, nil, err
		}
		if _, ok := ans.bodies[s]; !ok {
			return endpoint{}, nil, fmt.Errorf("no answer measured for requests of shape %d (%s)", s, r.url)
		}
	}
	return ep, stop, nil
}

// serveLoopback serves h on a loopback port and returns its base URL and a function that shuts
// the server down.
func serveLoopback(h http.Handler) (base string, stop func() error, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	stop = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := srv.Shutdown(ctx)
		if serr := <-done; !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
		return err
	}
	return "http://" + ln.Addr().String(), stop, nil
}

// echoAnswer is the body Echo's echo method answers for body and params.
func echoAnswer(body []byte, params map[string]string) ([]byte, error) {
	sum := sha256.Sum256(body)
	out := map[string]any{"params": params, "size": len(body), "sha256": hex.EncodeToString(sum[:])}
	if utf8.Valid(body) {
		out["body"] = string(body)
	} else {
		out["bodyBase64"] = base64.StdEncoding.EncodeToString(body)
	}
	return json.Marshal(out)
}
