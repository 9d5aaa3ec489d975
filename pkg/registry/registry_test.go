package registry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/placement"
	"github.com/agentbus/agentbus/pkg/registry"
	"github.com/agentbus/agentbus/pkg/subject"
)

func setup(t testing.TB) (context.Context, *bus.Resources) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	res := natstest.Bus(t, bus.Config{})
	return ctx, res
}

func newDirectory(t testing.TB, ctx context.Context, res *bus.Resources) *registry.Directory {
	t.Helper()
	d, err := registry.NewDirectory(ctx, res.Registry, res.Hosts, nil)
	require.NoError(t, err, "NewDirectory")
	t.Cleanup(func() {
		assert.NoError(t, d.Close(), "closing directory")
	})
	return d
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		require.False(t, time.Now().After(deadline), "not within %v: %s", within, what)
		time.Sleep(5 * time.Millisecond)
	}
}

var echo = registry.Agent{
	Name:          "Echo",
	WorkflowTypes: []string{"Supervisor Workflow", "Conversational"},
	Webhooks:      []string{"echo", "verify"},
	DataMethods:   []string{"sum", "count"},
	Chat:          true,
	File:          true,
}

func TestRegisterBeforeDirectory(t *testing.T) {
	ctx, res := setup(t)
	other := registry.Agent{Name: "with.dots and spaces", WorkflowTypes: []string{"Supervisor Workflow"}}
	require.NoError(t, registry.Register(ctx, res.Registry, []registry.Agent{echo, other}), "Register")
	d := newDirectory(t, ctx, res)
	// NewDirectory returns once the current registrations are loaded: no polling needed.
	got, ok := d.Agent("Echo")
	require.True(t, ok, "Directory does not know Echo")
	assert.Equal(t, echo.Name, got.Name, "Agent(Echo) = %+v, want %+v", got, echo)
	assert.Equal(t, echo.WorkflowTypes, got.WorkflowTypes, "Agent(Echo) = %+v, want %+v", got, echo)
	assert.Equal(t, echo.Webhooks, got.Webhooks, "Agent(Echo) = %+v, want %+v", got, echo)
	assert.Equal(t, echo.DataMethods, got.DataMethods, "Agent(Echo) = %+v, want %+v", got, echo)
	assert.Equal(t, echo.Chat, got.Chat, "Agent(Echo) = %+v, want %+v", got, echo)
	assert.Equal(t, echo.File, got.File, "Agent(Echo) = %+v, want %+v", got, echo)
	_, ok = d.Agent(other.Name)
	assert.True(t, ok, "Directory does not know %q", other.Name)
	_, ok = d.Agent("echo")
	assert.False(t, ok, "agent names matched case-insensitively")
	_, ok = d.Agent("Nobody")
	assert.False(t, ok, "Directory knows an agent that never registered")
}

func TestRegisterAfterDirectory(t *testing.T) {
	ctx, res := setup(t)
	d := newDirectory(t, ctx, res)
	require.NoError(t, registry.Register(ctx, res.Registry, []registry.Agent{echo}))
	eventually(t, time.Second, "Directory sees Echo", func() bool { _, ok := d.Agent("Echo"); return ok })

	// A new registration replaces the old one.
	changed := echo
	changed.Webhooks = []string{"only"}
	require.NoError(t, registry.Register(ctx, res.Registry, []registry.Agent{changed}))
	eventually(t, time.Second, "Directory sees the changed registration", func() bool {
		a, _ := d.Agent("Echo")
		return slices.Equal(a.Webhooks, []string{"only"})
	})

	// A removed registration disappears.
	require.NoError(t, res.Registry.Delete(ctx, subject.AgentKey("Echo")))
	eventually(t, time.Second, "Directory forgets Echo", func() bool { _, ok := d.Agent("Echo"); return !ok })
}

