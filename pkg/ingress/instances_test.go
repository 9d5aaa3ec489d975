package ingress_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/inspect"
	"github.com/agentbus/agentbus/pkg/instance"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/registry"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// instanceList is the answer of the instance listing.
type instanceList struct {
	Instances []struct {
		WorkflowID, WorkflowType, Activation, RunID, Status string
		StartedAt, LastActiveAt                             time.Time
		Events                                              int64
	} `json:"instances"`
	Next string `json:"next"`
}

// instanceShow is the answer of the instance inspector.
type instanceShow struct {
	WorkflowID, AgentName, WorkflowType, Activation, RunID, Status string
	Events                                                         int64
	State                                                          json.RawMessage
	EarlierRuns                                                    []instance.RunSummary
	Partition                                                      int
	Host                                                           string
	DeadLetters                                                    []struct {
		ID         uint64 `json:"id"`
		WorkflowID string `json:"workflowId"`
	} `json:"deadLetters"`
	Schedules []struct {
		Name string `json:"name"`
	} `json:"schedules"`
	RecentRequests []struct {
		RequestID, ParticipantID, Type, Method string
		Status                                 int
		DurationMs                             *int64
	} `json:"recentRequests"`
	Queued []any `json:"queued"`
}

func echoWorkflow(tenant, activation string) string {
	return tenant + ":Echo:Supervisor Workflow:" + activation
}

func instancePath(tenant, workflowID string) string {
	return "/api/v1/admin/tenants/" + tenant + "/instances/" + url.PathEscape(workflowID)
}

func listPath(tenant, agent string, query url.Values) string {
	return "/api/v1/admin/tenants/" + tenant + "/agents/" + url.PathEscape(agent) + "/instances?" + query.Encode()
}

// echoHost calls Echo's host webhook on an instance and returns the host and run it names.
func echoHost(t *testing.T, s *stacktest.Stack, key, workflowID string) (hostID, runID string) {
	t.Helper()
	status, _, b := call(t, s.URL, workflowID, "host", q("apikey", key), nil)
	require.Equal(t, http.StatusOK, status, "%s", b)
	var ans struct{ HostID, RunID string }
	require.NoError(t, json.Unmarshal(b, &ans))
	return ans.HostID, ans.RunID
}

func activations(l instanceList) []string {
	var out []string
	for _, it := range l.Instances {
		out = append(out, it.Activation+"/"+it.Status)
	}
	return out
}

