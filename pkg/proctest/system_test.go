package proctest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/proctest"
	"github.com/agentbus/agentbus/pkg/registry"
	"github.com/agentbus/agentbus/pkg/subject"
)

func TestMain(m *testing.M) {
	code := m.Run()
	proctest.Cleanup()
	os.Exit(code)
}

// needProcesses skips the test unless AGENTBUS_PROCESS_TEST is set: these tests build the
// binaries and run a stack of processes for tens of seconds (.ci/run sets it).
func needProcesses(t testing.TB) proctest.Bins {
	t.Helper()
	if testing.Short() || os.Getenv("AGENTBUS_PROCESS_TEST") == "" {
		t.Skip("runs agentbus as separate processes; set AGENTBUS_PROCESS_TEST=1")
	}
	bins, err := proctest.Build("../..")
	require.NoError(t, err)
	return bins
}

const (
	adminKey   = "proctest-system-admin-key-0123456789"
	partitions = 32
	echoWF     = "default:Echo:Supervisor Workflow:"
)

// system is one agentbus deployment of processes: NATS (a server or a cluster), one ingress,
// workflow hosts, and the test's own NATS connection to look at heartbeats.
type system struct {
	t       testing.TB
	bins    proctest.Bins
	natsURL string
	env     []string
	ingress *proctest.Ingress
	inEnv   []string // the ingress's environment, for another ingress (addIngress)
	hosts   map[string]*proctest.Proc
	key     string
	client  *http.Client
	js      jetstream.JetStream
	hostsKV jetstream.KeyValue
	mu      sync.Mutex
}

