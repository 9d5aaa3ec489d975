package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/idle"
	"github.com/agentbus/agentbus/pkg/inspect"
	"github.com/agentbus/agentbus/pkg/subject"
)

// A tenant's cap on its requests of an agent running at once holds over every host of the agent
// together (docs/architecture.md#a-cap-across-the-hosts). The hosts divide it: each may run as
// many of the tenant's requests as its grant, and the grants, all in one record of
// AGENTBUS_SLOT_GRANTS per tenant and agent, add up to the cap at most. A host changes its own
// grant only by compare-and-set of that record, so two hosts never take the same part:
//
//   - it takes a part that no host holds before it runs more (the write first, then the slots);
//   - it gives a part back only once it runs no more than what it keeps (the slots first: they
//     start nothing above what it keeps, then the write of what they do not run, and of the rest
//     as its requests end);
//   - the parts of a host taken for dead (no heartbeat for 2.5 s, its lease over, so that it
//     starts nothing) are free, and whichever host writes next drops them.
//
// Which host should hold how much follows the hosts' wants: each host's load report
// (inspect.LoadEntry.Want) tells how many of the tenant's conversations of the agent it could
// run now. The cap is divided evenly among the hosts that want some, none getting more than it
// wants; the units an even division leaves over go one each to hosts in an order that changes
// every grantRotate, so that with fewer units than hosts each host runs in turn. A host holding
// more than its part gives the excess back only while another host wants more than it holds and
// no unit is free. So the grants change when the tenant's requests move between hosts, not per
// request, and a tenant whose requests all reach one host writes its grant once.
//
// Only capped tenants have records, and only hosts holding their requests write them: a
// deployment without caps pays one idle watch per process (CapWatch, which the hosts of a
// process share).

const (
	// grantsEvery is how often a host looks at its grants, besides when something changed.
	grantsEvery = 100 * time.Millisecond
	// grantLinger is how long a host keeps a grant it no longer uses: a tenant whose requests
	// come one at a time does not write one for each.
	grantLinger = 2 * time.Second
	// grantRotate is how often the order changes in which the units an even division leaves over
	// go to the hosts.
	grantRotate = 2 * time.Second
	// grantVersion is the version of a grant record; a host ignores a record of another version
	// (and writes none over it).
	grantVersion = 1
)

// grantRecord is a record of AGENTBUS_SLOT_GRANTS: by host id, how many of the tenant's requests
// of the agent the host may run at once.
type grantRecord struct {
	V int `json:"v"`
	// Cap is the cap as its last writer knew it, for an operator reading the bucket.
	Cap   int            `json:"cap"`
	Hosts map[string]int `json:"hosts"`
}

// grantState is what a host knows of one tenant's grants of one agent.
type grantState struct {
	rec grantRecord
	// rev is the record's revision, 0 when there is none (never written, or deleted); seen is
	// the newest revision taken in, so that a watch delivering an older one after the host's
	// own write is ignored.
	rev, seen uint64
	// local is how many of the tenant's requests the host's slots may run now: never more than
	// the record grants it.
	local int
	// lowered is the pass in which local was last lowered: a part is written back only in a
	// later pass, once the slots run no more than local.
	lowered uint64
	// used is when the host last held a request of the tenant's of the agent.
	used time.Time
}

// grants is a host's part of the caps across the hosts.
type grants struct {
	h     *Host
	kv    jetstream.KeyValue
	me    string
	board *inspect.LoadBoard
	// looks runs look (start).
	looks *idle.Loop

	mu    sync.Mutex
	pairs map[shareKey]*grantState
	pass  uint64

	// cancel ends the host's subscription to the grants of its agents.
	cancel func()
}

// newGrants returns the host's grants, empty; startGrants starts following them.
func newGrants(h *Host) *grants {
	return &grants{h: h, me: h.cfg.ID, board: h.board, looks: idle.NewLoop(grantsEvery, 0),
		pairs: map[shareKey]*grantState{}}
}

// startGrants starts following the grants of the host's agents (h.caps).
func (h *Host) startGrants() {
	g := h.grants
	g.kv = h.res.SlotGrants
	g.cancel = h.caps.subscribeGrants(h.names, g.apply)
}