// TestInstanceListing: an agent's instances list newest run first, filtered by status, prefix and
// activity, a page at a time with cursors; another tenant's key cannot list them, and its own
// listing does not show them.
func TestInstanceListing(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	var runs []string
	for _, a := range []string{"blue-1", "red-1", "blue-2", "red-2", "blue-3"} {
		_, run := echoHost(t, s, s.Key, echoWorkflow("default", a))
		runs = append(runs, run)
	}
	// The host records a run's activity just after it answers.
	time.Sleep(100 * time.Millisecond)
	between := time.Now()
	echoHost(t, s, s.OtherKey, echoWorkflow("other", "green"))
	// red-1 runs again: it moves to the top.
	_, again := echoHost(t, s, s.Key, echoWorkflow("default", "red-1"))
	assert.Equal(t, runs[1], again, "a running instance keeps its run")
	adminOK(t, s, post, instancePath("default", echoWorkflow("default", "blue-2"))+"/complete", s.Key, nil, http.StatusOK, nil)

	// Event counts and activity times are written when the host drops the idle instance.
	time.Sleep(3 * time.Second)
	list := func(tenant, agent, key string, query url.Values) instanceList {
		t.Helper()
		var l instanceList
		adminOK(t, s, get, listPath(tenant, agent, query), key, nil, http.StatusOK, &l)
		return l
	}
	l := list("default", "Echo", s.Key, nil)
	assert.Equal(t, []string{"blue-3/running", "red-2/running", "blue-2/completed", "red-1/running", "blue-1/running"}, activations(l))
	assert.Empty(t, l.Next)
	first := l.Instances[0]
	assert.Equal(t, echoWorkflow("default", "blue-3"), first.WorkflowID)
	assert.Equal(t, "Supervisor Workflow", first.WorkflowType)
	assert.Equal(t, runs[4], first.RunID)
	assert.EqualValues(t, 1, first.Events)
	assert.False(t, first.StartedAt.IsZero())

	l = list("default", "Echo", s.Key, q("prefix", "blue-"))
	assert.Equal(t, []string{"blue-3/running", "blue-2/completed", "blue-1/running"}, activations(l))
	l = list("default", "Echo", s.Key, q("status", "completed"))
	assert.Equal(t, []string{"blue-2/completed"}, activations(l))
	l = list("default", "Echo", s.Key, q("status", "running", "prefix", "red"))
	assert.Equal(t, []string{"red-2/running", "red-1/running"}, activations(l))
	l = list("default", "Echo", s.Key, q("activeAfter", between.UTC().Format(time.RFC3339Nano)))
	assert.Equal(t, []string{"red-1/running"}, activations(l), "red-1 alone was active after")
	l = list("default", "Echo", s.Key, q("activeBefore", between.UTC().Format(time.RFC3339Nano), "prefix", "red"))
	assert.Equal(t, []string{"red-2/running"}, activations(l))

	// Pages of two follow their cursors to the end.
	var pages [][]string
	query := q("limit", "2")
	for {
		l = list("default", "Echo", s.Key, query)
		pages = append(pages, activations(l))
		if l.Next == "" {
			break
		}
		require.Less(t, len(pages), 5)
		query.Set("cursor", l.Next)
	}
	assert.Equal(t, [][]string{{"blue-3/running", "red-2/running"}, {"blue-2/completed", "red-1/running"}, {"blue-1/running"}}, pages)

	// Tenants: the other's key may not list default's, and its own listing has its own only.
	status, h, b := adminReq(t, s, get, listPath("default", "Echo", nil), s.OtherKey, nil)
	problemOf(t, status, h.Get("Content-Type"), b, http.StatusForbidden)
	l = list("other", "Echo", s.OtherKey, nil)
	assert.Equal(t, []string{"green/running"}, activations(l))
	l = list("default", "Nobody", s.Key, nil)
	assert.Empty(t, l.Instances)

	// Refusals.
	for _, tc := range []adminRefusal{
		{name: "status", method: get, path: listPath("default", "Echo", q("status", "sleeping")), key: s.Key, want: 400, slug: "invalid-query"},
		{name: "limit", method: get, path: listPath("default", "Echo", q("limit", "0")), key: s.Key, want: 400, slug: "invalid-query"},
		{name: "time", method: get, path: listPath("default", "Echo", q("activeAfter", "yesterday")), key: s.Key, want: 400, slug: "invalid-query"},
		{name: "cursor", method: get, path: listPath("default", "Echo", q("cursor", "x")), key: s.Key, want: 400, slug: "invalid-cursor"},
		{name: "foreign cursor", method: get, path: listPath("default", "Nobody", q("cursor", "1")), key: s.Key, want: 400, slug: "invalid-cursor"},
		{name: "no key", method: get, path: listPath("default", "Echo", nil), want: 401, slug: "unauthorized"},
	} {
		t.Run(tc.name, func(t *testing.T) { checkAdminRefusal(t, s, tc) })
	}
}