// newSystem starts an ingress against natsURL, creates tenant "default" with a tenant-admin key,
// and connects the test to NATS. env goes to every process (ingress and hosts).
func newSystem(t testing.TB, bins proctest.Bins, natsURL string, env ...string) *system {
	t.Helper()
	s := &system{t: t, bins: bins, natsURL: natsURL, hosts: map[string]*proctest.Proc{},
		env: append([]string{fmt.Sprintf("AGENTBUS_PARTITIONS=%d", partitions), "AGENTBUS_LOG_LEVEL=info"}, env...),
		// Longer than any webhook timeout a test gives the ingress, so that the ingress answers.
		client: &http.Client{Timeout: 45 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
	// The ingress's settings, then env, which may change them (the last of a name counts).
	s.inEnv = append([]string{"AGENTBUS_ADMIN_KEY=" + adminKey, "AGENTBUS_RATE_LIMIT=0", "AGENTBUS_WEBHOOK_TIMEOUT=20s",
		"AGENTBUS_MAX_WAITING_PER_TENANT=100000"}, s.env...)
	s.ingress = proctest.StartIngress(t, bins, "ingress", natsURL, s.inEnv...)

	nc, err := nats.Connect(natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	s.js, err = jetstream.New(nc)
	require.NoError(t, err)
	ctx := proctest.Context(t, 30*time.Second)
	s.hostsKV, err = s.js.KeyValue(ctx, subject.HostsBucket)
	require.NoError(t, err)

	status, b := s.do(ctx, http.MethodPost, "/api/v1/admin/tenants", adminKey, `{"id":"default"}`)
	require.Contains(t, []int{http.StatusCreated, http.StatusOK, http.StatusConflict}, status, "creating the tenant: %s", b)
	status, b = s.do(ctx, http.MethodPost, "/api/v1/admin/tenants/default/keys", adminKey, `{"name":"proctest","role":"tenant-admin"}`)
	require.Equal(t, http.StatusCreated, status, "creating a key: %s", b)
	var k struct {
		Key string `json:"key"`
	}
	require.NoError(t, json.Unmarshal(b, &k))
	s.key = k.Key
	return s
}

// addIngress starts another ingress process of the system, named name, and waits until it
// serves.
func (s *system) addIngress(name string) *proctest.Ingress {
	s.t.Helper()
	return proctest.StartIngress(s.t, s.bins, name, s.natsURL, s.inEnv...)
}

// do sends an admin API request with a bearer key.
func (s *system) do(ctx context.Context, method, path, key, body string) (int, []byte) {
	s.t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, s.ingress.URL+path, strings.NewReader(body))
	require.NoError(s.t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// startHost starts workflow host id, or restarts it when it ran before.
func (s *system) startHost(id string, env ...string) {
	s.t.Helper()
	s.mu.Lock()
	p := s.hosts[id]
	s.mu.Unlock()
	if p != nil {
		p.Restart(s.t)
		return
	}
	p = proctest.StartHost(s.t, s.bins, id, s.natsURL, append(s.env, env...)...)
	s.mu.Lock()
	s.hosts[id] = p
	s.mu.Unlock()
}

// heartbeats returns the heartbeats in the hosts bucket, by host id (none when it cannot be
// read).
func (s *system) heartbeats(ctx context.Context) map[string]registry.Host {
	hbs, _ := registry.Heartbeats(ctx, s.js, s.hostsKV)
	return hbs
}

// inboxPartitions reads the partition count of the agent's inbox: the system's count until the
// inbox exists (a remote agent's registration sets its own).
func (s *system) inboxPartitions(ctx context.Context, agent string) int {
	st, err := s.js.Stream(ctx, subject.InboxStream(agent))
	if err != nil {
		return partitions
	}
	if n := bus.InboxPartitions(st); n > 0 {
		return n
	}
	return partitions
}

// waitSettled waits until hosts ids have settled Echo's partitions and returns how long it took.
func (s *system) waitSettled(ids []string, within time.Duration) time.Duration {
	s.t.Helper()
	return s.waitSettledAgent("Echo", ids, within)
}

// waitSettledAgent waits until the heartbeats of hosts ids divide the partitions of the agent's
// inbox as placement says (registry.Settled), and returns how long it took. Each look reads the
// heartbeats within settleRead, so that a read whose answer was lost (a NATS cluster still
// electing its leaders) costs one look, not the whole wait; the first read that fails is logged.
func (s *system) waitSettledAgent(agent string, ids []string, within time.Duration) time.Duration {
	s.t.Helper()
	start := time.Now()
	failed := false
	look := func() (map[string]registry.Host, error) {
		ctx, cancel := context.WithTimeout(context.Background(), settleRead)
		defer cancel()
		hbs, err := registry.Heartbeats(ctx, s.js, s.hostsKV)
		if err != nil && !failed {
			failed = true
			s.t.Logf("reading the heartbeats %v into the wait for settled partitions: %v", time.Since(start).Round(time.Millisecond), err)
		}
		return hbs, err
	}
	for {
		hbs, _ := look()
		ctx, cancel := context.WithTimeout(context.Background(), settleRead)
		n := s.inboxPartitions(ctx, agent)
		cancel()
		if registry.Settled(hbs, agent, n, ids) {
			break
		}
		if time.Since(start) > within {
			hbs, err := look()
			if err != nil {
				s.t.Logf("reading the heartbeats: %v", err)
			}
			for id, hb := range hbs {
				s.t.Logf("heartbeat %s: %v", id, hb.Partitions[agent])
			}
			require.FailNowf(s.t, "not settled", "hosts %v did not settle %s's partitions within %v", ids, agent, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// settleRead bounds each reading of the heartbeats and the inbox while waitSettledAgent waits.
const settleRead = 5 * time.Second

// webhook calls a webhook method of an Echo instance and returns the status and body.
func (s *system) webhook(ctx context.Context, activation, method string, query url.Values, hdr ...string) (int, []byte, error) {
	return s.webhookOn(ctx, echoWF, activation, method, query, hdr...)
}

// webhookOn calls a webhook method of the instance wf+activation (wf is an agent's workflow id
// prefix, such as echoWF) and returns the status and body.
func (s *system) webhookOn(ctx context.Context, wf, activation, method string, query url.Values, hdr ...string) (int, []byte, error) {
	return s.webhookAt(ctx, s.ingress.URL, wf, activation, method, query, hdr...)
}

// webhookAt calls a webhook method of the instance wf+activation through the ingress at base
// (its URL) and returns the status and body.
func (s *system) webhookAt(ctx context.Context, base, wf, activation, method string, query url.Values, hdr ...string) (int, []byte, error) {
	if query == nil {
		query = url.Values{}
	}
	query.Set("apikey", s.key)
	u := base + "/api/user/webhooks/" + url.PathEscape(wf+activation) + "/" + method + "?" + query.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return 0, nil, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("calling %s: %w", method, unwrapURL(err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// converse calls a Data method of an Echo instance through converse, with params as the body,
// and returns the status and body. query adds converse's optional parameters (participantId,
// timeoutSeconds, …); hdr are header name and value pairs.
func (s *system) converse(ctx context.Context, activation, method string, params any, query url.Values, hdr ...string) (int, []byte, error) {
	return s.converseOn(ctx, echoWF, activation, method, params, query, hdr...)
}

// converseOn is converse with the instance wf+activation (wf is an agent's workflow id prefix,
// such as echoWF).
func (s *system) converseOn(ctx context.Context, wf, activation, method string, params any, query url.Values, hdr ...string) (int, []byte, error) {
	body, err := json.Marshal(params)
	if err != nil {
		return 0, nil, err
	}
	if query == nil {
		query = url.Values{}
	}
	query.Set("workflow", wf+activation)
	query.Set("type", "Data")
	query.Set("text", method)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.ingress.URL+"/api/user/rest/converse?"+query.Encode(), bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.key)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("calling %s: %w", method, unwrapURL(err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// unwrapURL drops url.Error's wrapper, which repeats the URL and so the key.
func unwrapURL(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

// hostOf asks Echo's host method which host serves an instance.
func (s *system) hostOf(ctx context.Context, activation string) (string, error) {
	return s.hostOfOn(ctx, echoWF, activation)
}

// hostOfOn asks the host method of the agent of wf (Echo's, or a remote Echo's) which host serves
// an instance.
func (s *system) hostOfOn(ctx context.Context, wf, activation string) (string, error) {
	status, b, err := s.webhookOn(ctx, wf, activation, "host", nil)
	if err != nil {
		return "", err
	}
	if status != http.StatusOK {
		return "", fmt.Errorf("host: %d %s", status, b)
	}
	var r struct {
		HostID string `json:"hostId"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return "", err
	}
	return r.HostID, nil
}

// waitServing waits until every Echo partition can be served: a call to an instance answers.
func (s *system) waitServing(within time.Duration) {
	s.t.Helper()
	ctx := proctest.Context(s.t, within)
	for {
		if _, err := s.hostOf(ctx, "ready-probe"); err == nil {
			return
		}
		require.NoError(s.t, ctx.Err(), "no host answered within %v", within)
		time.Sleep(50 * time.Millisecond)
	}
}

// send posts a message through the admin send endpoint and returns the status and body. With
// wait, the call waits for the handler's answer (send's wait=true).
func (s *system) send(ctx context.Context, wait bool, body any) (int, []byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	u := s.ingress.URL + "/api/v1/admin/tenants/default/messaging/send"
	if wait {
		u += "?wait=true"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.key)
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, unwrapURL(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}
