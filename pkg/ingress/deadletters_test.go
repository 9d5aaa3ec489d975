package ingress_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/deadletter"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// failing is an agent whose webhook handlers fail on purpose: "mendable" returns a retryable
// error until mended, "boom" always panics.
type failing struct {
	name   string
	mended atomic.Bool
	// runs counts the calls of "mendable" that succeeded.
	runs atomic.Int32
}

func (f *failing) agent() *agent.Agent {
	a := agent.New(f.name)
	a.WebhookFunc("mendable", func(context.Context, *agent.WebhookRequest) agent.Response {
		if !f.mended.Load() {
			return agent.Retry(errors.New("not mended yet"))
		}
		f.runs.Add(1)
		return agent.Text(http.StatusOK, "mended")
	})
	a.WebhookFunc("boom", func(context.Context, *agent.WebhookRequest) agent.Response { panic("boom on purpose") })
	return a
}

// startDeadLetterStack runs a stack with two failing agents, Flaky and Broken, beside Echo;
// a request is tried twice before it is dead-lettered.
func startDeadLetterStack(t *testing.T) (s *stacktest.Stack, flaky, broken *failing) {
	t.Helper()
	flaky, broken = &failing{name: "Flaky"}, &failing{name: "Broken"}
	s = stacktest.Start(t, stacktest.Options{
		AdminKey: systemKey,
		Agents:   []*agent.Agent{flaky.agent(), broken.agent(), echo.New()},
		Host:     agent.HostConfig{MaxDeliveries: 2},
		// TestDeadLetterTenantDeletionPurges uses a deleted tenant's id again at once.
		TenantIDHold: -1,
	})
	for _, name := range []string{"Flaky", "Broken"} {
		require.NoError(t, s.WaitLive(context.Background(), name))
	}
	return s, flaky, broken
}

var deadLetterIDInDetail = regexp.MustCompile(`dead letter (\d+)`)

// killLetter calls a webhook whose handler fails on every attempt and returns the id of the
// dead letter that the caller's problem names.
func killLetter(t *testing.T, s *stacktest.Stack, key, workflow, method string) uint64 {
	t.Helper()
	status, ct, b := call(t, s.URL, workflow, method, q("apikey", key), []byte(`{"order":42}`))
	p := problemOf(t, status, ct, b, http.StatusInternalServerError)
	require.Equal(t, "urn:agentbus:problem:dead-lettered", p["type"], "%s", b)
	m := deadLetterIDInDetail.FindStringSubmatch(p["detail"].(string))
	require.NotNil(t, m, "the detail does not name the dead letter: %s", b)
	id, err := strconv.ParseUint(m[1], 10, 64)
	require.NoError(t, err)
	return id
}

func deadLettersOf(tenant string) string { return "/api/v1/admin/tenants/" + tenant + "/deadletters" }

func deadLetterOf(tenant string, id uint64) string {
	return deadLettersOf(tenant) + "/" + strconv.FormatUint(id, 10)
}

type deadLetterList struct {
	DeadLetters []deadletter.Letter `json:"deadLetters"`
	Next        uint64              `json:"next"`
}

// listDeadLetters lists with the query (which starts with "?" when not empty) and returns the
// page and its raw JSON.
func listDeadLetters(t *testing.T, s *stacktest.Stack, tenant, query, key string) (deadLetterList, string) {
	t.Helper()
	status, h, b := adminReq(t, s, http.MethodGet, deadLettersOf(tenant)+query, key, nil)
	require.Equal(t, http.StatusOK, status, "%s", b)
	assert.Equal(t, "application/json", h.Get("Content-Type"))
	var page deadLetterList
	require.NoError(t, json.Unmarshal(b, &page), "%s", b)
	return page, string(b)
}

func letterIDs(ls []deadletter.Letter) []uint64 {
	ids := make([]uint64, 0, len(ls))
	for _, l := range ls {
		ids = append(ids, l.ID)
	}
	return ids
}