// TestInstanceShow: the inspector shows an instance's run, state, partition and owning host (the
// host that answers it), its timers, dead letters and recent requests; another tenant's
// instance is not found, exactly like a missing one.
func TestInstanceShow(t *testing.T) {
	t.Parallel()
	flaky := agent.New("Flaky")
	flaky.WebhookFunc("fail", func(context.Context, *agent.WebhookRequest) agent.Response {
		return agent.Retry(errors.New("down"))
	})
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{echo.New(), flaky}, Partitions: 8})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stop, err := s.AddHost(ctx, "second-host")
	require.NoError(t, err)
	t.Cleanup(func() { _ = stop() })

	// With two hosts, each instance is answered by the host the inspector names, which lists
	// the instance's partition in its heartbeat. The division settles within moments of the
	// second host's start.
	hosts := map[string]bool{}
	for i := range 12 {
		wf := echoWorkflow("default", fmt.Sprintf("spread-%d", i))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			hostID, _ := echoHost(t, s, s.Key, wf)
			var got instanceShow
			adminOK(t, s, get, instancePath("default", wf), s.Key, nil, http.StatusOK, &got)
			assert.Equal(c, subject.InboxPartition("default", wf, 8), got.Partition)
			assert.Equal(c, hostID, got.Host, "instance %s", wf)
			e, err := s.Res.Hosts.Get(ctx, subject.HostKey(hostID))
			if assert.NoError(c, err) {
				var beat registry.Host
				assert.NoError(c, json.Unmarshal(e.Value(), &beat))
				assert.True(c, beat.Owns("Echo", got.Partition), "host %s holds partition %d", hostID, got.Partition)
			}
			hosts[hostID] = true
		}, 20*time.Second, 200*time.Millisecond)
	}
	assert.Len(t, hosts, 2, "both hosts answer some instance")

	// Run, state, timer and requests.
	wf := echoWorkflow("default", "shown")
	status, _, b := call(t, s.URL, wf, "count", q("apikey", s.Key, "participantId", "ada"), nil)
	require.Equal(t, http.StatusOK, status, "%s", b)
	status, _, b = call(t, s.URL, wf, "status", q("apikey", s.Key, "participantId", "bob", "code", "418"), nil)
	require.Equal(t, 418, status, "%s", b)
	status, _, b = send(t, s, "default", "wait=true", map[string]any{"agentName": "Echo", "activationName": "shown",
		"participantId": "ada", "type": "Data", "text": "tick", "data": map[string]any{"seconds": 60}}, "Authorization", "Bearer "+s.Key)
	require.Equal(t, http.StatusOK, status, "%s", b)

	var got instanceShow
	adminOK(t, s, get, instancePath("default", wf), s.Key, nil, http.StatusOK, &got)
	assert.Equal(t, wf, got.WorkflowID)
	assert.Equal(t, "Echo", got.AgentName)
	assert.Equal(t, "shown", got.Activation)
	assert.Equal(t, "running", got.Status)
	var state struct{ Count int }
	require.NoError(t, json.Unmarshal(got.State, &state))
	assert.Equal(t, 1, state.Count)
	assert.Empty(t, got.EarlierRuns)
	assert.Empty(t, got.DeadLetters)
	assert.NotNil(t, got.Queued)
	require.Len(t, got.Schedules, 1)
	assert.Equal(t, "tick", got.Schedules[0].Name)
	require.Len(t, got.RecentRequests, 3)
	newest := got.RecentRequests[0]
	assert.Equal(t, "Data", newest.Type)
	assert.Equal(t, "tick", newest.Method)
	assert.Equal(t, 200, newest.Status)
	teapot := got.RecentRequests[1]
	assert.Equal(t, "Webhook", teapot.Type)
	assert.Equal(t, "status", teapot.Method)
	assert.Equal(t, "bob", teapot.ParticipantID)
	assert.Equal(t, 418, teapot.Status)
	require.NotNil(t, teapot.DurationMs)
	assert.GreaterOrEqual(t, *teapot.DurationMs, int64(0))
	assert.Equal(t, "count", got.RecentRequests[2].Method)

	// The short form of a workflow id names the default activation.
	adminOK(t, s, get, instancePath("default", "Echo"), s.Key, nil, http.StatusNotFound, nil)
	echoHost(t, s, s.Key, echoWorkflow("default", "default"))
	adminOK(t, s, get, instancePath("default", "Echo"), s.Key, nil, http.StatusOK, &got)
	assert.Equal(t, echoWorkflow("default", "default"), got.WorkflowID)

	// A dead letter of the instance.
	flakyWF := "default:Flaky:Supervisor Workflow:default"
	status, _, b = call(t, s.URL, flakyWF, "fail", q("apikey", s.Key), nil)
	require.Equal(t, http.StatusInternalServerError, status, "%s", b)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got = instanceShow{}
		adminOK(t, s, get, instancePath("default", flakyWF), s.Key, nil, http.StatusOK, &got)
		if assert.Len(c, got.DeadLetters, 1) {
			assert.Equal(c, flakyWF, got.DeadLetters[0].WorkflowID)
		}
		if assert.Len(c, got.RecentRequests, 1) {
			assert.Equal(c, 500, got.RecentRequests[0].Status)
		}
	}, 5*time.Second, 100*time.Millisecond)

	// Another tenant's instance is not found, as a missing one is, under either path.
	_, missingH, missing := adminReq(t, s, get, instancePath("other", echoWorkflow("other", "nope")), s.OtherKey, nil)
	_, foreignH, foreign := adminReq(t, s, get, instancePath("other", wf), s.OtherKey, nil)
	pm := problemOf(t, http.StatusNotFound, missingH.Get("Content-Type"), missing, http.StatusNotFound)
	pf := problemOf(t, http.StatusNotFound, foreignH.Get("Content-Type"), foreign, http.StatusNotFound)
	assert.Equal(t, "urn:agentbus:problem:instance-not-found", pm["type"])
	assert.Equal(t, pm, pf, "a foreign instance answers as a missing one")
	for _, tc := range []adminRefusal{
		{name: "foreign missing", method: get, path: instancePath("other", wf), key: s.OtherKey, want: 404, slug: "instance-not-found"},
		{name: "foreign tenant path", method: get, path: instancePath("default", wf), key: s.OtherKey, want: 403, slug: "forbidden"},
		{name: "foreign complete", method: post, path: instancePath("other", wf) + "/complete", key: s.OtherKey, want: 404, slug: "instance-not-found"},
		{name: "bad workflow", method: get, path: instancePath("default", "a:b:c"), key: s.Key, want: 400, slug: "invalid-workflow"},
	} {
		t.Run(tc.name, func(t *testing.T) { checkAdminRefusal(t, s, tc) })
	}
}

