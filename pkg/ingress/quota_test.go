package ingress_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/deadletter"
	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/stack"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/subscription"
	"github.com/agentbus/agentbus/pkg/usage"
)

// quotaTable is a usage.Quotas a test changes while the ingress runs, as a tenant-controls
// store would.
type quotaTable struct {
	mu sync.Mutex
	q  map[string]usage.Quota
}

func (qt *quotaTable) set(tenant string, q usage.Quota) {
	qt.mu.Lock()
	defer qt.mu.Unlock()
	qt.q[tenant] = q
}

func (qt *quotaTable) of(tenant string) usage.Quota {
	qt.mu.Lock()
	defer qt.mu.Unlock()
	return qt.q[tenant]
}

// tenantUsage reads a tenant's usage over the API with key.
func tenantUsage(t *testing.T, base, tenant, key string) usage.Report {
	t.Helper()
	status, h, b := do(t, http.MethodGet, base+"/api/v1/admin/tenants/"+tenant+"/usage", key, nil)
	require.Equal(t, http.StatusOK, status, "usage of %s: %s", tenant, b)
	require.Equal(t, "application/json", h.Get("Content-Type"))
	var r usage.Report
	require.NoError(t, json.Unmarshal(b, &r), "usage of %s: %s", tenant, b)
	return r
}

// fileMsg is a send body of a File message of size random bytes to Echo's activation.
func fileMsg(t *testing.T, activation string, size int) map[string]any {
	t.Helper()
	data := make([]byte, size)
	_, err := rand.Read(data)
	require.NoError(t, err)
	return msg("type", "File", "activationName", activation, "text", "blob.bin", "data", base64.StdEncoding.EncodeToString(data))
}

// slugOf is the slug of a problem answer's type.
func slugOf(p map[string]any) string {
	typ, _ := p["type"].(string)
	return strings.TrimPrefix(typ, "urn:agentbus:problem:")
}

// threadMessageIDs lists the ids of every message stored in Echo's thread of the activation and
// participant, paging through it.
func threadMessageIDs(t *testing.T, base, tenant, key, activation, participant string) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	query := q("agentName", "Echo", "activationName", activation, "participantId", participant, "pageSize", "100")
	for range 100 {
		status, _, b := doGet(t, base, "/api/v1/admin/tenants/"+tenant+"/messaging/history", query, bearerHeader(key)...)
		require.Equal(t, http.StatusOK, status, "history: %s", b)
		var page struct {
			Messages []struct {
				ID string `json:"id"`
			} `json:"messages"`
			Next string `json:"next"`
		}
		require.NoError(t, json.Unmarshal(b, &page))
		for _, m := range page.Messages {
			ids[m.ID] = true
		}
		if page.Next == "" {
			return ids
		}
		query.Set("before", page.Next)
	}
	t.Fatal("the thread has more than 100 pages")
	return nil
}