func TestAgentMethods(t *testing.T) {
	tests := []struct {
		name  string
		check bool
		want  bool
	}{
		{name: "has workflow type", check: echo.HasWorkflowType("Conversational"), want: true},
		{name: "has default workflow type", check: echo.HasWorkflowType("Supervisor Workflow"), want: true},
		{name: "lacks workflow type", check: echo.HasWorkflowType("Other"), want: false},
		{name: "workflow type is case-sensitive", check: echo.HasWorkflowType("conversational"), want: false},
		{name: "has webhook", check: echo.HasWebhook("verify"), want: true},
		{name: "lacks webhook", check: echo.HasWebhook("sum"), want: false},
		{name: "zero agent", check: registry.Agent{}.HasWorkflowType(""), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.check)
		})
	}
}

func TestBeatAndLeave(t *testing.T) {
	ctx, res := setup(t)
	d := newDirectory(t, ctx, res)
	require.False(t, d.Live("Echo"), "Echo live before any heartbeat")
	h1 := registry.Host{ID: "host-1", Agents: []string{"Echo", "Other"}, StartedAt: time.Now()}
	h2 := registry.Host{ID: "host.2 with spaces", Agents: []string{"Other"}, StartedAt: time.Now()}
	for _, h := range []registry.Host{h1, h2} {
		require.NoError(t, registry.Beat(ctx, res.Hosts, h), "Beat(%s)", h.ID)
	}
	eventually(t, time.Second, "Echo live after a beat", func() bool { return d.Live("Echo") })
	eventually(t, time.Second, "Other live after a beat", func() bool { return d.Live("Other") })
	assert.False(t, d.Live("Registered But Not Run"), "an agent no heartbeat names is live")
	assert.False(t, d.Live("echo"), "agent names in heartbeats matched case-insensitively")

	require.NoError(t, registry.Leave(ctx, res.Hosts, h1.ID), "Leave")
	eventually(t, time.Second, "Echo not live after its only host left", func() bool { return !d.Live("Echo") })
	assert.True(t, d.Live("Other"), "Other not live though host-2 still beats")
	require.NoError(t, registry.Leave(ctx, res.Hosts, h2.ID))
	eventually(t, time.Second, "Other not live after every host left", func() bool { return !d.Live("Other") })

	// Leaving twice, or without ever beating, is fine.
	for _, id := range []string{h1.ID, "never-beat"} {
		assert.NoError(t, registry.Leave(ctx, res.Hosts, id), "Leave(%q)", id)
	}

	// A host that comes back is live again.
	require.NoError(t, registry.Beat(ctx, res.Hosts, h1))
	eventually(t, time.Second, "Echo live after its host came back", func() bool { return d.Live("Echo") })
}

func TestHeartbeatReplacesAgents(t *testing.T) {
	ctx, res := setup(t)
	d := newDirectory(t, ctx, res)
	h := registry.Host{ID: "host-1", Agents: []string{"Echo"}}
	require.NoError(t, registry.Beat(ctx, res.Hosts, h))
	eventually(t, time.Second, "Echo live", func() bool { return d.Live("Echo") })
	h.Agents = []string{"Other"}
	require.NoError(t, registry.Beat(ctx, res.Hosts, h))
	eventually(t, time.Second, "Other live and Echo not, after the host's agents changed", func() bool {
		return d.Live("Other") && !d.Live("Echo")
	})
}

// Ingress relies on a feature of an agent's hosts only while every live host of the agent lists
// it: a host of an earlier release, which lists none, turns it off until it leaves.
func TestAllLiveHave(t *testing.T) {
	ctx, res := setup(t)
	d := newDirectory(t, ctx, res)
	const f = registry.FeatureReplyTo
	assert.False(t, d.AllLiveHave("Echo", f), "no live host")

	fresh := registry.Host{ID: "new", Agents: []string{"Echo"}, Features: []string{f}}
	require.NoError(t, registry.Beat(ctx, res.Hosts, fresh))
	eventually(t, time.Second, "the only host has the feature", func() bool { return d.AllLiveHave("Echo", f) })
	assert.False(t, d.AllLiveHave("Echo", "unknown-feature"), "a feature no host lists")
	assert.False(t, d.AllLiveHave("Other", f), "an agent no host runs")

	old := registry.Host{ID: "old", Agents: []string{"Echo", "Other"}}
	require.NoError(t, registry.Beat(ctx, res.Hosts, old))
	eventually(t, time.Second, "a live host without the feature", func() bool { return !d.AllLiveHave("Echo", f) })

	// A host of another agent does not count.
	require.NoError(t, registry.Beat(ctx, res.Hosts, registry.Host{ID: "old", Agents: []string{"Other"}}))
	eventually(t, time.Second, "the host without the feature runs another agent now", func() bool { return d.AllLiveHave("Echo", f) })
	assert.False(t, d.AllLiveHave("Other", f), "Other's only host lacks the feature")

	require.NoError(t, registry.Leave(ctx, res.Hosts, fresh.ID))
	eventually(t, time.Second, "no live host after the last left", func() bool { return !d.AllLiveHave("Echo", f) })
}