// TestInstanceComplete: an operator completes a run while its host holds the instance in memory;
// the next call starts a new run, whose record keeps the completed one among its earlier runs.
// A completed run cannot be completed again, and a missing instance is not found.
func TestInstanceComplete(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	wf := echoWorkflow("default", "finish")
	_, first := echoHost(t, s, s.Key, wf)
	echoHost(t, s, s.Key, wf)

	var done struct{ WorkflowID, RunID, Status string }
	adminOK(t, s, post, instancePath("default", wf)+"/complete", s.Key, nil, http.StatusOK, &done)
	assert.Equal(t, first, done.RunID)
	assert.Equal(t, "completed", done.Status)
	checkAdminRefusal(t, s, adminRefusal{method: post, path: instancePath("default", wf) + "/complete", key: s.Key, want: 409, slug: "instance-not-running"})
	checkAdminRefusal(t, s, adminRefusal{method: post, path: instancePath("default", echoWorkflow("default", "none")) + "/complete", key: s.Key, want: 404, slug: "instance-not-found"})

	_, second := echoHost(t, s, s.Key, wf)
	assert.NotEqual(t, first, second, "the next call starts a new run")
	var got instanceShow
	adminOK(t, s, get, instancePath("default", wf), s.Key, nil, http.StatusOK, &got)
	assert.Equal(t, second, got.RunID)
	assert.Equal(t, "running", got.Status)
	require.Len(t, got.EarlierRuns, 1)
	assert.Equal(t, first, got.EarlierRuns[0].RunID)
	assert.False(t, got.EarlierRuns[0].CompletedAt.IsZero())

	var l instanceList
	adminOK(t, s, get, listPath("default", "Echo", nil), s.Key, nil, http.StatusOK, &l)
	assert.Equal(t, []string{"finish/running"}, activations(l), "the instance lists once, at its new run")
	assert.Equal(t, second, l.Instances[0].RunID)
}