func TestDeadLetterListAndGet(t *testing.T) {
	t.Parallel()
	s, _, _ := startDeadLetterStack(t)
	flakyA := killLetter(t, s, s.Key, "default:Flaky:Supervisor Workflow:a", "mendable")
	broken := killLetter(t, s, s.Key, "Broken", "boom")
	flakyB := killLetter(t, s, s.Key, "default:Flaky:Supervisor Workflow:b", "mendable")

	// The caller's tenant admin and a system admin see the same list, oldest first, without next.
	for _, key := range []string{s.Key, systemKey} {
		page, raw := listDeadLetters(t, s, "default", "", key)
		assert.Equal(t, []uint64{flakyA, broken, flakyB}, letterIDs(page.DeadLetters))
		assert.NotContains(t, raw, `"next"`)
	}

	// Pages of one, each continuing after the previous one's next.
	var got []uint64
	after := uint64(0)
	for range 3 {
		page, _ := listDeadLetters(t, s, "default", "?limit=1&after="+strconv.FormatUint(after, 10), s.Key)
		require.Len(t, page.DeadLetters, 1)
		got = append(got, page.DeadLetters[0].ID)
		after = page.Next
	}
	assert.Equal(t, []uint64{flakyA, broken, flakyB}, got)
	assert.Zero(t, after, "the last page has a next")

	for _, tc := range []struct {
		name  string
		query string
		want  []uint64
	}{
		{name: "one agent", query: "?agent=Flaky", want: []uint64{flakyA, flakyB}},
		{name: "the other agent", query: "?agent=Broken", want: []uint64{broken}},
		{name: "an agent without dead letters", query: "?agent=Echo", want: []uint64{}},
		{name: "an agent after an id", query: "?agent=Flaky&after=" + strconv.FormatUint(flakyA, 10), want: []uint64{flakyB}},
		{name: "after the newest", query: "?after=" + strconv.FormatUint(flakyB, 10), want: []uint64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			page, raw := listDeadLetters(t, s, "default", tc.query, s.Key)
			assert.Equal(t, tc.want, letterIDs(page.DeadLetters))
			assert.Contains(t, raw, `"deadLetters":[`, "an empty list must be [], not null")
		})
	}

	var l deadletter.Letter
	adminOK(t, s, http.MethodGet, deadLetterOf("default", broken), s.Key, nil, http.StatusOK, &l)
	assert.Equal(t, broken, l.ID)
	assert.Equal(t, "default", l.TenantID)
	assert.Equal(t, "Broken", l.AgentName)
	assert.Equal(t, "default:Broken:Supervisor Workflow:default", l.WorkflowID)
	assert.Equal(t, "webhook", l.ParticipantID)
	assert.NotEmpty(t, l.RequestID)
	assert.Equal(t, "Webhook", l.Type)
	assert.Equal(t, "boom", l.Method)
	assert.Equal(t, 2, l.Attempts)
	assert.Contains(t, l.Error, "boom on purpose", "a panic's value is the dead letter's error")
	assert.Equal(t, len(`{"order":42}`), l.BodySize)
	assert.False(t, l.ReceivedAt.IsZero())
	assert.False(t, l.DeadAt.Before(l.ReceivedAt.Time))

	adminOK(t, s, http.MethodGet, deadLetterOf("default", flakyA), systemKey, nil, http.StatusOK, &l)
	assert.Equal(t, "mendable", l.Method)
	assert.Contains(t, l.Error, "not mended yet")
}