// close stops following.
func (g *grants) close() {
	if g.cancel != nil {
		g.cancel()
	}
}

// kick has the grants looked at now.
func (g *grants) kick() { g.looks.Kick() }

// local returns how many of the tenant's requests of the agent the host's slots may run, and
// whether the tenant has a cap across the hosts at all.
func (g *grants) local(k shareKey) (int, bool) {
	if g.h.capOf(k) <= 0 {
		return 0, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if st := g.pairs[k]; st != nil {
		return st.local, true
	}
	return 0, true
}

// apply takes in a record the watch delivered. A grant of this host that shrank (a host that
// took it for dead dropped it) lowers what its slots may run at once.
func (g *grants) apply(e jetstream.KeyValueEntry) {
	tok, tenant, ok := strings.Cut(e.Key(), ".")
	agent, err := subject.ParseToken(tok)
	if !ok || err != nil {
		return
	}
	k := shareKey{tenant, agent}
	g.mu.Lock()
	st := g.state(k)
	if e.Revision() <= st.seen {
		g.mu.Unlock()
		return
	}
	st.seen = e.Revision()
	st.rec, st.rev = grantRecord{V: grantVersion}, 0
	if e.Operation() == jetstream.KeyValuePut {
		var rec grantRecord
		if json.Unmarshal(e.Value(), &rec) != nil || rec.V != grantVersion {
			g.h.log.Warn("ignoring a slot grant record", "key", e.Key())
			rec = grantRecord{V: -1}
		}
		st.rec, st.rev = rec, e.Revision()
	}
	lost := st.local > st.rec.Hosts[g.me]
	if lost {
		st.local = st.rec.Hosts[g.me]
		g.h.log.Warn("a grant of this host was taken back", "tenant", tenant, "agent", agent, "grant", st.local)
	}
	g.mu.Unlock()
	if lost {
		g.h.reshare(func(key shareKey) bool { return key == k })
	}
	g.kick()
}

// state returns the state of k, made when missing. g.mu is held.
func (g *grants) state(k shareKey) *grantState {
	st := g.pairs[k]
	if st == nil {
		st = &grantState{rec: grantRecord{V: grantVersion}}
		g.pairs[k] = st
	}
	return st
}

// start looks at the grants every grantsEvery, and when kicked, with ctx, until stop.
//
// While it holds no grant and its slots hold no capped tenant's request it rests: a capped
// tenant's first request kicks it (shareOf), as does a change of a record or of a tenant's
// limits.
func (g *grants) start(ctx context.Context) {
	g.looks.Start(grantsEvery, func() bool { return !g.look(ctx) })
}

// stop stops looking and gives the host's grants back; call it after start's ctx ended.
func (g *grants) stop() {
	g.looks.Stop()
	g.giveAllBack()
}

// demand is what the host's slots hold of a capped tenant's requests of an agent.
type demand struct{ want, out int }

// grantWrite is a change of a record this host makes: its grant from was to to.
type grantWrite struct {
	k        shareKey
	rev      uint64
	rec      grantRecord
	from, to int
}

// look compares each capped tenant's grant of this host with what it should hold, and writes
// the changes; it reports whether the host holds a grant, or a capped tenant's request, still.
func (g *grants) look(ctx context.Context) (busy bool) {
	now := time.Now()
	demands := g.demands()
	live := func(host string) bool { return host == g.me || g.h.dir.Fresh(host) }

	var writes []grantWrite
	var reshare []shareKey
	g.mu.Lock()
	g.pass++
	if len(demands) == 0 && len(g.pairs) == 0 {
		g.mu.Unlock()
		return false // no capped tenant's requests here, and no grant: nothing to look at
	}
	for k := range demands {
		g.state(k)
	}
	for k, st := range g.pairs {
		w, change := g.plan(k, st, demands[k], live, now)
		if change.lowered {
			reshare = append(reshare, k)
		}
		if w != nil {
			writes = append(writes, *w)
		}
		if change.forget {
			delete(g.pairs, k)
		}
	}
	busy = len(g.pairs) > 0
	g.mu.Unlock()
	if len(reshare) > 0 {
		g.h.reshare(func(k shareKey) bool { return slices.Contains(reshare, k) })
	}
	for _, w := range writes {
		g.write(ctx, w)
	}
	return busy
}

// demands reads, under the host's lock, what the slots hold of each capped tenant's requests:
// the conversations that could run (waiting or running) and the requests running.
func (g *grants) demands() map[shareKey]demand {
	out := map[shareKey]demand{}
	g.h.mu.Lock()
	defer g.h.mu.Unlock()
	seen := map[*slots]bool{}
	for _, s := range g.h.slots {
		if seen[s] {
			continue
		}
		seen[s] = true
		s.ready.Range(func(k shareKey, waiting, n int) bool {
			if g.h.capOf(k) > 0 {
				out[k] = demand{want: waiting + n, out: n}
			}
			return true
		})
	}
	return out
}

// planned is what plan changed besides a write.
type planned struct {
	lowered bool // local was lowered: the slots' shares are read anew
	forget  bool // the state is no longer needed
}

// plan decides what this host's grant of k should be and returns the write that makes it so,
// nil when none is needed. g.mu is held.
func (g *grants) plan(k shareKey, st *grantState, d demand, live func(host string) bool, now time.Time) (*grantWrite, planned) {
	var p planned
	if st.rec.V != grantVersion {
		return nil, p // a record of another release: left alone
	}
	if d.want > 0 || d.out > 0 {
		st.used = now
	}
	mine := st.rec.Hosts[g.me]
	n := g.h.capOf(k)
	if n <= 0 { // no cap any more: the grant goes back
		if mine > 0 {
			return g.change(k, st, live, n, 0), p
		}
		p.forget = st.rev == 0 && d.out == 0
		return nil, p
	}

	// The hosts' wants: this host's, those the live hosts reported, and for a live host that
	// holds a grant but reported nothing, what it holds.
	wants := map[string]int{g.me: min(d.want, n)}
	for host, w := range g.board.Wants(inspect.Pair{Tenant: k.tenant, Agent: k.agent}, g.me, now) {
		if live(host) {
			wants[host] = min(w, n)
		}
	}
	held, free := 0, n
	for host, gr := range st.rec.Hosts {
		if host != g.me && !live(host) {
			continue // taken for dead: its part is free
		}
		held += gr
		if _, ok := wants[host]; !ok {
			wants[host] = gr
		}
	}
	free -= held
	target := divide(n, wants, k.tenant+"\x00"+k.agent, now.Unix()/int64(grantRotate/time.Second))

	// lower gives back what this host holds above to: its slots first, and the write in a later
	// pass, of all that they do not run. Requests running above to keep their units until they
	// end (the slots start none above to meanwhile), but the units no request runs on go back at
	// once: a host running 2 of the 3 units it holds, in requests that wait for something, gives
	// the third back now rather than when the 2 end.
	lower := func(to int) *grantWrite {
		if st.local > to {
			st.local, st.lowered, p.lowered = to, g.pass, true
			return nil
		}
		if keep := max(to, d.out); st.lowered < g.pass && keep < mine {
			return g.change(k, st, live, n, keep)
		}
		return nil
	}
	switch {
	case wants[g.me] > mine && target[g.me] > mine:
		if free > 0 {
			return g.change(k, st, live, n, mine+min(target[g.me]-mine, free)), p
		}
		g.h.reportSoon() // the others give back what this host wants once they hear of it
	case mine > target[g.me]:
		deficit := 0
		for host, w := range wants {
			if host != g.me {
				deficit += max(0, min(target[host], w)-st.rec.Hosts[host])
			}
		}
		if deficit > max(free, 0) {
			return lower(mine - min(mine-target[g.me], deficit-max(free, 0))), p
		}
	case d.want == 0 && d.out == 0 && mine > 0 && now.Sub(st.used) >= grantLinger:
		return lower(0), p
	}
	if st.local < mine && st.lowered < g.pass {
		st.local, p.lowered = mine, true // a grant held and not being given back: used in full
	}
	return nil, p
}

// change returns the write that sets this host's grant of k to to, dropping the grants of hosts
// taken for dead. g.mu is held.
func (g *grants) change(k shareKey, st *grantState, live func(host string) bool, n, to int) *grantWrite {
	rec := grantRecord{V: grantVersion, Cap: n, Hosts: map[string]int{}}
	for host, gr := range st.rec.Hosts {
		if live(host) && host != g.me && gr > 0 {
			rec.Hosts[host] = gr
		}
	}
	if to > 0 {
		rec.Hosts[g.me] = to
	}
	return &grantWrite{k: k, rev: st.rev, rec: rec, from: st.rec.Hosts[g.me], to: to}
}

// write makes a change by compare-and-set; a write that another host's beat is looked at
// again in the next pass, with the record as it is now.
func (g *grants) write(ctx context.Context, w grantWrite) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	key := subject.SlotGrantKey(w.k.tenant, w.k.agent)
	var rev uint64
	var err error
	switch {
	case len(w.rec.Hosts) == 0 && w.rev == 0:
	case len(w.rec.Hosts) == 0:
		err = g.kv.Delete(ctx, key, jetstream.LastRevision(w.rev))
	default:
		b, _ := json.Marshal(w.rec)
		if w.rev == 0 {
			rev, err = g.kv.Create(ctx, key, b)
		} else {
			rev, err = g.kv.Update(ctx, key, b, w.rev)
		}
	}
	if err != nil {
		if !bus.IsConflict(err) && !errors.Is(err, context.Canceled) {
			g.h.log.Warn("writing a slot grant", "tenant", w.k.tenant, "agent", w.k.agent, "err", err)
		}
		g.reread(ctx, w.k)
		return
	}
	raised := w.to > w.from
	g.mu.Lock()
	st := g.state(w.k)
	if rev == 0 || rev > st.seen {
		st.rec, st.rev = w.rec, rev
		st.seen = max(st.seen, rev)
		if raised {
			st.local = w.to
		}
	}
	g.mu.Unlock()
	if raised {
		g.h.reshare(func(k shareKey) bool { return k == w.k })
	}
}

