package remote_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/outbound"
	"github.com/agentbus/agentbus/pkg/remote"
	"github.com/agentbus/agentbus/pkg/subject"
)

// TestConcurrentReplaces: admins replacing one registration at once all succeed, the last writer
// winning, and the registration ends as one of theirs, with its creation time and secret kept.
func TestConcurrentReplaces(t *testing.T) {
	const writers, rounds = 8, 10
	res := natstest.Bus(t, bus.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	s := remote.NewStore(res, nil, 0)
	first, err := s.Put(ctx, "", remote.Registration{Name: "Racy", URL: "http://127.0.0.1:10/agent", Chat: true}, false)
	require.NoError(t, err)
	urls := map[string]bool{}
	for round := range rounds {
		start := make(chan struct{})
		var wg sync.WaitGroup
		for w := range writers {
			url := fmt.Sprintf("http://127.0.0.1:10/agent-%d-%d", round, w)
			urls[url] = true
			wg.Go(func() {
				<-start
				got, err := s.Put(ctx, "", remote.Registration{Name: "Racy", URL: url, Chat: true}, true)
				if assert.NoError(t, err, "round %d, writer %d", round, w) {
					assert.Equal(t, url, got.URL)
					assert.Equal(t, first.Secret, got.Secret, "the secret is kept")
				}
			})
		}
		close(start)
		wg.Wait()
		require.False(t, t.Failed())
	}
	got, err := s.Get(ctx, "", "Racy")
	require.NoError(t, err)
	assert.True(t, urls[got.URL], "the registration is one writer's: %s", got.URL)
	assert.Equal(t, first.Secret, got.Secret, "secret")
	assert.Equal(t, first.CreatedAt, got.CreatedAt, "createdAt")
}

// TestConcurrentRegistrationsKeepTheLimit: of many remote agents of a tenant registered at once,
// on the stores of several processes, no more than the limit are kept (all may give way), every
// refusal is ErrLimit, and those that gave way left nothing: the tenant registers up to its
// limit after, and not one more.
// It holds whether the tenant's registrations are counted through the index or, before the
// index holds every registration (remote.Store.Index), by reading them all.
func TestConcurrentRegistrationsKeepTheLimit(t *testing.T) {
	for _, indexed := range []bool{true, false} {
		t.Run(fmt.Sprintf("indexed=%v", indexed), func(t *testing.T) { concurrentRegistrationsKeepTheLimit(t, indexed) })
	}
}

func concurrentRegistrationsKeepTheLimit(t *testing.T, indexed bool) {
	const limit, tries = 2, 8
	res := natstest.Bus(t, bus.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	allow, err := outbound.ParseAllowList("http://127.0.0.1:*")
	require.NoError(t, err)
	if indexed {
		require.NoError(t, remote.NewStore(res, allow, limit).Index(ctx))
	}
	register := func(s *remote.Store, name string) error {
		_, err := s.Put(ctx, "acme", remote.Registration{Name: name, URL: "http://127.0.0.1:10/" + name, Chat: true}, false)
		return err
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		made []string
	)
	for i := range tries {
		s := remote.NewStore(res, allow, limit)
		name := fmt.Sprintf("Racy%d", i)
		wg.Go(func() {
			err := register(s, name)
			if !assert.True(t, err == nil || errors.Is(err, remote.ErrLimit), "Put: %v", err) || err != nil {
				return
			}
			mu.Lock()
			made = append(made, name)
			mu.Unlock()
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, len(made), limit, "agents registered")
	s := remote.NewStore(res, allow, limit)
	for i := 0; len(made) < limit; i++ {
		name := fmt.Sprintf("After%d", i)
		if !assert.NoError(t, register(s, name), "an agent after the race, with room left") {
			break
		}
		made = append(made, name)
	}
	assert.ErrorIs(t, register(s, "OneMore"), remote.ErrLimit, "an agent past the limit after the race")
	have, err := s.List(ctx, "acme")
	require.NoError(t, err)
	var names []string
	for _, r := range have {
		names = append(names, r.Name)
	}
	assert.ElementsMatch(t, made, names, "acme's agents")
}

// TestListReadsTheTenantsOwn: a tenant's listing reads its registrations through the index, not
// every tenant's (another tenant's registration that does not decode does not fail it), leaves
// out an entry whose registration is gone or another's, and, until Index has run, reads every
// registration, so that one stored by a build that did not index it is listed too.
func TestListReadsTheTenantsOwn(t *testing.T) {
	res := natstest.Bus(t, bus.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	allow, err := outbound.ParseAllowList("http://127.0.0.1:*")
	require.NoError(t, err)
	s := remote.NewStore(res, allow, 0)
	names := func(owner string) []string {
		t.Helper()
		regs, err := s.List(ctx, owner)
		require.NoError(t, err)
		var out []string
		for _, r := range regs {
			out = append(out, r.Name)
		}
		return out
	}
	put := func(owner, name string) {
		t.Helper()
		_, err := s.Put(ctx, owner, remote.Registration{Name: name, URL: "http://127.0.0.1:10/" + name, Chat: true}, false)
		require.NoError(t, err)
	}
	put("acme", "Bravo")
	put("acme", "Alpha")
	put("globex", "Gamma")
	put("", "Shared")
	// Stored by a build that indexed nothing: not in the index.
	old, err := json.Marshal(remote.Registration{Name: "Older", URL: "http://127.0.0.1:10/older", Owner: "acme", Tenants: []string{"acme"},
		Partitions: remote.DefaultPartitions, TimeoutSeconds: 30, MaxConcurrent: 32})
	require.NoError(t, err)
	_, err = res.RemoteAgents.Create(ctx, subject.AgentKey("Older"), old)
	require.NoError(t, err)
	assert.Equal(t, []string{"Alpha", "Bravo", "Older"}, names("acme"), "before Index: every registration read")

	require.NoError(t, s.Index(ctx))
	assert.Equal(t, []string{"Alpha", "Bravo", "Older"}, names("acme"), "indexed")
	assert.Equal(t, []string{"Gamma"}, names("globex"))
	assert.Equal(t, []string{"Alpha", "Bravo", "Gamma", "Older", "Shared"}, names(""), "a system admin lists every one")

	// Another tenant's registration that does not decode fails the listings that read it:
	// the system admin's, not acme's.
	_, err = res.RemoteAgents.Create(ctx, subject.AgentKey("Broken"), []byte("{"))
	require.NoError(t, err)
	_, err = res.RemoteAgentOwners.Create(ctx, subject.RemoteAgentOwnerKey("globex", "Broken"), nil)
	require.NoError(t, err)
	_, err = s.List(ctx, "")
	require.Error(t, err)
	assert.Equal(t, []string{"Alpha", "Bravo", "Older"}, names("acme"), "acme reads its own only")
	require.NoError(t, res.RemoteAgents.Purge(ctx, subject.AgentKey("Broken")))

	// Removed, and registered again by another tenant: acme's entry of it leads nowhere.
	require.NoError(t, s.Delete(ctx, "acme", "Bravo"))
	_, err = res.RemoteAgentOwners.Create(ctx, subject.RemoteAgentOwnerKey("acme", "Gamma"), nil) // as if left by a failed removal
	require.NoError(t, err)
	assert.Equal(t, []string{"Alpha", "Older"}, names("acme"))
	assert.Equal(t, []string{"Gamma"}, names("globex"))
	// A system admin removes a tenant's agent: the tenant's entry goes with it.
	require.NoError(t, s.Delete(ctx, "", "Alpha"))
	_, err = res.RemoteAgentOwners.Get(ctx, subject.RemoteAgentOwnerKey("acme", "Alpha"))
	assert.ErrorIs(t, err, jetstream.ErrKeyNotFound)
	assert.Equal(t, []string{"Older"}, names("acme"))
}

// BenchmarkListOwn is a tenant's listing of its three remote agents beside
// AGENTBUS_BENCH_REMOTE_OTHERS (default 1000) other tenants' registrations of about 2 KB each:
// through the index, and by reading every registration (as before Index runs).
func BenchmarkListOwn(b *testing.B) {
	others := 1000
	if v, err := strconv.Atoi(os.Getenv("AGENTBUS_BENCH_REMOTE_OTHERS")); err == nil {
		others = v
	}
	res := natstest.Bus(b, bus.Config{})
	ctx := b.Context()
	desc := strings.Repeat("d", 2000)
	for i := range others {
		owner, name := fmt.Sprintf("t%d", i), fmt.Sprintf("Other%d", i)
		v, err := json.Marshal(remote.Registration{Name: name, URL: "http://127.0.0.1:10/" + name, Owner: owner, Tenants: []string{owner},
			Methods: []remote.Method{{Name: "m", Description: desc}}, Partitions: remote.DefaultPartitions})
		require.NoError(b, err)
		_, err = res.RemoteAgents.Create(ctx, subject.AgentKey(name), v)
		require.NoError(b, err)
	}
	s := remote.NewStore(res, nil, 0)
	for _, name := range []string{"A", "B", "C"} {
		_, err := s.Put(ctx, "", remote.Registration{Name: name, URL: "http://127.0.0.1:10/" + name, Chat: true}, false)
		require.NoError(b, err)
		v, err := res.RemoteAgents.Get(ctx, subject.AgentKey(name))
		require.NoError(b, err)
		var r remote.Registration
		require.NoError(b, json.Unmarshal(v.Value(), &r))
		r.Owner, r.Tenants = "acme", []string{"acme"}
		v2, err := json.Marshal(r)
		require.NoError(b, err)
		_, err = res.RemoteAgents.Put(ctx, subject.AgentKey(name), v2)
		require.NoError(b, err)
	}
	list := func(b *testing.B, s *remote.Store) {
		for b.Loop() {
			regs, err := s.List(ctx, "acme")
			if err != nil || len(regs) != 3 {
				b.Fatalf("%d registrations, %v", len(regs), err)
			}
		}
	}
	b.Run("every registration", func(b *testing.B) { list(b, remote.NewStore(res, nil, 0)) })
	require.NoError(b, s.Index(ctx))
	b.Run("index", func(b *testing.B) { list(b, remote.NewStore(res, nil, 0)) })
}