// TestStorageQuotaRefusesOnlyItsTenant: a tenant that sends files until its byte quota is
// reached is refused with 507 storage-quota-exceeded, by a margin the docs state, while another
// tenant's sends and webhooks go on; every message accepted before is handled and stored; a
// quota raised at runtime holds from the next request.
func TestStorageQuotaRefusesOnlyItsTenant(t *testing.T) {
	t.Parallel()
	const quota = 1 << 20
	quotas := &quotaTable{q: map[string]usage.Quota{"default": {Bytes: quota}}}
	s := startStack(t, stack.Config{Ingress: ingress.Config{Quotas: quotas.of}}, "default", "other")

	var accepted []string
	var refused map[string]any
	for i := 0; i < 40 && refused == nil; i++ {
		status, ct, b := send(t, s.Stack, "default", "", fileMsg(t, "files", 100_000), bearerHeader(s.Key)...)
		if status == http.StatusAccepted {
			var ids struct {
				MessageID string `json:"messageId"`
			}
			require.NoError(t, json.Unmarshal(b, &ids))
			accepted = append(accepted, ids.MessageID)
			continue
		}
		refused = problemOf(t, status, ct, b, http.StatusInsufficientStorage)
	}
	require.NotNil(t, refused, "40 files of 100 kB were accepted under a quota of 1 MiB")
	assert.Equal(t, "storage-quota-exceeded", slugOf(refused))
	assert.Contains(t, refused["detail"], fmt.Sprintf("its quota of %d", quota))
	assert.Len(t, accepted, 10, "files of about 100 kB each until the next would pass 1 MiB")

	// Another tenant is not affected.
	status, _, b := send(t, s.Stack, "other", "", chatMsg(), bearerHeader(s.OtherKey)...)
	assert.Equal(t, http.StatusAccepted, status, "the other tenant's send: %s", b)
	status, _, b = call(t, s.URL, "Echo", "echo", q("apikey", s.OtherKey), []byte(`{"n":1}`))
	assert.Equal(t, http.StatusOK, status, "the other tenant's webhook: %s", b)

	// Every accepted file message was handled: its message and Echo's reply are in the thread,
	// though the records were stored when the tenant was at its quota.
	require.Eventually(t, func() bool {
		ids := threadMessageIDs(t, s.URL, "default", s.Key, "files", "Alice")
		for _, id := range accepted {
			if !ids[id] {
				return false
			}
		}
		return len(ids) == 2*len(accepted)
	}, 20*time.Second, 100*time.Millisecond, "an accepted file message is missing from the thread")

	// The usage settles a little over the quota: the records of the messages accepted last,
	// stored by the host after the ingress had counted their files.
	var r usage.Report
	require.Eventually(t, func() bool {
		r = tenantUsage(t, s.URL, "default", s.Key)
		return r.Bytes.History > 0 && r.Bytes.Files > 0
	}, 10*time.Second, 50*time.Millisecond)
	time.Sleep(2 * usage.FlushInterval)
	r = tenantUsage(t, s.URL, "default", s.Key)
	t.Logf("usage after the burst: %+v; quota %d, over it by %d bytes (%.1f %%)", r.Bytes, quota, r.Bytes.Total-quota,
		100*float64(r.Bytes.Total-quota)/quota)
	assert.Equal(t, usage.ReportQuota{Bytes: quota}, r.Quota)
	assert.LessOrEqual(t, r.Bytes.Total, int64(quota*105/100), "the usage passed the quota by more than 5 %")

	quotas.set("default", usage.Quota{Bytes: 2 * quota})
	status, _, b = send(t, s.Stack, "default", "", fileMsg(t, "files", 100_000), bearerHeader(s.Key)...)
	assert.Equal(t, http.StatusAccepted, status, "a quota raised at runtime holds at once: %s", b)
	assert.Equal(t, int64(2*quota), tenantUsage(t, s.URL, "default", s.Key).Quota.Bytes)
}