func TestDeadLetterReplayAndDiscard(t *testing.T) {
	t.Parallel()
	s, flaky, _ := startDeadLetterStack(t)
	const (
		replayWF  = "default:Flaky:Supervisor Workflow:replay"
		discardWF = "default:Flaky:Supervisor Workflow:discard"
	)
	toReplay := killLetter(t, s, s.Key, replayWF, "mendable")
	toDiscard := killLetter(t, s, s.Key, discardWF, "mendable")
	var letter deadletter.Letter
	adminOK(t, s, http.MethodGet, deadLetterOf("default", toReplay), s.Key, nil, http.StatusOK, &letter)

	// The dead request was a waiting call: its envelope names the reply subject of a caller
	// that has long had its answer. The replay must not answer it.
	stored, err := s.Res.DeadLetters.GetMsg(context.Background(), toReplay)
	require.NoError(t, err)
	deadReq := new(agentbusv1.Request)
	require.NoError(t, proto.Unmarshal(stored.Data, deadReq))
	require.NotEmpty(t, deadReq.GetReplyTo(), "the dead letter's envelope names no reply subject")
	published := subscribeInbox(t, s)

	flaky.mended.Store(true)
	var replayed struct {
		Replayed   uint64 `json:"replayed"`
		RequestID  string `json:"requestId"`
		WorkflowID string `json:"workflowId"`
	}
	adminOK(t, s, http.MethodPost, deadLetterOf("default", toReplay)+"/replay", s.Key, nil, http.StatusAccepted, &replayed)
	assert.Equal(t, toReplay, replayed.Replayed)
	assert.Equal(t, letter.RequestID, replayed.RequestID, "a replay keeps the requestId")
	assert.Equal(t, replayWF, replayed.WorkflowID)
	require.Eventually(t, func() bool { return flaky.runs.Load() == 1 }, 10*time.Second, 10*time.Millisecond, "the replayed request did not run")
	m, again := nextPublished(t, published)
	assert.Equal(t, deadReq.GetRequestId(), again.GetRequestId())
	assert.Empty(t, again.GetReplyTo(), "the replay names the dead call's reply subject")
	assert.Empty(t, m.Header.Get(subject.HeaderReplyTo), "the replay names a reply subject")

	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		status, h, b := adminReq(t, s, method, deadLetterOf("default", toReplay), s.Key, nil)
		p := problemOf(t, status, h.Get("Content-Type"), b, http.StatusNotFound)
		assert.Equal(t, "urn:agentbus:problem:dead-letter-not-found", p["type"])
	}
	status, h, b := adminReq(t, s, http.MethodPost, deadLetterOf("default", toReplay)+"/replay", s.Key, nil)
	problemOf(t, status, h.Get("Content-Type"), b, http.StatusNotFound)

	adminOK(t, s, http.MethodDelete, deadLetterOf("default", toDiscard), systemKey, nil, http.StatusNoContent, nil)
	status, h, b = adminReq(t, s, http.MethodDelete, deadLetterOf("default", toDiscard), systemKey, nil)
	p := problemOf(t, status, h.Get("Content-Type"), b, http.StatusNotFound)
	assert.Equal(t, "urn:agentbus:problem:dead-letter-not-found", p["type"])
	status, h, b = adminReq(t, s, http.MethodPost, deadLetterOf("default", toDiscard)+"/replay", s.Key, nil)
	problemOf(t, status, h.Get("Content-Type"), b, http.StatusNotFound)

	page, _ := listDeadLetters(t, s, "default", "", s.Key)
	assert.Empty(t, page.DeadLetters)
	// The discarded conversation goes on with the next call alone: its dead request never ran.
	status, _, b = call(t, s.URL, discardWF, "mendable", q("apikey", s.Key), nil)
	require.Equal(t, http.StatusOK, status, "%s", b)
	assert.Equal(t, int32(2), flaky.runs.Load(), "the discarded request ran")
}