// TestHostInMemoryDoesNotOverwriteACompletion: a run completed behind the back of the host that
// holds the instance in memory (no notice reaches it) stays completed: the host's next write of
// the record conflicts, it reloads, and the write after that starts from the completed record.
func TestHostInMemoryDoesNotOverwriteACompletion(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wf := echoWorkflow("default", "behind")
	status, _, b := call(t, s.URL, wf, "count", q("apikey", s.Key), nil)
	require.Equal(t, http.StatusOK, status, "%s", b)

	store := instance.NewStore(s.Res.Instances)
	rec, err := store.Get(ctx, "default", wf)
	require.NoError(t, err)
	now := time.Now().UTC()
	rec.Status, rec.CompletedAt = instance.Completed, &now
	_, err = store.Put(ctx, rec)
	require.NoError(t, err)

	// The host still holds the run in memory; its state write conflicts and reloads.
	status, _, b = call(t, s.URL, wf, "count", q("apikey", s.Key), nil)
	require.Equal(t, http.StatusOK, status, "%s", b)
	// Once the host has dropped the instance (its unwritten counts conflict too), the record
	// is still the completed run.
	time.Sleep(3 * time.Second)
	after, err := store.Get(ctx, "default", wf)
	require.NoError(t, err)
	assert.Equal(t, instance.Completed, after.Status, "the completion is not overwritten")
	assert.Equal(t, rec.RunID, after.RunID)
	_, next := echoHost(t, s, s.Key, wf)
	assert.NotEqual(t, rec.RunID, next, "the next call starts a new run")
}

// TestInstanceCompleteWhileHostsWrite: operators complete a run whose record writers keep
// changing at the same time (as hosts write state and counts): the write of a complete that
// loses to another reads the record again and completes the run as it is then, so the run ends
// completed, one operator is answered 200 and the others 409 instance-not-running, and no
// writer overwrites the completion.
func TestInstanceCompleteWhileHostsWrite(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	completeWhileWritersWrite(t, s.URL, s.Key, instance.NewStore(s.Res.Instances))
}

