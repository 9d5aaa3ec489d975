package ingress_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/instance"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
)

// TestDeletedTenantsDataIsErased: deleting a tenant erases what it stored (its conversations,
// instances, waiting requests, files and usage), a tenant made again with its id starts with
// nothing, and another tenant keeps all of its own.
func TestDeletedTenantsDataIsErased(t *testing.T) {
	t.Parallel()
	const hold = 2 * time.Second
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey, TenantIDHold: hold})
	ctx := context.Background()
	adminOK(t, s, http.MethodPost, "/api/v1/admin/tenants", systemKey, map[string]string{"id": "acme"}, http.StatusCreated, nil)
	acme := createKey(t, s, "acme", systemKey, "ops", "tenant-admin")
	waitKnown(t, s, acme.Key)

	for _, c := range []struct{ tenant, key string }{{"acme", acme.Key}, {"default", s.Key}} {
		status, _, b := call(t, s.URL, "Echo", "echo", q("apikey", c.key, "participantId", "ada"), []byte("hello"))
		require.Equal(t, http.StatusOK, status, "webhook of %s: %s", c.tenant, b)
		status, _, b = send(t, s, c.tenant, "", fileMsg(t, "files", 10_000), bearerHeader(c.key)...)
		require.Equal(t, http.StatusAccepted, status, "file of %s: %s", c.tenant, b)
	}
	status, ct, b := converse(t, s, q("workflow", echoWorkflow("acme", "asks"), "type", "Data", "text", "ask", "participantId", "ada", "apikey", acme.Key), `{"question":"Which colour?"}`)
	require.NotNil(t, waitAnswerOf(t, status, ct, b).Response.Data.Waiting, "a waiting answer")
	require.Eventually(t, func() bool {
		u := tenantUsage(t, s.URL, "acme", acme.Key)
		return u.Bytes.History > 0 && u.Bytes.Files > 0 && u.Bytes.Payloads > 0 && u.Instances >= 2
	}, 10*time.Second, 20*time.Millisecond, "acme's usage never showed what it stored")
	var old instanceShow
	adminOK(t, s, http.MethodGet, instancePath("acme", echoWorkflow("acme", "default")), acme.Key, nil, http.StatusOK, &old)
	before := tenantUsage(t, s.URL, "default", s.Key)
	defaultThread := threadMessageIDs(t, s.URL, "default", s.Key, "default", "ada")
	require.NotEmpty(t, defaultThread)
	for _, st := range tenantStores(s.Res, "acme") {
		require.NotZero(t, storedUnder(t, st.stream, st.filter), "acme stored nothing in %s", st.name)
	}

	adminOK(t, s, http.MethodDelete, "/api/v1/admin/tenants/acme", systemKey, nil, http.StatusNoContent, nil)
	for _, st := range tenantStores(s.Res, "acme") {
		assert.Zero(t, storedUnder(t, st.stream, st.filter), "the deleted tenant's %s are still there", st.name)
	}
	files, err := s.Res.Files.List(ctx)
	require.NoError(t, err)
	var left []string
	for _, f := range files {
		if strings.HasPrefix(f.Name, "acme/") {
			left = append(left, f.Name)
		}
	}
	assert.Empty(t, left, "the deleted tenant's files")
	// What a request of the tenant running at its deletion would write after it: erased when the
	// id is used again.
	_, err = s.Res.JS.Publish(ctx, subject.Thread("acme", echoWorkflow("acme", "late"), "ada"), []byte("late"))
	require.NoError(t, err)

	// The id is held a while: the inbox would take the new tenant's requests for the old one's.
	status, h, b := adminReq(t, s, http.MethodPost, "/api/v1/admin/tenants", systemKey, map[string]string{"id": "acme"})
	p := problemOf(t, status, h.Get("Content-Type"), b, http.StatusConflict)
	assert.Contains(t, p["detail"], "deleted less than 2s ago", "the refusal of a held id")
	retry, err := strconv.Atoi(h.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", h.Get("Retry-After"))
	assert.True(t, retry >= 1 && retry <= 3, "Retry-After %d", retry)
	require.Eventually(t, func() bool {
		status, _, _ := adminReq(t, s, http.MethodPost, "/api/v1/admin/tenants", systemKey, map[string]string{"id": "acme"})
		return status == http.StatusCreated
	}, 3*hold, 50*time.Millisecond, "the id is not free again after its hold")
	assert.Zero(t, storedUnder(t, s.Res.Messages, subject.TenantThreads("acme")), "a late record of the deleted tenant")
	again := createKey(t, s, "acme", systemKey, "ops", "tenant-admin")
	waitKnown(t, s, again.Key)
	assert.Empty(t, threadMessageIDs(t, s.URL, "acme", again.Key, "default", "ada"), "the new tenant reads the old one's conversation")
	status, h, b = adminReq(t, s, http.MethodGet, instancePath("acme", echoWorkflow("acme", "asks")), again.Key, nil)
	problemOf(t, status, h.Get("Content-Type"), b, http.StatusNotFound)
	u := tenantUsage(t, s.URL, "acme", again.Key)
	assert.Zero(t, u.Bytes.Total, "the new tenant's usage: %+v", u)
	assert.Zero(t, u.Instances, "the new tenant's instances")
	// The host still holds the old tenant's instance in memory: the new tenant's call starts
	// its own.
	status, _, b = call(t, s.URL, "Echo", "echo", q("apikey", again.Key, "participantId", "ada"), []byte("again"))
	require.Equal(t, http.StatusOK, status, "webhook of the new tenant: %s", b)
	// A webhook's answer goes to its caller before its thread's record is stored.
	assert.Eventually(t, func() bool { return len(threadMessageIDs(t, s.URL, "acme", again.Key, "default", "ada")) == 2 },
		10*time.Second, 10*time.Millisecond, "the new tenant's conversation")
	var fresh instanceShow
	adminOK(t, s, http.MethodGet, instancePath("acme", echoWorkflow("acme", "default")), again.Key, nil, http.StatusOK, &fresh)
	assert.NotEqual(t, old.RunID, fresh.RunID, "the new tenant's instance goes on with the old one's run")
	rec, err := instance.NewStore(s.Res.Instances).Get(ctx, "acme", echoWorkflow("acme", "default"))
	require.NoError(t, err, "the new tenant's instance record")
	assert.Equal(t, fresh.RunID, rec.RunID)

	assert.Equal(t, defaultThread, threadMessageIDs(t, s.URL, "default", s.Key, "default", "ada"), "another tenant's conversation")
	after := tenantUsage(t, s.URL, "default", s.Key)
	assert.Equal(t, before.Bytes.Files, after.Bytes.Files, "another tenant's files")
	assert.Equal(t, before.Instances, after.Instances, "another tenant's instances")
	for _, st := range tenantStores(s.Res, "default") {
		if st.name != "waiting requests" { // the default tenant has none
			assert.NotZero(t, storedUnder(t, st.stream, st.filter), "another tenant's %s went", st.name)
		}
	}
}