// LiveHostsOf answers for many agents at once what LiveHosts answers for each.
func TestLiveHostsOf(t *testing.T) {
	ctx, res := setup(t)
	d := newDirectory(t, ctx, res)
	for _, h := range []registry.Host{{ID: "b", Agents: []string{"Echo", "Other"}}, {ID: "a", Agents: []string{"Echo"}},
		{ID: "c", Agents: []string{"Third"}}, {ID: "gone", Agents: []string{"Echo"}, Leaving: true}} {
		require.NoError(t, registry.Beat(ctx, res.Hosts, h))
	}
	eventually(t, time.Second, "every heartbeat read", func() bool { return len(d.LiveHosts("Echo")) == 2 && d.Live("Third") })
	agents := []string{"Echo", "Other", "Nobody's"}
	of := d.LiveHostsOf(agents)
	assert.Len(t, of, len(agents), "an entry for each agent asked for, none for others")
	for _, a := range agents {
		assert.Equal(t, d.LiveHosts(a), of[a], a)
	}
	assert.Equal(t, []string{"a", "b"}, []string{of["Echo"][0].ID, of["Echo"][1].ID}, "ordered by id, the leaving host left out")
}

func TestDirectorySeesExistingHeartbeat(t *testing.T) {
	ctx, res := setup(t)
	require.NoError(t, registry.Beat(ctx, res.Hosts, registry.Host{ID: "h", Agents: []string{"Echo"}}))
	d := newDirectory(t, ctx, res)
	assert.True(t, d.Live("Echo"), "heartbeat written before NewDirectory not loaded on return")
}

func TestDirectoryAgentsSortedByName(t *testing.T) {
	ctx, res := setup(t)
	zed := registry.Agent{Name: "Zed", WorkflowTypes: []string{"Supervisor Workflow"}}
	alpha := registry.Agent{Name: "alpha", WorkflowTypes: []string{"Supervisor Workflow"}, Chat: true}
	require.NoError(t, registry.Register(ctx, res.Registry, []registry.Agent{zed, echo, alpha}))
	d := newDirectory(t, ctx, res)
	got := d.VisibleAgents("")
	names := make([]string, 0, len(got))
	for _, a := range got {
		names = append(names, a.Name)
	}
	// Byte order, as strings.Compare sorts: upper case first.
	assert.Equal(t, []string{"Echo", "Zed", "alpha"}, names)
	assert.Equal(t, echo, got[0])
	assert.True(t, got[2].Chat)

	// A registration that arrives later is listed too.
	require.NoError(t, registry.Register(ctx, res.Registry, []registry.Agent{{Name: "Beta", WorkflowTypes: []string{"Conversational"}}}))
	eventually(t, 5*time.Second, "Beta listed", func() bool { return len(d.VisibleAgents("")) == 4 })
	assert.Equal(t, "Beta", d.VisibleAgents("")[0].Name)
}