// TestInstanceCompleteWhileHostsWriteReplicated is TestInstanceCompleteWhileHostsWrite on a
// bucket with three replicas, where a write that lost is refused again while the one that won
// is being agreed on.
func TestInstanceCompleteWhileHostsWriteReplicated(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node NATS cluster")
	}
	t.Parallel()
	cl, res := natstest.ClusterBus(t, bus.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := bus.Connect(cl.URLs(), "ingress", stacktest.Logger(t))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	srv, err := ingress.New(ctx, ingress.Config{Conn: nc, Bus: bus.Config{Replicas: 3, Partitions: 1}, Logger: stacktest.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	ks := keys.NewStore(res.JS, res.Keys, res.Tenants)
	require.NoError(t, ks.EnsureTenant(ctx, "default"))
	key, _, err := ks.Create(ctx, keys.NewKey{Tenant: "default", Role: keys.RoleTenantAdmin, Name: "test"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return srv.KeyKnown(key) }, 5*time.Second, 5*time.Millisecond)
	completeWhileWritersWrite(t, hs.URL, key, instance.NewStore(res.Instances))
}

// completeWhileWritersWrite has writers count events on running instances of tenant default,
// one after the other, while operators complete each through the ingress at base, and checks
// the outcome.
func completeWhileWritersWrite(t *testing.T, base, key string, store *instance.Store) {
	const rounds, writers, operators = 10, 16, 4
	for round := range rounds {
		// Each round has its time: on a machine busy with other tests a round of a replicated
		// bucket under the race detector has taken several seconds.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		wf := echoWorkflow("default", fmt.Sprintf("busy-%d", round))
		now := time.Now().UTC()
		_, err := store.Put(ctx, instance.Record{Tenant: "default", WorkflowID: wf, RunID: "run-busy",
			Status: instance.Running, StartedAt: now, LastActiveAt: now})
		require.NoError(t, err)

		// Writers count events on the record until the run is completed (or the operators are
		// done).
		stop := natstest.CountEvents(t, ctx, store, "default", wf, writers)

		statuses := make([]int, operators)
		bodies := make([]string, operators)
		var ops sync.WaitGroup
		for i := range operators {
			ops.Go(func() {
				// An operator whose completion met conflicts for as long as the ingress's patience
				// lasts (503 bus-unavailable, "try again": sixteen writers on a busy machine can
				// outlast it) tries again, as a client would.
				for try := 0; try < 10 && (try == 0 || statuses[i] == http.StatusServiceUnavailable); try++ {
					req, err := http.NewRequestWithContext(ctx, post, base+instancePath("default", wf)+"/complete", nil)
					if !assert.NoError(t, err) {
						return
					}
					req.Header.Set("Authorization", "Bearer "+key)
					resp, err := http.DefaultClient.Do(req)
					if !assert.NoError(t, err, "round %d, operator %d", round, i) {
						return
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					statuses[i], bodies[i] = resp.StatusCode, string(b)
				}
			})
		}
		ops.Wait()
		writes := stop()
		completed := 0
		for i, status := range statuses {
			switch status {
			case http.StatusOK:
				completed++
			case http.StatusConflict:
				assert.Contains(t, bodies[i], "urn:agentbus:problem:instance-not-running", "round %d, operator %d", round, i)
			default:
				t.Errorf("round %d, operator %d: %d %s", round, i, status, bodies[i])
			}
		}
		assert.Equal(t, 1, completed, "round %d: operators answered 200", round)
		after, err := store.Get(ctx, "default", wf)
		require.NoError(t, err)
		assert.Equal(t, instance.Completed, after.Status, "round %d: the completion is not overwritten", round)
		assert.Equal(t, "run-busy", after.RunID, "round %d", round)
		t.Logf("round %d: %d writes of the writers", round, writes)
	}
}

// TestInstanceBackfill: records written before the run index existed are listed once a system
// admin has backfilled the index; a second backfill indexes nothing, and tenant admins may not.
func TestInstanceBackfill(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := instance.NewStore(s.Res.Instances)
	old := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, a := range []string{"old-a", "old-b"} {
		_, err := store.Put(ctx, instance.Record{Tenant: "default", WorkflowID: echoWorkflow("default", a), RunID: "run-" + a,
			Status: instance.Running, StartedAt: old, LastActiveAt: old})
		require.NoError(t, err)
	}
	echoHost(t, s, s.Key, echoWorkflow("default", "new"))
	var l instanceList
	adminOK(t, s, get, listPath("default", "Echo", nil), s.Key, nil, http.StatusOK, &l)
	assert.Equal(t, []string{"new/running"}, activations(l))

	checkAdminRefusal(t, s, adminRefusal{method: post, path: "/api/v1/admin/instances/backfill", key: s.Key, want: 403, slug: "forbidden"})
	var res instance.BackfillResult
	adminOK(t, s, post, "/api/v1/admin/instances/backfill", systemKey, nil, http.StatusOK, &res)
	assert.Equal(t, instance.BackfillResult{Scanned: 3, Indexed: 2}, res)
	adminOK(t, s, get, listPath("default", "Echo", nil), s.Key, nil, http.StatusOK, &l)
	got := activations(l)
	slices.Sort(got)
	assert.Equal(t, []string{"new/running", "old-a/running", "old-b/running"}, got)
	adminOK(t, s, post, "/api/v1/admin/instances/backfill", systemKey, nil, http.StatusOK, &res)
	assert.Equal(t, instance.BackfillResult{Scanned: 3}, res)
}

// TestInstanceListedAfterContinueAsNew: a run continued as new is indexed too, so the instance
// stays listed, once, at its new run, with the continued run among its earlier runs.
func TestInstanceListedAfterContinueAsNew(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{ContinueAsNewEvents: 2})
	wf := echoWorkflow("default", "long")
	_, first := echoHost(t, s, s.Key, wf)
	echoHost(t, s, s.Key, wf) // the second event continues the run as new
	_, next := echoHost(t, s, s.Key, wf)
	require.NotEqual(t, first, next)

	var l instanceList
	adminOK(t, s, get, listPath("default", "Echo", nil), s.Key, nil, http.StatusOK, &l)
	require.Len(t, l.Instances, 1)
	assert.Equal(t, next, l.Instances[0].RunID)
	var got instanceShow
	adminOK(t, s, get, instancePath("default", wf), s.Key, nil, http.StatusOK, &got)
	require.Len(t, got.EarlierRuns, 1)
	assert.Equal(t, first, got.EarlierRuns[0].RunID)
	assert.EqualValues(t, 2, got.EarlierRuns[0].Events)
}

// TestInstanceIdleAfterTheAgentsTimeout: an agent with an idle timeout of its own
// (agent.IdleAfter) has its instances shown idle after it, in the listing and the inspector,
// where the deployment has none; another agent's stay running.
func TestInstanceIdleAfterTheAgentsTimeout(t *testing.T) {
	t.Parallel()
	sleepy := agent.New("Sleepy", agent.IdleAfter(300*time.Millisecond))
	sleepy.WebhookFunc("ping", func(context.Context, *agent.WebhookRequest) agent.Response {
		return agent.Response{StatusCode: http.StatusOK, Content: []byte(`{"pong":true}`)}
	})
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{echo.New(), sleepy}})
	sleepyWF := "default:Sleepy:Supervisor Workflow:nap"
	status, _, b := call(t, s.URL, sleepyWF, "ping", q("apikey", s.Key), nil)
	require.Equal(t, http.StatusOK, status, "%s", b)
	echoHost(t, s, s.Key, echoWorkflow("default", "awake"))

	var l instanceList
	require.Eventually(t, func() bool {
		adminOK(t, s, get, listPath("default", "Sleepy", nil), s.Key, nil, http.StatusOK, &l)
		return slices.Equal([]string{"nap/idle"}, activations(l))
	}, 5*time.Second, 50*time.Millisecond, "listed idle: %v", activations(l))
	var show instanceShow
	adminOK(t, s, get, instancePath("default", sleepyWF), s.Key, nil, http.StatusOK, &show)
	assert.Equal(t, "idle", show.Status)
	adminOK(t, s, get, listPath("default", "Sleepy", q("status", "idle")), s.Key, nil, http.StatusOK, &l)
	assert.Equal(t, []string{"nap/idle"}, activations(l))

	adminOK(t, s, get, listPath("default", "Echo", nil), s.Key, nil, http.StatusOK, &l)
	assert.Equal(t, []string{"awake/running"}, activations(l), "Echo has no idle timeout")
}