// TestStorageQuotaBurst: a tenant that sends files as fast as it can, from 16 clients at once
// through two ingress instances, passes its quota by no more than the docs say: what is in
// flight at once, and what the other instance stored and has not published yet.
func TestStorageQuotaBurst(t *testing.T) {
	const quota, fileSize, clients = 4 << 20, 100_000, 16
	quotas := usage.Fixed(usage.Quota{Bytes: quota})
	s := startStack(t, stack.Config{Ingress: ingress.Config{Quotas: quotas}}, "default")
	second := startIngress(t, s.Stack, ingress.Config{Quotas: quotas})
	var (
		mu       sync.Mutex
		accepted int
		refused  int
		wg       sync.WaitGroup
	)
	start := time.Now()
	for i := range clients {
		base := s.URL
		if i%2 == 1 {
			base = second.URL
		}
		body := mustJSON(fileMsg(t, "burst", fileSize))
		wg.Go(func() {
			for {
				status, _, b := doCT(t, http.MethodPost, base+"/api/v1/admin/tenants/default/messaging/send", strings.NewReader(body),
					append(bearerHeader(s.Key), "Content-Type", "application/json")...)
				mu.Lock()
				switch status {
				case http.StatusAccepted:
					accepted++
				case http.StatusInsufficientStorage:
					refused++
				default:
					t.Errorf("status %d: %s", status, b)
				}
				done := refused >= 4*clients
				mu.Unlock()
				if done {
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	time.Sleep(3 * usage.FlushInterval)
	r := tenantUsage(t, s.URL, "default", s.Key)
	over := r.Bytes.Total - quota
	t.Logf("%d clients over 2 ingresses: %d files of %d bytes accepted in %v, then refused; usage %+v; over the quota of %d by %d bytes (%.1f %%, %.1f files)",
		clients, accepted, fileSize, took.Round(time.Millisecond), r.Bytes, quota, over, 100*float64(over)/quota, float64(over)/fileSize)
	// In flight at once: one file per client; stored by the other instance and not published
	// yet: less than usage.EarlyFlushBytes; the records of the messages accepted last.
	assert.LessOrEqual(t, over, int64(clients*fileSize+usage.EarlyFlushBytes+64<<10), "the docs' bound")
}

// TestUsageMatchesTheStore: the usage the API answers for a tenant that stored history (chats,
// Data calls, webhooks), files, large payloads (a webhook too large for one message, whose
// claims are deleted once handled) and instance records is, within 5 %, what its messages,
// objects and records take in the streams; another tenant's traffic is not in it.
func TestUsageMatchesTheStore(t *testing.T) {
	t.Parallel()
	s := startStack(t, stack.Config{}, "default", "other")
	auth := bearerHeader(s.Key)
	for i := range 5 {
		status, _, b := send(t, s.Stack, "default", "wait=true", chatMsg("text", strings.Repeat("hello ", 100*i+1)), auth...)
		require.Equal(t, http.StatusOK, status, "%s", b)
		status, _, b = call(t, s.URL, "Echo", "echo", q("apikey", s.Key), []byte(strings.Repeat("x", 10_000*i)))
		require.Equal(t, http.StatusOK, status, "%s", b)
		status, _, b = converse(t, s.Stack, q("workflow", "Echo", "type", "Data", "text", "sum"), `{"values":[1,2]}`, auth...)
		require.Equal(t, http.StatusOK, status, "%s", b)
		status, _, b = send(t, s.Stack, "default", "wait=true", fileMsg(t, "files", 50_000*(i+1)), auth...)
		require.Equal(t, http.StatusOK, status, "%s", b)
		status, _, b = send(t, s.Stack, "other", "wait=true", chatMsg(), bearerHeader(s.OtherKey)...)
		require.Equal(t, http.StatusOK, status, "%s", b)
	}
	big := make([]byte, 3<<20) // over the max payload: a request claim and a reply claim
	status, _, b := call(t, s.URL, "Echo", "echo", q("apikey", s.Key), big)
	require.Equal(t, http.StatusOK, status, "%.200s", b)

	var r usage.Report
	var want usage.ReportBytes
	close := func(have, want int64) bool { return math.Abs(float64(have-want)) <= 0.05*float64(want) }
	require.Eventually(t, func() bool {
		r = tenantUsage(t, s.URL, "default", s.Key)
		want = storedBytes(t, s.Res, "default")
		return close(r.Bytes.History, want.History) && close(r.Bytes.Files, want.Files) && close(r.Bytes.Payloads, want.Payloads) &&
			close(r.Bytes.State, want.State)
	}, 15*time.Second, 200*time.Millisecond, "usage %+v, the store holds %+v", r.Bytes, want)
	t.Logf("usage %+v, the store holds %+v", r.Bytes, want)
	assert.Positive(t, want.History)
	assert.Positive(t, want.Files)
	assert.Positive(t, want.State)
	assert.Equal(t, r.Bytes.History+r.Bytes.Files+r.Bytes.Payloads+r.Bytes.Kept+r.Bytes.State, r.Bytes.Total)
	assert.Equal(t, int64(2), r.Instances, "Echo's default activation and files")
	assert.Equal(t, usage.ReportQuota{}, r.Quota, "no quota configured")
}

// storedBytes reads what tenant's messages and objects take in the streams, each message as
// the stream counts it (bus.RecordBytes): its history records; the meta and chunk messages of
// its files and claims; its instance records.
func storedBytes(t *testing.T, res *bus.Resources, tenant string) usage.ReportBytes {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out usage.ReportBytes
	out.History = streamBytes(t, ctx, res.JS, subject.MessagesStream, subject.TenantThreads(tenant))
	out.Files = objectsBytes(t, ctx, res.JS, res.Files, subject.FilesStore, tenant)
	out.Payloads = objectsBytes(t, ctx, res.JS, res.Claims, subject.ClaimsStore, tenant)
	out.State = streamBytes(t, ctx, res.JS, subject.KVStream(subject.InstancesBucket), subject.KVKeyPrefix(subject.InstancesBucket)+tenant+".>")
	out.Total = out.History + out.Files + out.Payloads + out.State
	return out
}

// streamBytes adds up the bytes of a stream's messages on filter.
func streamBytes(t *testing.T, ctx context.Context, js jetstream.JetStream, stream, filter string) int64 {
	t.Helper()
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	require.NoError(t, err)
	pending := cons.CachedInfo().NumPending
	var n int64
	for pending > 0 {
		batch, err := cons.Fetch(int(min(pending, 100)), jetstream.FetchMaxWait(2*time.Second))
		require.NoError(t, err)
		got := 0
		for m := range batch.Messages() {
			n += bus.RecordBytes(m.Subject(), bus.HeaderBytes(m.Headers()), len(m.Data()))
			got++
		}
		require.NoError(t, batch.Error())
		require.Positive(t, got, "no message fetched of %d pending on %s", pending, filter)
		pending -= uint64(got)
	}
	return n
}

// objectsBytes adds up the bytes of the messages of tenant's objects in store: each one's meta
// message and chunks.
func objectsBytes(t *testing.T, ctx context.Context, js jetstream.JetStream, store jetstream.ObjectStore, bucket, tenant string) int64 {
	t.Helper()
	infos, err := store.List(ctx)
	if err == jetstream.ErrNoObjectsFound {
		return 0
	}
	require.NoError(t, err)
	stream := "OBJ_" + bucket
	var n int64
	for _, info := range infos {
		if !strings.HasPrefix(info.Name, tenant+"/") {
			continue
		}
		// Read by a consumer: a direct get's answer has headers of its own.
		n += streamBytes(t, ctx, js, stream, "$O."+bucket+".M."+base64.URLEncoding.EncodeToString([]byte(info.Name)))
		if info.Chunks > 0 {
			n += streamBytes(t, ctx, js, stream, "$O."+bucket+".C."+info.NUID)
		}
	}
	return n
}

// TestInstanceQuota: a tenant at its instance quota cannot start another instance (507
// instance-quota-exceeded) but its existing instances take messages; another tenant starts
// instances.
func TestInstanceQuota(t *testing.T) {
	t.Parallel()
	s := startStack(t, stack.Config{Ingress: ingress.Config{Quotas: usage.Fixed(usage.Quota{Instances: 3})}}, "default", "other")
	auth := bearerHeader(s.Key)
	for _, a := range []string{"i1", "i2", "i3"} {
		status, _, b := send(t, s.Stack, "default", "wait=true", chatMsg("activationName", a), auth...)
		require.Equal(t, http.StatusOK, status, "%s: %s", a, b)
	}
	require.Eventually(t, func() bool { return tenantUsage(t, s.URL, "default", s.Key).Instances == 3 },
		5*time.Second, 20*time.Millisecond, "three instances counted")

	status, ct, b := send(t, s.Stack, "default", "wait=true", chatMsg("activationName", "i4"), auth...)
	p := problemOf(t, status, ct, b, http.StatusInsufficientStorage)
	assert.Equal(t, "instance-quota-exceeded", slugOf(p))
	status, ct, b = call(t, s.URL, "Echo:Supervisor Workflow", "echo", q("apikey", s.Key), nil)
	p = problemOf(t, status, ct, b, http.StatusInsufficientStorage)
	assert.Equal(t, "instance-quota-exceeded", slugOf(p), "a webhook to a new instance")

	status, _, b = send(t, s.Stack, "default", "wait=true", chatMsg("activationName", "i1"), auth...)
	assert.Equal(t, http.StatusOK, status, "an existing instance: %s", b)
	status, _, b = send(t, s.Stack, "other", "wait=true", chatMsg("activationName", "i4"), bearerHeader(s.OtherKey)...)
	assert.Equal(t, http.StatusOK, status, "another tenant: %s", b)
	assert.Equal(t, int64(3), tenantUsage(t, s.URL, "default", s.Key).Instances)
}

// TestStoreGuard: once the JetStream account's storage is as full as the guard's first
// threshold, requests that store more than 64 KiB are refused with 507 store-nearly-full and
// small ones go on; from the second, every request that stores is refused, and reads and the
// admin API go on; with space freed, requests are taken again. The metrics show the store's
// level and the refusals.
func TestStoreGuard(t *testing.T) {
	t.Parallel()
	const maxStore = 48 << 20
	s := startStack(t, stack.Config{MaxStore: maxStore, Ingress: ingress.Config{
		StoreGuard: ingress.StoreGuard{LargePercent: 40, AllPercent: 80},
	}}, "default")
	auth := bearerHeader(s.Key)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fill, err := s.Res.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "FILL", Subjects: []string{"fill.>"}})
	require.NoError(t, err)
	fillTo := func(percent int64) {
		t.Helper()
		for {
			ai, err := s.Res.JS.AccountInfo(ctx)
			require.NoError(t, err)
			if int64(ai.Store) >= maxStore*percent/100 {
				return
			}
			_, err = s.Res.JS.Publish(ctx, "fill.x", make([]byte, 512<<10))
			require.NoError(t, err)
		}
	}
	sendStatus := func(body any) (int, map[string]any) {
		status, ct, b := send(t, s.Stack, "default", "", body, auth...)
		if status == http.StatusInsufficientStorage {
			return status, problemOf(t, status, ct, b, status)
		}
		return status, nil
	}

	fillTo(45)
	var p map[string]any
	require.Eventually(t, func() bool {
		var status int
		status, p = sendStatus(fileMsg(t, "big", 100_000))
		return status == http.StatusInsufficientStorage
	}, 10*time.Second, 100*time.Millisecond, "a file of 100 kB refused over 40 %")
	assert.Equal(t, "store-nearly-full", slugOf(p))
	assert.Contains(t, p["detail"], "more than 65536 bytes are refused")
	status, _ := sendStatus(fileMsg(t, "small", 1000))
	assert.Equal(t, http.StatusAccepted, status, "a small file still")
	status, _ = sendStatus(chatMsg())
	assert.Equal(t, http.StatusAccepted, status, "a chat still")
	status, _, b := call(t, s.URL, "Echo", "echo", q("apikey", s.Key), make([]byte, 100_000))
	assert.Equal(t, http.StatusInsufficientStorage, status, "a large webhook body: %.200s", b)

	fillTo(85)
	require.Eventually(t, func() bool {
		status, p = sendStatus(chatMsg())
		return status == http.StatusInsufficientStorage
	}, 10*time.Second, 100*time.Millisecond, "a chat refused over 80 %")
	assert.Equal(t, "store-nearly-full", slugOf(p))
	assert.Contains(t, p["detail"], "no new messages are taken")
	status, _, b = doGet(t, s.URL, "/api/v1/admin/tenants/default/messaging/history",
		q("agentName", "Echo", "activationName", "default", "participantId", "Alice"), auth...)
	assert.Equal(t, http.StatusOK, status, "history is read: %s", b)
	tenantUsage(t, s.URL, "default", s.Key)

	assert.Equal(t, float64(maxStore), metricValue(t, s.URL, "agentbus_store_max_bytes"))
	// The level is a sample taken every usage.LevelInterval: the one that refused the chat may
	// have been read before the fill reached 85 %.
	assert.Eventually(t, func() bool {
		return metricValue(t, s.URL, "agentbus_store_used_bytes") >= float64(maxStore*85/100)
	}, 10*time.Second, 100*time.Millisecond, "the store's level in the metrics")
	assert.GreaterOrEqual(t, metricValue(t, s.URL, `agentbus_ingress_storage_refusals_total{reason="store-nearly-full"}`), float64(3))

	require.NoError(t, fill.Purge(ctx))
	require.Eventually(t, func() bool {
		status, _ := sendStatus(fileMsg(t, "big", 100_000))
		return status == http.StatusAccepted
	}, 10*time.Second, 100*time.Millisecond, "a file taken again once space is freed")
}

// TestEveryStoringOperationOverQuota: every operation that documents 507 answers it to a tenant
// whose byte quota a request of any size passes.
func TestEveryStoringOperationOverQuota(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey})
	in := startIngress(t, s, ingress.Config{AdminKey: systemKey, Quotas: usage.Fixed(usage.Quota{Bytes: 1})})
	calls := operationsListing(loadOpenAPI(t), http.StatusInsufficientStorage)
	require.NotEmpty(t, calls)
	for _, c := range calls {
		status, h, b := c.callWithKey(t, in.URL, systemKey)
		if assert.Equal(t, http.StatusInsufficientStorage, status, "%s %s: %s", c.method, c.path, b) {
			assert.Equal(t, "application/problem+json", h.Get("Content-Type"))
			assert.Contains(t, string(b), "storage-quota-exceeded", "%s %s", c.method, c.path)
		}
	}
}

// TestUsageAccess: a tenant's usage is read by its tenant admins and system admins (who name an
// existing tenant), not by a user key or another tenant's admin; the tenant must be valid. The
// metrics have each tenant's usage, and its quota.
func TestUsageAccess(t *testing.T) {
	t.Parallel()
	s := startStack(t, stack.Config{Ingress: ingress.Config{AdminKey: systemKey,
		Quotas: usage.Fixed(usage.Quota{Bytes: 1 << 30, Instances: 100})}}, "default", "other")
	userKey, _ := storeKey(t, s.Stack, "default", "user", "user")
	waitKnown(t, s.Stack, userKey)
	status, _, b := send(t, s.Stack, "default", "wait=true", chatMsg(), bearerHeader(s.Key)...)
	require.Equal(t, http.StatusOK, status, "%s", b)
	var r usage.Report
	require.Eventually(t, func() bool {
		r = tenantUsage(t, s.URL, "default", systemKey)
		return r.Bytes.History > 0 && r.Bytes.State > 0 && r.Instances == 1
	}, 5*time.Second, 20*time.Millisecond)
	assert.Equal(t, usage.Report{Tenant: "default", Bytes: usage.ReportBytes{History: r.Bytes.History, State: r.Bytes.State,
		Total: r.Bytes.History + r.Bytes.State}, Instances: 1, Quota: usage.ReportQuota{Bytes: 1 << 30, Instances: 100}}, r)
	// The same but for the instance's record, which its host writes again once the instance is
	// idle (its activity time).
	same := tenantUsage(t, s.URL, "default", s.Key)
	same.Bytes.State, same.Bytes.Total = r.Bytes.State, r.Bytes.Total
	assert.Equal(t, r, same, "the tenant's admin reads the same")

	for _, tc := range []struct {
		name, path, key string
		want            int
	}{
		{"no key", "/api/v1/admin/tenants/default/usage", "", http.StatusUnauthorized},
		{"a user key", "/api/v1/admin/tenants/default/usage", userKey, http.StatusForbidden},
		{"another tenant's admin", "/api/v1/admin/tenants/default/usage", s.OtherKey, http.StatusForbidden},
		{"an unknown tenant", "/api/v1/admin/tenants/nobody/usage", systemKey, http.StatusNotFound},
		{"an invalid tenant", "/api/v1/admin/tenants/" + url.PathEscape("bad tenant") + "/usage", systemKey, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, h, b := do(t, http.MethodGet, s.URL+tc.path, tc.key, nil)
			problemOf(t, status, h.Get("Content-Type"), b, tc.want)
		})
	}

	_, _, body := doRequest(t, http.MethodGet, s.URL+"/metrics", nil)
	metrics := string(body)
	assert.Contains(t, metrics, fmt.Sprintf(`agentbus_tenant_stored_bytes{kind="history",tenant="default"} %d`, r.Bytes.History))
	assert.Contains(t, metrics, `agentbus_tenant_stored_bytes{kind="files",tenant="default"} 0`)
	assert.Contains(t, metrics, `agentbus_tenant_instances{tenant="default"} 1`)
	assert.Contains(t, metrics, `agentbus_tenant_quota_bytes{tenant="default"} 1.073741824e+09`)
	assert.Contains(t, metrics, `agentbus_tenant_quota_instances{tenant="default"} 100`)
}