func TestDeadLetterRefusals(t *testing.T) {
	t.Parallel()
	s, _, _ := startDeadLetterStack(t)
	var k letterRefusalKeys
	k.mine = killLetter(t, s, s.Key, "Flaky", "mendable")
	k.theirs = killLetter(t, s, s.OtherKey, "Flaky", "mendable")
	k.user, _ = storeKey(t, s, "default", keys.RoleUser, "user")
	k.revoked, _ = revokedKey(t, s, "default", keys.RoleTenantAdmin, "revoked")
	for _, cases := range [][]adminRefusal{deadLetterCallerRefusals(s, k), deadLetterInputRefusals(s, k)} {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				_, b := checkAdminRefusal(t, s, tc)
				assert.NotContains(t, string(b), "not mended yet", "a refusal shows a dead letter")
			})
		}
	}

	// Nothing above replayed or discarded anything.
	page, _ := listDeadLetters(t, s, "default", "", s.Key)
	assert.Equal(t, []uint64{k.mine}, letterIDs(page.DeadLetters))
	page, _ = listDeadLetters(t, s, "other", "", s.OtherKey)
	assert.Equal(t, []uint64{k.theirs}, letterIDs(page.DeadLetters))
}

// letterRefusalKeys are what TestDeadLetterRefusals names: the dead letters of tenants "default"
// (mine) and "other" (theirs), a user key and a revoked tenant-admin key of "default".
type letterRefusalKeys struct {
	mine, theirs  uint64
	user, revoked string
}

// deadLetterCallerRefusals are requests of callers the dead-letter endpoints refuse: no key, a
// user key, a key of another tenant, a system key under the wrong tenant.
func deadLetterCallerRefusals(s *stacktest.Stack, k letterRefusalKeys) []adminRefusal {
	own, other := deadLettersOf("default"), deadLettersOf("other")
	mineAt, theirsAt := deadLetterOf("default", k.mine), deadLetterOf("other", k.theirs)
	mine, theirs, user, revoked := k.mine, k.theirs, k.user, k.revoked
	return []adminRefusal{
		// Who may call.
		{name: "no key", method: get, path: own, want: 401, slug: "unauthorized"},
		{name: "key in the query is not taken", method: get, path: own + "?apikey=" + s.Key, want: 401, slug: "unauthorized"},
		{name: "revoked key lists", method: get, path: own, key: revoked, want: 401, slug: "unauthorized"},
		{name: "revoked key replays", method: post, path: mineAt + "/replay", key: revoked, want: 401, slug: "unauthorized"},
		{name: "user key lists", method: get, path: own, key: user, want: 403, slug: "forbidden"},
		{name: "user key reads", method: get, path: mineAt, key: user, want: 403, slug: "forbidden"},
		{name: "user key replays", method: post, path: mineAt + "/replay", key: user, want: 403, slug: "forbidden"},
		{name: "user key discards", method: del, path: mineAt, key: user, want: 403, slug: "forbidden"},

		// Other tenants.
		{name: "tenant admin lists another tenant's", method: get, path: other, key: s.Key, want: 403, slug: "forbidden"},
		{name: "tenant admin reads another tenant's", method: get, path: theirsAt, key: s.Key, want: 403, slug: "forbidden"},
		{name: "tenant admin replays another tenant's", method: post, path: theirsAt + "/replay", key: s.Key, want: 403, slug: "forbidden"},
		{name: "tenant admin discards another tenant's", method: del, path: theirsAt, key: s.Key, want: 403, slug: "forbidden"},
		{name: "tenant admin names its tenant in the header", method: get, path: other, key: s.Key, hdr: []string{"X-Tenant-Id", "default"}, want: 400, slug: "tenant-mismatch"},
		{name: "tenant admin on an unknown tenant", method: get, path: deadLettersOf("nobody"), key: s.Key, want: 403, slug: "forbidden"},
		{name: "another tenant's id under one's own tenant", method: get, path: deadLetterOf("default", theirs), key: s.Key, want: 404, slug: "dead-letter-not-found"},
		{name: "another tenant's id replayed under one's own tenant", method: post, path: deadLetterOf("default", theirs) + "/replay", key: s.Key, want: 404, slug: "dead-letter-not-found"},
		{name: "another tenant's id discarded under one's own tenant", method: del, path: deadLetterOf("default", theirs), key: s.Key, want: 404, slug: "dead-letter-not-found"},
		{name: "system admin asks under the wrong tenant", method: get, path: deadLetterOf("other", mine), key: systemKey, want: 404, slug: "dead-letter-not-found"},
		{name: "system admin replays under the wrong tenant", method: post, path: deadLetterOf("other", mine) + "/replay", key: systemKey, want: 404, slug: "dead-letter-not-found"},
		{name: "system admin discards under the wrong tenant", method: del, path: deadLetterOf("other", mine), key: systemKey, want: 404, slug: "dead-letter-not-found"},
		{name: "system admin on an unknown tenant", method: get, path: deadLettersOf("nobody"), key: systemKey, want: 404, slug: "unknown-tenant"},
		{name: "system admin on an invalid tenant", method: get, path: deadLettersOf("no.dots"), key: systemKey, want: 400, slug: "invalid-tenant"},
	}
}

