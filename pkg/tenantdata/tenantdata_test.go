package tenantdata_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/tenantdata"
	"github.com/agentbus/agentbus/pkg/usage"
)

// TestErase: Erase removes a tenant's records from every store and zeroes its usage, leaves
// another tenant's alone (one whose id begins with the first's too), does nothing for an id
// that is not one, and erasing again finds nothing to do.
func TestErase(t *testing.T) {
	res := natstest.Bus(t, bus.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := res.InboxWith(ctx, "Echo", 4)
	require.NoError(t, err)
	reader, err := usage.Watch(ctx, res.JS, res.Config, nil)
	require.NoError(t, err)
	defer reader.Close()
	meter, err := usage.NewMeter(res.JS.Conn(), nil)
	require.NoError(t, err)

	tenants := []string{"acme", "acme-2"}
	for _, tenant := range tenants {
		store(ctx, t, res, tenant)
		meter.Add(tenant, usage.History, 100)
		meter.AddInstance(tenant)
	}
	require.NoError(t, meter.Flush(ctx))
	stored := usage.Usage{Instances: 1}
	stored.Bytes[usage.History] = 100
	for _, tenant := range tenants {
		require.Eventually(t, func() bool { return reader.Of(tenant) == stored }, 5*time.Second, 5*time.Millisecond, "usage of %s", tenant)
		for _, w := range wheres(ctx, t, res, tenant) {
			require.NotZero(t, w.count(), "nothing of %s in %s", tenant, w.name)
		}
	}

	for _, bad := range []string{"", "*", ">", "acme.>", "ac me", "acme/"} {
		assert.Error(t, tenantdata.Erase(ctx, res, bad), "tenant %q", bad)
	}
	for _, w := range wheres(ctx, t, res, "acme") {
		require.NotZero(t, w.count(), "an invalid id erased acme's %s", w.name)
	}

	require.NoError(t, tenantdata.Erase(ctx, res, "acme"))
	for _, w := range wheres(ctx, t, res, "acme") {
		assert.Zero(t, w.count(), "acme's %s are still there", w.name)
	}
	for _, w := range wheres(ctx, t, res, "acme-2") {
		assert.NotZero(t, w.count(), "acme-2's %s went with acme's", w.name)
	}
	assert.Eventually(t, func() bool { return reader.Of("acme") == usage.Usage{} }, 5*time.Second, 5*time.Millisecond,
		"a reader still holds acme's usage: %+v", reader.Of("acme"))
	assert.Equal(t, stored, reader.Of("acme-2"), "acme-2's usage")
	require.NoError(t, tenantdata.Erase(ctx, res, "acme"), "erasing again")
	require.NoError(t, tenantdata.EraseRecords(ctx, res, "acme"), "erasing the records again")
}

// store writes one record of tenant in every store Erase empties.
func store(ctx context.Context, t *testing.T, res *bus.Resources, tenant string) {
	t.Helper()
	const wf, participant = "wf:1", "ada"
	for _, subj := range []string{
		subject.Inbox("Echo", tenant, wf, participant),
		subject.Thread(tenant, wf, participant),
		subject.Runs(tenant, "Echo"),
		subject.Step(tenant, wf, "req-1", 1),
		subject.Wait(tenant, subject.WaitID(wf, "req-1", 1)),
	} {
		_, err := res.JS.Publish(ctx, subj, []byte("x"))
		require.NoError(t, err, "publishing to %s", subj)
	}
	for _, kv := range []struct {
		kv  jetstream.KeyValue
		key string
	}{
		{res.Instances, subject.InstanceKey(tenant, wf)},
		{res.Topics, subject.TopicsKey(tenant, wf, participant)},
		{res.Results, subject.ResultKey(tenant, "req-1")},
		{res.SlotGrants, subject.SlotGrantKey(tenant, "Echo")},
	} {
		_, err := kv.kv.Put(ctx, kv.key, []byte("x"))
		require.NoError(t, err, "putting %s", kv.key)
	}
	for _, o := range []struct {
		obs  jetstream.ObjectStore
		name string
	}{{res.Files, subject.FileObject(tenant, "f-1")}, {res.Claims, subject.ClaimName(tenant, "req-1", "request")}} {
		_, err := o.obs.Put(ctx, jetstream.ObjectMeta{Name: o.name}, bytes.NewReader([]byte("x")))
		require.NoError(t, err, "putting %s", o.name)
	}
}

// where counts what a tenant has in one store.
type where struct {
	name  string
	count func() int
}

// wheres are the stores store writes in, each counting what tenant has there.
func wheres(ctx context.Context, t *testing.T, res *bus.Resources, tenant string) []where {
	t.Helper()
	inbox, err := res.JS.Stream(ctx, subject.InboxStream("Echo"))
	require.NoError(t, err)
	under := func(s jetstream.Stream, filter string) func() int {
		return func() int {
			info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
			require.NoError(t, err)
			n := 0
			for _, c := range info.State.Subjects {
				n += int(c)
			}
			return n
		}
	}
	kv := func(b jetstream.KeyValue) jetstream.Stream {
		s, err := res.JS.Stream(ctx, subject.KVStream(b.Bucket()))
		require.NoError(t, err)
		return s
	}
	objects := func(obs jetstream.ObjectStore) func() int {
		return func() int {
			infos, err := obs.List(ctx)
			if err == jetstream.ErrNoObjectsFound {
				return 0
			}
			require.NoError(t, err)
			n := 0
			for _, o := range infos {
				if strings.HasPrefix(o.Name, subject.TenantObjects(tenant)) {
					n++
				}
			}
			return n
		}
	}
	return []where{
		{"inbox requests", under(inbox, subject.TenantInboxRequests(tenant))},
		{"conversations", under(res.Messages, subject.TenantThreads(tenant))},
		{"runs", under(res.Runs, subject.TenantRuns(tenant))},
		{"steps", under(res.Steps, subject.TenantSteps(tenant))},
		{"waits", under(res.Waits, subject.TenantWaits(tenant))},
		{"instances", under(kv(res.Instances), subject.TenantKeys(subject.InstancesBucket, tenant))},
		{"topics", under(kv(res.Topics), subject.TenantKeys(subject.TopicsBucket, tenant))},
		{"results", under(kv(res.Results), subject.TenantKeys(subject.ResultsBucket, tenant))},
		{"slot grants", under(kv(res.SlotGrants), subject.TenantSlotGrants(tenant))},
		{"usage days", under(res.Usage, subject.TenantUsageDays(tenant))},
		{"usage totals", under(res.UsageTotals, subject.TenantUsageTotals(tenant))},
		{"files", objects(res.Files)},
		{"claims", objects(res.Claims)},
	}
}