// TestSettingsStorage: the storage settings reach the ingress: the same quota for every tenant
// (none when both are 0) and the store guard.
func TestSettingsStorage(t *testing.T) {
	t.Parallel()
	load := func(env map[string]string) ingress.Config {
		c, err := config.Load("test", nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, io.Discard)
		require.NoError(t, err)
		return ingress.FromSettings(c)
	}
	ic := load(nil)
	require.NotNil(t, ic.Quotas)
	assert.Equal(t, usage.Quota{Bytes: 1 << 30, Instances: 100_000}, ic.Quotas("anyone"))
	assert.Equal(t, ingress.StoreGuard{LargePercent: 90, AllPercent: 97}, ic.StoreGuard)

	ic = load(map[string]string{"AGENTBUS_TENANT_MAX_BYTES": "0", "AGENTBUS_TENANT_MAX_INSTANCES": "0",
		"AGENTBUS_STORE_GUARD_LARGE_PERCENT": "0", "AGENTBUS_STORE_MAX_BYTES": "60000000000"})
	assert.Nil(t, ic.Quotas, "no quota")
	assert.Equal(t, ingress.StoreGuard{AllPercent: 97, MaxBytes: 60_000_000_000}, ic.StoreGuard)
}

// contractUsage is TestOpenAPIContract's step for a tenant's usage: read by its admin, with
// X-Tenant-Id, by a system admin; refused to nobody, another tenant's admin, for an unknown
// tenant and a wrong method.
func contractUsage(c *contractClient) {
	t := c.t
	const p = "/api/v1/admin/tenants/default/usage"
	require.Eventually(t, func() bool {
		m := c.want(http.StatusOK, http.MethodGet, p, c.key, nil)
		b, _ := m["bytes"].(map[string]any)
		return b["history"].(float64) > 0
	}, 5*time.Second, 20*time.Millisecond, "the history of the steps before is counted")
	c.want(http.StatusOK, http.MethodGet, p, c.key, nil, "X-Tenant-Id", "default")
	c.want(http.StatusOK, http.MethodGet, p, systemKey, nil)
	c.want(http.StatusBadRequest, http.MethodGet, p, c.key, nil, "X-Tenant-Id", "other")
	c.want(http.StatusUnauthorized, http.MethodGet, p, "", nil)
	c.want(http.StatusForbidden, http.MethodGet, p, c.other, nil)
	c.want(http.StatusNotFound, http.MethodGet, "/api/v1/admin/tenants/nobody/usage", systemKey, nil)
	c.want(http.StatusMethodNotAllowed, http.MethodPost, p, c.key, nil)
}