// TestInspectorUsesTheInboxPartitionCount: the inspector places an instance, and lists an agent's
// partitions, by the partition count of the agent's inbox (here the agent's own,
// agent.Partitions), not by the ingress's setting.
func TestInspectorUsesTheInboxPartitionCount(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{Partitions: 16, NoAgents: true})
	four := agent.New("Four", agent.Partitions(4))
	four.WebhookFunc("host", func(_ context.Context, r *agent.WebhookRequest) agent.Response {
		return agent.JSON(http.StatusOK, map[string]string{"hostId": r.Instance().HostID(), "runId": r.Instance().RunID()})
	})
	stop, err := s.AddHost(t.Context(), "host-4", four)
	require.NoError(t, err)
	t.Cleanup(func() { _ = stop() })

	for i := range 8 {
		wf := fmt.Sprintf("default:Four:Supervisor Workflow:counted-%d", i)
		hostID, _ := echoHost(t, s, s.Key, wf)
		var got instanceShow
		adminOK(t, s, get, instancePath("default", wf), s.Key, nil, http.StatusOK, &got)
		assert.Equal(t, subject.InboxPartition("default", wf, 4), got.Partition, "instance %s", wf)
		assert.Equal(t, hostID, got.Host, "instance %s", wf)
		var queue inspect.InstanceQueue
		adminOK(t, s, get, instancePath("default", wf)+"/queue", s.Key, nil, http.StatusOK, &queue)
		assert.Equal(t, got.Partition, queue.Partition)
		assert.Equal(t, hostID, queue.Owner)
	}
	var view inspect.Hosts
	adminOK(t, s, get, "/api/v1/admin/tenants/default/hosts", s.Key, nil, http.StatusOK, &view)
	require.Len(t, view.Agents, 1)
	assert.Len(t, view.Agents[0].Partitions, 4, "the hosts view lists the inbox's partitions")
}