// deadLetterInputRefusals are requests the dead-letter endpoints refuse for their id, query or
// method.
func deadLetterInputRefusals(s *stacktest.Stack, k letterRefusalKeys) []adminRefusal {
	own := deadLettersOf("default")
	mineAt := deadLetterOf("default", k.mine)
	return []adminRefusal{
		// Ids and parameters.
		{name: "unknown id", method: get, path: deadLetterOf("default", 1<<40), key: s.Key, want: 404, slug: "dead-letter-not-found"},
		{name: "id 0", method: get, path: own + "/0", key: s.Key, want: 400, slug: "invalid-dead-letter-id"},
		{name: "negative id", method: del, path: own + "/-1", key: s.Key, want: 400, slug: "invalid-dead-letter-id"},
		{name: "id not a number", method: post, path: own + "/abc/replay", key: s.Key, want: 400, slug: "invalid-dead-letter-id"},
		{name: "id with a sign", method: get, path: own + "/+1", key: s.Key, want: 400, slug: "invalid-dead-letter-id"},
		{name: "id too large", method: get, path: own + "/18446744073709551616", key: s.Key, want: 400, slug: "invalid-dead-letter-id"},
		{name: "limit 0", method: get, path: own + "?limit=0", key: s.Key, want: 400, slug: "invalid-query"},
		{name: "limit over 200", method: get, path: own + "?limit=201", key: s.Key, want: 400, slug: "invalid-query"},
		{name: "limit not a number", method: get, path: own + "?limit=ten", key: s.Key, want: 400, slug: "invalid-query"},
		{name: "after negative", method: get, path: own + "?after=-1", key: s.Key, want: 400, slug: "invalid-query"},
		{name: "after not a number", method: get, path: own + "?after=x", key: s.Key, want: 400, slug: "invalid-query"},
		{name: "after too large", method: get, path: own + "?after=18446744073709551615", key: s.Key, want: 400, slug: "invalid-query"},
		{name: "agent with a colon", method: get, path: own + "?agent=a:b", key: s.Key, want: 400, slug: "invalid-query"},
		{name: "agent with a control character", method: get, path: own + "?agent=a%00b", key: s.Key, want: 400, slug: "invalid-query"},
		{name: "query not URL encoding", method: get, path: own + "?limit=%zz", key: s.Key, want: 400, slug: "invalid-query"},

		// Methods.
		{name: "list takes GET", method: post, path: own, key: s.Key, want: 405, slug: "method-not-allowed", allow: "GET"},
		{name: "a dead letter takes GET and DELETE", method: http.MethodPut, path: mineAt, key: s.Key, want: 405, slug: "method-not-allowed", allow: "DELETE, GET"},
		{name: "replay takes POST", method: get, path: mineAt + "/replay", key: s.Key, want: 405, slug: "method-not-allowed", allow: "POST"},
	}
}