// TestKeptCountsInUsage: a tenant's dead letters and undelivered events count in its usage as
// kept, as many bytes as the streams hold of them, from when they are kept until they are
// discarded, replayed or purged with their subscription; another tenant's count in its own.
func TestKeptCountsInUsage(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{AdminKey: systemKey, Agents: []*agent.Agent{echo.New(), contractFailing()},
		Host:          agent.HostConfig{MaxDeliveries: 2},
		Subscriptions: subscription.Config{RetryFor: time.Second, MaxBackoff: 100 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	defer rcv.Close()
	const subs = "/api/v1/admin/tenants/default/subscriptions"
	status, _, b := do(t, http.MethodPost, s.URL+subs, s.Key,
		strings.NewReader(`{"url":"`+rcv.URL+`","events":["message.incoming","message.outgoing"],"agents":["Echo"]}`))
	require.Equal(t, http.StatusCreated, status, "%s", b)
	var sub struct{ ID string }
	require.NoError(t, json.Unmarshal(b, &sub))

	letters := []uint64{killLetter(t, s, s.Key, "Failing", "fail"), killLetter(t, s, s.Key, "Failing", "fail")}
	killLetter(t, s, s.OtherKey, "Failing", "fail")
	status, _, b = send(t, s, "default", "wait=true", chatMsg("text", strings.Repeat("hello ", 200)), bearerHeader(s.Key)...)
	require.Equal(t, http.StatusOK, status, "%s", b)

	// kept is what the streams hold of tenant's dead letters and undelivered events.
	kept := func(tenant string) (dead, undelivered int64) {
		return streamBytes(t, ctx, s.Res.JS, subject.DeadLettersStream, subject.TenantDeadLetters(tenant)),
			streamBytes(t, ctx, s.Res.JS, subject.UndeliveredStream, subject.TenantUndelivered(tenant))
	}
	counted := func(tenant, key string, want func(dead, undelivered int64) bool) {
		t.Helper()
		var r usage.Report
		var dead, undelivered int64
		require.Eventually(t, func() bool {
			r = tenantUsage(t, s.URL, tenant, key)
			dead, undelivered = kept(tenant)
			return want(dead, undelivered) && r.Bytes.Kept == dead+undelivered
		}, 20*time.Second, 100*time.Millisecond, "%s: usage %+v, the streams hold %d of dead letters and %d of undelivered events",
			tenant, r.Bytes, dead, undelivered)
		assert.Equal(t, r.Bytes.History+r.Bytes.Files+r.Bytes.Payloads+r.Bytes.Kept+r.Bytes.State, r.Bytes.Total)
		t.Logf("%s: usage %+v: dead letters %d, undelivered events %d", tenant, r.Bytes, dead, undelivered)
	}
	var twoLetters int64
	counted("default", s.Key, func(dead, undelivered int64) bool {
		twoLetters = dead
		return dead > 0 && undelivered > 0 // both events given up on
	})
	counted("other", s.OtherKey, func(dead, undelivered int64) bool { return dead > 0 && undelivered == 0 })

	const letter = "/api/v1/admin/tenants/default/deadletters/"
	status, _, b = do(t, http.MethodDelete, s.URL+letter+strconv.FormatUint(letters[0], 10), s.Key, nil)
	require.Equal(t, http.StatusNoContent, status, "%s", b)
	counted("default", s.Key, func(dead, _ int64) bool { return dead < twoLetters })
	// Sent again, it fails again: one dead letter goes, another comes.
	status, _, b = do(t, http.MethodPost, s.URL+letter+strconv.FormatUint(letters[1], 10)+"/replay", s.Key, nil)
	require.Equal(t, http.StatusAccepted, status, "%s", b)
	require.Eventually(t, func() bool {
		status, _, b := do(t, http.MethodGet, s.URL+strings.TrimSuffix(letter, "/"), s.Key, nil)
		var page deadletter.Page
		require.Equal(t, http.StatusOK, status, "%s", b)
		require.NoError(t, json.Unmarshal(b, &page))
		return len(page.DeadLetters) == 1 && page.DeadLetters[0].ID > letters[1]
	}, 20*time.Second, 100*time.Millisecond, "the replayed request dead again")
	counted("default", s.Key, func(dead, _ int64) bool { return dead > 0 })

	status, _, b = do(t, http.MethodDelete, s.URL+subs+"/"+sub.ID, s.Key, nil)
	require.Equal(t, http.StatusNoContent, status, "%s", b)
	counted("default", s.Key, func(_, undelivered int64) bool { return undelivered == 0 })
}