// reread reads k's record from the bucket after a write that failed, so that the next pass
// starts from it rather than from the watch, which may be behind.
func (g *grants) reread(ctx context.Context, k shareKey) {
	e, err := g.kv.Get(ctx, subject.SlotGrantKey(k.tenant, k.agent))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		g.mu.Lock()
		if st := g.state(k); st.local == 0 {
			st.rec, st.rev = grantRecord{V: grantVersion}, 0
		}
		g.mu.Unlock()
	case err == nil:
		g.apply(e)
	}
	g.kick()
}

// giveAllBack gives every grant of this host back, once its handlers are done: the stop hands
// its requests over, and the hosts that get them get the parts too. A grant it cannot give back
// is dropped by the others once its heartbeat is gone.
func (g *grants) giveAllBack() {
	if !g.h.cfg.Conn.IsConnected() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	live := g.h.dir.Fresh
	var writes []grantWrite
	g.mu.Lock()
	for k, st := range g.pairs {
		if st.rec.V == grantVersion && st.rec.Hosts[g.me] > 0 {
			st.local = 0
			writes = append(writes, *g.change(k, st, live, st.rec.Cap, 0))
		}
	}
	g.mu.Unlock()
	for _, w := range writes {
		g.write(ctx, w)
	}
}

// divide divides n units among the hosts that want some, none getting more than it wants: an
// even part each, then the units left over one each, in an order of the hosts that seed and
// epoch make (the same on every host for the same seed and epoch).
func divide(n int, wants map[string]int, seed string, epoch int64) map[string]int {
	type want struct {
		host  string
		w     int
		order uint64
	}
	var active []want
	for host, w := range wants {
		if w > 0 {
			h := fnv.New64a()
			_, _ = h.Write([]byte(seed + "\x00" + host + "\x00" + strconv.FormatInt(epoch, 10)))
			active = append(active, want{host, w, h.Sum64()})
		}
	}
	slices.SortFunc(active, func(a, b want) int { return cmp.Or(cmp.Compare(a.order, b.order), cmp.Compare(a.host, b.host)) })
	out := make(map[string]int, len(wants))
	left := n
	for left > 0 && len(active) > 0 {
		each := left / len(active)
		if each == 0 {
			for _, a := range active[:left] {
				out[a.host]++
			}
			break
		}
		next := active[:0]
		for _, a := range active {
			give := min(each, a.w-out[a.host])
			out[a.host] += give
			left -= give
			if out[a.host] < a.w {
				next = append(next, a)
			}
		}
		active = next
	}
	return out
}