// Method descriptions travel with the registration; a registration written before they existed
// still reads, without them.
func TestMethodDescriptions(t *testing.T) {
	ctx, res := setup(t)
	withTools := registry.Agent{
		Name:          "Calc",
		WorkflowTypes: []string{"Supervisor Workflow"},
		DataMethods:   []string{"echo", "sum"},
		Methods: []registry.Method{
			{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
			{Name: "Sum", Description: "Adds numbers", InputSchema: json.RawMessage(`{"type":"object","properties":{"values":{"type":"array","items":{"type":"number"}}},"required":["values"]}`)},
		},
	}
	require.NoError(t, registry.Register(ctx, res.Registry, []registry.Agent{withTools}))
	_, err := res.Registry.Put(ctx, subject.AgentKey("Old"), []byte(`{"name":"Old","workflowTypes":["Supervisor Workflow"],"dataMethods":["sum"]}`))
	require.NoError(t, err)

	d := newDirectory(t, ctx, res)
	got, ok := d.Agent("Calc")
	require.True(t, ok)
	require.Len(t, got.Methods, 2)
	m, ok := got.Method("sum")
	require.True(t, ok, "names match case-insensitively")
	assert.Equal(t, "Sum", m.Name)
	assert.Equal(t, "Adds numbers", m.Description)
	assert.JSONEq(t, string(withTools.Methods[1].InputSchema), string(m.InputSchema))
	_, ok = got.Method("count")
	assert.False(t, ok)

	old, ok := d.Agent("Old")
	require.True(t, ok)
	assert.True(t, old.HasDataMethod("sum"))
	assert.Empty(t, old.Methods)
}

// TestHostsCurrent: the directory is current once its watch delivered the bucket's newest
// heartbeat or leaving, and not while a heartbeat it has not delivered is in the bucket (here,
// its watch stopped).
func TestHostsCurrent(t *testing.T) {
	ctx, res := setup(t)
	current := func(d *registry.Directory) bool {
		ok, err := d.HostsCurrent(ctx)
		require.NoError(t, err)
		return ok
	}
	d := newDirectory(t, ctx, res)
	assert.True(t, current(d), "an empty bucket")
	h := registry.Host{ID: "host-1", Agents: []string{"Echo"}, StartedAt: time.Now()}
	require.NoError(t, registry.Beat(ctx, res.Hosts, h))
	eventually(t, time.Second, "current after a heartbeat", func() bool { return current(d) })
	require.NoError(t, registry.Leave(ctx, res.Hosts, h.ID))
	eventually(t, time.Second, "current after a leaving", func() bool { return current(d) })

	lagging, err := registry.NewDirectory(ctx, res.Registry, res.Hosts, nil)
	require.NoError(t, err)
	assert.True(t, current(lagging), "loaded")
	require.NoError(t, lagging.Close()) // its watch delivers nothing more
	require.NoError(t, registry.Beat(ctx, res.Hosts, h))
	eventually(t, time.Second, "the open directory current", func() bool { return current(d) })
	assert.False(t, current(lagging), "a heartbeat the watch did not deliver")
}

// Heartbeats reads every host's heartbeat, and Settled tells whether the hosts named divide an
// agent's partitions as placement assigns them.
func TestHeartbeatsSettled(t *testing.T) {
	ctx, res := setup(t)
	ids := []string{"host-a", "host-b"}
	owners := placement.Assign("Echo", 4, ids)
	claims := map[string][]int{}
	for p, owner := range owners {
		claims[owner] = append(claims[owner], p)
	}
	beat := func(id string, parts []int) {
		h := registry.Host{ID: id, Agents: []string{"Echo"}, Partitions: map[string][]int{"Echo": parts}}
		require.NoError(t, registry.Beat(ctx, res.Hosts, h))
	}

	hbs, err := registry.Heartbeats(ctx, res.JS, res.Hosts)
	require.NoError(t, err)
	assert.Empty(t, hbs)

	beat("host-a", claims["host-a"])
	hbs, err = registry.Heartbeats(ctx, res.JS, res.Hosts)
	require.NoError(t, err)
	assert.Equal(t, []string{"host-a"}, slices.Collect(maps.Keys(hbs)))
	assert.False(t, registry.Settled(hbs, "Echo", 4, ids), "host-b has no heartbeat")

	beat("host-b", append(slices.Clone(claims["host-b"]), claims["host-a"][0]))
	hbs, err = registry.Heartbeats(ctx, res.JS, res.Hosts)
	require.NoError(t, err)
	assert.False(t, registry.Settled(hbs, "Echo", 4, ids), "a partition listed by two hosts")

	beat("host-b", claims["host-b"])
	beat("gone", []int{0, 1, 2, 3}) // not among ids
	hbs, err = registry.Heartbeats(ctx, res.JS, res.Hosts)
	require.NoError(t, err)
	assert.Len(t, hbs, 3)
	assert.True(t, registry.Settled(hbs, "Echo", 4, ids))
	assert.False(t, registry.Settled(hbs, "Echo", 4, []string{"host-a"}), "host-a alone owns every partition")
}

// TestAgentRevisions: the directory's revision of the registry reaches the bucket's after a
// registration and after a removal, and names the revision of each registration it holds.
func TestAgentRevisions(t *testing.T) {
	ctx, res := setup(t)
	d := newDirectory(t, ctx, res)
	assert.Zero(t, d.AgentRevision("Echo"), "an agent never registered")
	require.NoError(t, registry.Register(ctx, res.Registry, []registry.Agent{echo}))
	rev, err := bus.NewestRevision(ctx, res.Registry)
	require.NoError(t, err)
	eventually(t, time.Second, "the directory's revision reaches the bucket's", func() bool { return d.AgentsRevision() >= rev })
	assert.Equal(t, rev, d.AgentRevision("Echo"), "the revision of Echo's registration")
	_, ok := d.Agent("Echo")
	assert.True(t, ok, "a registration at or before the directory's revision")

	require.NoError(t, res.Registry.Purge(ctx, subject.AgentKey("Echo")))
	rev, err = bus.NewestRevision(ctx, res.Registry)
	require.NoError(t, err)
	eventually(t, time.Second, "the directory's revision reaches the bucket's", func() bool { return d.AgentsRevision() >= rev })
	_, ok = d.Agent("Echo")
	assert.False(t, ok, "a registration removed at or before the directory's revision")
	assert.Zero(t, d.AgentRevision("Echo"), "a removed agent")
}

// Every subscriber of a directory hears of a heartbeat, one that cancelled no longer does, and
// one subscribed to some agents hears only of their hosts.
func TestSubscribe(t *testing.T) {
	ctx, res := setup(t)
	d := newDirectory(t, ctx, res)
	a, cancelA := d.Subscribe()
	b, cancelB := d.Subscribe()
	echo, cancelEcho := d.Subscribe("Other", "Echo")
	other, cancelOther := d.Subscribe("Other")
	defer cancelA()
	defer cancelEcho()
	defer cancelOther()
	cancelB()
	heard := func(ch <-chan struct{}, within time.Duration) bool {
		select {
		case <-ch:
			return true
		case <-time.After(within):
			return false
		}
	}
	require.NoError(t, registry.Beat(ctx, res.Hosts, registry.Host{ID: "h", Agents: []string{"Echo"}}))
	require.True(t, heard(a, 5*time.Second), "a subscriber did not hear of the heartbeat")
	require.True(t, heard(echo, 5*time.Second), "a subscriber to the host's agent did not hear of the heartbeat")
	assert.False(t, heard(b, 100*time.Millisecond), "a cancelled subscription heard of the heartbeat")
	assert.False(t, heard(other, 0), "a subscriber to another agent heard of the heartbeat")

	// A host that stops running the agent is a change of the agent's hosts.
	require.NoError(t, registry.Beat(ctx, res.Hosts, registry.Host{ID: "h", Agents: []string{"Third"}}))
	require.True(t, heard(echo, 5*time.Second), "a subscriber to the agent the host left did not hear of it")
	assert.False(t, heard(other, 100*time.Millisecond))
	assert.Empty(t, d.LiveHosts("Echo"), "the host's agents as its newest heartbeat names them")
	assert.Len(t, d.LiveHosts("Third"), 1)
	assert.False(t, d.Live("Echo"))
	require.NoError(t, registry.Beat(ctx, res.Hosts, registry.Host{ID: "h2", Agents: []string{"Other"}}))
	require.True(t, heard(other, 5*time.Second))
	assert.False(t, d.OthersOf([]string{"Other"}, "h2"), "h2 alone runs Other")
	assert.True(t, d.OthersOf([]string{"Other", "Third"}, "h2"), "h runs Third")
	assert.False(t, d.OthersOf([]string{"Third", "Echo"}, "h"))
}

// An agent only one tenant may call is that tenant's; any other is its own.
func TestOwner(t *testing.T) {
	assert.Equal(t, "tenant acme", registry.Agent{Name: "Bot", Tenants: []string{"acme"}}.Owner())
	assert.Equal(t, "agent Bot", registry.Agent{Name: "Bot", Tenants: []string{"acme", "beta"}}.Owner())
	assert.Equal(t, "agent Bot", registry.Agent{Name: "Bot"}.Owner())
}

// A tenant's listing holds the agents every tenant may call and those naming it, as their
// registrations change.
func TestDirectoryVisibleAgentsByTenant(t *testing.T) {
	ctx, res := setup(t)
	wt := []string{"Supervisor Workflow"}
	require.NoError(t, registry.Register(ctx, res.Registry, []registry.Agent{echo,
		{Name: "OnlyA", WorkflowTypes: wt, Tenants: []string{"a"}},
		{Name: "AB", WorkflowTypes: wt, Tenants: []string{"a", "b"}}}))
	d := newDirectory(t, ctx, res)
	names := func(tenant string) []string {
		var out []string
		for _, a := range d.VisibleAgents(tenant) {
			out = append(out, a.Name)
		}
		return out
	}
	assert.Equal(t, []string{"AB", "Echo", "OnlyA"}, names("a"))
	assert.Equal(t, []string{"AB", "Echo"}, names("b"))
	assert.Equal(t, []string{"Echo"}, names("c"))
	assert.Equal(t, []string{"AB", "Echo", "OnlyA"}, names(""))

	require.NoError(t, registry.Register(ctx, res.Registry, []registry.Agent{{Name: "OnlyA", WorkflowTypes: wt, Tenants: []string{"b"}}}))
	require.NoError(t, res.Registry.Delete(ctx, subject.AgentKey("AB")))
	eventually(t, 5*time.Second, "the changes seen", func() bool { return slices.Equal(names("a"), []string{"Echo"}) })
	assert.Equal(t, []string{"Echo", "OnlyA"}, names("b"))
	assert.Equal(t, []string{"Echo", "OnlyA"}, names(""))
}

// BenchmarkVisibleAgents is a tenant's listing of its two agents and one shared, beside 10,000
// agents of other tenants.
func BenchmarkVisibleAgents(b *testing.B) {
	ctx, res := setup(b)
	wt := []string{"Supervisor Workflow"}
	agents := []registry.Agent{echo, {Name: "Mine1", WorkflowTypes: wt, Tenants: []string{"me"}}, {Name: "Mine2", WorkflowTypes: wt, Tenants: []string{"me"}}}
	for i := range 10_000 {
		agents = append(agents, registry.Agent{Name: fmt.Sprint("Other", i), WorkflowTypes: wt, Tenants: []string{fmt.Sprint("t", i/10)}})
	}
	require.NoError(b, registry.Register(ctx, res.Registry, agents))
	d := newDirectory(b, ctx, res)
	eventually(b, 10*time.Second, "every agent read", func() bool { return len(d.VisibleAgents("")) == len(agents) })
	b.ReportAllocs()
	for b.Loop() {
		if n := len(d.VisibleAgents("me")); n != 3 {
			b.Fatal(n)
		}
	}
}

// A directory without schemas holds the registrations' methods without them; another holds them.
func TestDirectoryWithoutSchemas(t *testing.T) {
	ctx, res := setup(t)
	calc := registry.Agent{Name: "Calc", WorkflowTypes: []string{"Supervisor Workflow"}, DataMethods: []string{"sum"},
		Methods: []registry.Method{{Name: "sum", Description: "Adds", InputSchema: json.RawMessage(`{"type":"object","required":["values"]}`)}}}
	require.NoError(t, registry.Register(ctx, res.Registry, []registry.Agent{calc}))
	d, err := registry.NewDirectory(ctx, res.Registry, res.Hosts, nil, registry.WithoutSchemas())
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, d.Close()) })
	got, ok := d.Agent("Calc")
	require.True(t, ok)
	require.Len(t, got.Methods, 1)
	assert.Equal(t, registry.Method{Name: "sum", Description: "Adds"}, got.Methods[0])
	full, ok := newDirectory(t, ctx, res).Agent("Calc")
	require.True(t, ok)
	assert.JSONEq(t, `{"type":"object","required":["values"]}`, string(full.Methods[0].InputSchema))
}