// Deleting a tenant removes its dead letters, and only its: a tenant of the same id created
// later starts without any.
func TestDeadLetterTenantDeletionPurges(t *testing.T) {
	t.Parallel()
	s, _, _ := startDeadLetterStack(t)
	adminOK(t, s, http.MethodPost, "/api/v1/admin/tenants", systemKey, map[string]string{"id": "acme"}, http.StatusCreated, nil)
	ops := createKey(t, s, "acme", systemKey, "ops", "tenant-admin")
	waitKnown(t, s, ops.Key)
	gone := []uint64{
		killLetter(t, s, ops.Key, "Flaky", "mendable"),
		killLetter(t, s, ops.Key, "Broken", "boom"),
	}
	kept := killLetter(t, s, s.Key, "Flaky", "mendable")
	page, _ := listDeadLetters(t, s, "acme", "", ops.Key)
	require.Equal(t, gone, letterIDs(page.DeadLetters))

	adminOK(t, s, http.MethodDelete, "/api/v1/admin/tenants/acme", systemKey, nil, http.StatusNoContent, nil)
	store := deadletter.NewStore(s.Res, bus.NewBlobs(s.Res.Claims, 1<<20))
	left, _, err := store.List(context.Background(), "acme", deadletter.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, left, "the deleted tenant's dead letters are still there")
	status, h, b := adminReq(t, s, http.MethodGet, deadLettersOf("acme"), systemKey, nil)
	problemOf(t, status, h.Get("Content-Type"), b, http.StatusNotFound)

	adminOK(t, s, http.MethodPost, "/api/v1/admin/tenants", systemKey, map[string]string{"id": "acme"}, http.StatusCreated, nil)
	page, _ = listDeadLetters(t, s, "acme", "", systemKey)
	assert.Empty(t, page.DeadLetters, "a new tenant of the same id sees the old one's dead letters")
	page, _ = listDeadLetters(t, s, "default", "", systemKey)
	assert.Equal(t, []uint64{kept}, letterIDs(page.DeadLetters), "another tenant's dead letters went too")
}

// A request too large for one message waits in the claims store; once that copy has expired its
// dead letter cannot be replayed, only discarded.
func TestDeadLetterExpiredRequest(t *testing.T) {
	t.Parallel()
	s, _, _ := startDeadLetterStack(t)
	ctx := context.Background()
	big := []byte(`{"blob":"` + strings.Repeat("x", 2<<20) + `"}`)
	status, ct, b := call(t, s.URL, "Flaky", "mendable", q("apikey", s.Key), big)
	p := problemOf(t, status, ct, b, http.StatusInternalServerError)
	require.Equal(t, "urn:agentbus:problem:dead-lettered", p["type"])
	id, err := strconv.ParseUint(deadLetterIDInDetail.FindStringSubmatch(p["detail"].(string))[1], 10, 64)
	require.NoError(t, err)

	// Expire every stored copy, as the claims store's MaxAge would.
	objects, err := s.Res.Claims.List(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, objects, "the large request was not claim-checked")
	for _, o := range objects {
		require.NoError(t, s.Res.Claims.Delete(ctx, o.Name))
	}

	var l deadletter.Letter
	adminOK(t, s, http.MethodGet, deadLetterOf("default", id), s.Key, nil, http.StatusOK, &l)
	assert.Equal(t, "Flaky", l.AgentName, "a claim-checked dead letter still shows its routing fields")
	status, h, b := adminReq(t, s, http.MethodPost, deadLetterOf("default", id)+"/replay", s.Key, nil)
	p = problemOf(t, status, h.Get("Content-Type"), b, http.StatusGone)
	assert.Equal(t, "urn:agentbus:problem:dead-letter-expired", p["type"])
	adminOK(t, s, http.MethodDelete, deadLetterOf("default", id), s.Key, nil, http.StatusNoContent, nil)
}