// tenantStore is where a tenant's records of one kind are.
type tenantStore struct {
	name   string
	stream jetstream.Stream
	filter string
}

// tenantStores are the stores a webhook call, a file and a waiting request leave records of
// tenant in.
func tenantStores(res *bus.Resources, tenant string) []tenantStore {
	kv := func(b jetstream.KeyValue) jetstream.Stream {
		s, err := res.JS.Stream(context.Background(), subject.KVStream(b.Bucket()))
		if err != nil {
			panic(err)
		}
		return s
	}
	return []tenantStore{
		{"conversations", res.Messages, subject.TenantThreads(tenant)},
		{"instances", kv(res.Instances), subject.TenantKeys(subject.InstancesBucket, tenant)},
		{"runs", res.Runs, subject.TenantRuns(tenant)},
		{"waiting requests", res.Waits, subject.TenantWaits(tenant)},
		{"usage counters", res.Usage, subject.TenantUsageDays(tenant)},
		{"usage totals", res.UsageTotals, subject.TenantUsageTotals(tenant)},
	}
}

// storedUnder counts the messages of s under filter.
func storedUnder(t *testing.T, s jetstream.Stream, filter string) uint64 {
	t.Helper()
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(filter))
	require.NoError(t, err)
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// TestDeletedTenantsBacklogDoesNotRun: the requests a deleted tenant left queued on a host do
// not run after the deletion (they would write its data anew and take handler slots from the
// other tenants); the one running at that moment finishes, and another tenant's run.
func TestDeletedTenantsBacklogDoesNotRun(t *testing.T) {
	t.Parallel()
	gate := newGateAgent("Gate")
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey, Agents: []*agent.Agent{echo.New(), gate.agent(1)}})
	adminOK(t, s, http.MethodPost, "/api/v1/admin/tenants", systemKey, map[string]string{"id": "acme"}, http.StatusCreated, nil)
	acme := createKey(t, s, "acme", systemKey, "ops", "tenant-admin")
	waitKnown(t, s, acme.Key)

	const queued = 5
	for i := range queued {
		status, _, b := sendGate(t, s.URL, acme.Key, "acme", "Gate", fmt.Sprintf("a%d", i))
		require.Equal(t, http.StatusAccepted, status, "%s", b)
	}
	require.Eventually(t, func() bool { return gate.runningOf("acme") == 1 }, 10*time.Second, 5*time.Millisecond, "acme's first request never started")
	status, _, b := sendGate(t, s.URL, s.Key, "default", "Gate", "d")
	require.Equal(t, http.StatusAccepted, status, "%s", b)

	adminOK(t, s, http.MethodDelete, "/api/v1/admin/tenants/acme", systemKey, nil, http.StatusNoContent, nil)
	close(gate.step)
	require.Eventually(t, func() bool { return gate.runningOf("default") == 0 && len(gate.started()) >= 2 }, 10*time.Second, 5*time.Millisecond,
		"the other tenant's request did not run")
	time.Sleep(500 * time.Millisecond) // what would run of acme's backlog, had it been kept
	assert.Equal(t, []string{"acme", "default"}, gate.started(), "the requests that ran, by tenant")
}
