package ingress

import (
	"cmp"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/timefmt"
	"github.com/agentbus/agentbus/pkg/window"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// Calls counted in the window: the webhook, send (with wait and without) and converse calls
// that name a registered agent, once their tenant is known, and each MCP tool call (mcp.go). Each counts once, when its answer
// is finished, with the latency the caller saw (from the request's arrival to the handler's
// return, as agentbus_http_request_duration_seconds) and its status: 5xx an error, 4xx a client
// error. A streamed call counts with the status of its error event when it ends with one.

// checkAgent is checkTarget for a call that names an agent: unless the agent is unknown to the
// tenant, the call is counted in the window under the agent's name, whatever it is answered.
// Agent names come from the registry, so the window's keys stay bounded.
func (s *Server) checkAgent(r *http.Request, wf ident.Workflow, kind agentbusv1.Kind, method string, keep bool) *problem.Problem {
	p := s.checkTarget(r.Context(), wf, kind, method, keep)
	if countsUnderAgent(p) {
		if st, ok := stateOf(r); ok {
			st.agent = wf.Agent
		}
	}
	return p
}

// countsUnderAgent reports whether a call whose target check answered p counts in the window
// under its agent: unless the agent is unknown to the tenant.
func countsUnderAgent(p *problem.Problem) bool {
	return p == nil || p.Slug != problem.UnknownAgent.Slug
}

// noteStatus sets the status r counts with in the window, when it is not the HTTP status: an
// event stream answered 200 that ended with an error event.
func noteStatus(r *http.Request, status int) {
	if st, ok := stateOf(r); ok {
		st.status = status
	}
}

// observeCall counts a finished call in the window, if it named an agent; end is when it was
// answered and elapsed how long that took.
func (m *apiMetrics) observeCall(st *requestState, status int, end time.Time, elapsed time.Duration) {
	if st.agent == "" || m.window == nil {
		return
	}
	if st.status != 0 {
		status = st.status
	}
	m.window.Observe(window.Key{Tenant: st.tenant, Agent: st.agent}, end, elapsed, window.OutcomeOf(status))
}

// statsTenants is how many tenants, the busiest, the system-wide stats name; the others are
// added up as otherTenants, as the tenant label of the metrics is capped.
const statsTenants = metricTenants

// statsCounts are the counts of a slot or of a whole window.
type statsCounts struct {
	Requests     uint64 `json:"requests"`
	Errors       uint64 `json:"errors"`
	ClientErrors uint64 `json:"clientErrors"`
	// P50Ms and P99Ms are latency quantiles in milliseconds, left out when there was no request.
	P50Ms *float64 `json:"p50Ms,omitempty"`
	P99Ms *float64 `json:"p99Ms,omitempty"`
}

// slotStats are the counts of one slot, from Start for the stats' slotSeconds.
type slotStats struct {
	Start timefmt.Time `json:"start"`
	statsCounts
}

// agentStats are the counts of one agent (of one tenant, or of the other tenants together).
type agentStats struct {
	Agent  string      `json:"agent"`
	Totals statsCounts `json:"totals"`
	Slots  []slotStats `json:"slots"`
}

// statsHeader is what every stats answer starts with.
type statsHeader struct {
	WindowSeconds int `json:"windowSeconds"`
	SlotSeconds   int `json:"slotSeconds"`
	// From is the start of the oldest slot, To the time of the answer: the last slot is the
	// current one, still filling.
	From      timefmt.Time `json:"from"`
	To        timefmt.Time `json:"to"`
	Ingresses gathered     `json:"ingresses"`
	// OverCap is set when an ingress instance that answered did not count the calls of some
	// agent within the window, because it held as many agents as it keeps.
	OverCap bool `json:"overCap,omitempty"`
}

// tenantStatsAnswer is the answer of GET /api/v1/admin/tenants/{tenantId}/stats.
type tenantStatsAnswer struct {
	Tenant string `json:"tenant"`
	statsHeader
	Totals statsCounts  `json:"totals"`
	Agents []agentStats `json:"agents"`
}

// tenantStats are one tenant's counts in the system-wide stats.
type tenantStats struct {
	Tenant string       `json:"tenant"`
	Totals statsCounts  `json:"totals"`
	Agents []agentStats `json:"agents"`
}

// otherTenantStats are the counts of the tenants past the busiest statsTenants, added up per
// agent.
type otherTenantStats struct {
	Tenants int          `json:"tenants"`
	Totals  statsCounts  `json:"totals"`
	Agents  []agentStats `json:"agents"`
}

// systemStatsAnswer is the answer of GET /api/v1/admin/stats.
type systemStatsAnswer struct {
	statsHeader
	Totals       statsCounts       `json:"totals"`
	Tenants      []tenantStats     `json:"tenants"`
	OtherTenants *otherTenantStats `json:"otherTenants,omitempty"`
}

// tenantStats serves GET /api/v1/admin/tenants/{tenantId}/stats?window=15m: per agent of the
// tenant, the counts of each slot of the window and their totals, merged over every ingress
// instance that answered in time.
func (s *Server) tenantStats(w http.ResponseWriter, r *http.Request) {
	c, ok := s.identifyAdmin(w, r, adminAccess)
	if !ok {
		return
	}
	v, ok := s.statsView(w, r, c.tenant)
	if !ok {
		return
	}
	ans := tenantStatsAnswer{Tenant: c.tenant, statsHeader: v.header, Agents: []agentStats{}}
	var all window.Slot
	for _, sr := range v.snap.Series {
		if len(v.trim(sr.Slots)) == 0 {
			continue
		}
		a, total := v.agent(sr.Agent, sr.Slots)
		ans.Agents = append(ans.Agents, a)
		all.Add(&total)
	}
	ans.Totals = countsOf(&all)
	writeJSON(w, http.StatusOK, ans)
}

// systemStats serves GET /api/v1/admin/stats?window=15m to system admins: the tenant stats of
// the busiest statsTenants tenants, busiest first, and the others' added up per agent.
func (s *Server) systemStats(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.identifyAdmin(w, r, systemAccess); !ok {
		return
	}
	v, ok := s.statsView(w, r, "")
	if !ok {
		return
	}
	type tenantSeries struct {
		tenant   string
		series   []window.Series
		requests uint64
	}
	var tenants []*tenantSeries
	for _, sr := range v.snap.Series {
		if len(v.trim(sr.Slots)) == 0 {
			continue
		}
		if len(tenants) == 0 || tenants[len(tenants)-1].tenant != sr.Tenant {
			tenants = append(tenants, &tenantSeries{tenant: sr.Tenant})
		}
		t := tenants[len(tenants)-1]
		t.series = append(t.series, sr)
		for _, sl := range v.trim(sr.Slots) {
			t.requests += sl.Requests()
		}
	}
	slices.SortStableFunc(tenants, func(a, b *tenantSeries) int { return cmp.Compare(b.requests, a.requests) })

	ans := systemStatsAnswer{statsHeader: v.header, Tenants: []tenantStats{}}
	var all window.Slot
	others := map[string][]window.Slot{}
	for i, t := range tenants {
		if i >= statsTenants {
			for _, sr := range t.series {
				others[sr.Agent] = window.MergeSlots(others[sr.Agent], v.trim(sr.Slots))
			}
			continue
		}
		ts := tenantStats{Tenant: t.tenant, Agents: []agentStats{}}
		var tenantTotal window.Slot
		for _, sr := range t.series {
			a, total := v.agent(sr.Agent, sr.Slots)
			ts.Agents = append(ts.Agents, a)
			tenantTotal.Add(&total)
		}
		ts.Totals = countsOf(&tenantTotal)
		all.Add(&tenantTotal)
		ans.Tenants = append(ans.Tenants, ts)
	}
	if len(tenants) > statsTenants {
		o := &otherTenantStats{Tenants: len(tenants) - statsTenants, Agents: []agentStats{}}
		var otherTotal window.Slot
		for _, agent := range slices.Sorted(maps.Keys(others)) {
			a, total := v.agent(agent, others[agent])
			o.Agents = append(o.Agents, a)
			otherTotal.Add(&total)
		}
		o.Totals = countsOf(&otherTotal)
		all.Add(&otherTotal)
		ans.OtherTenants = o
	}
	ans.Totals = countsOf(&all)
	writeJSON(w, http.StatusOK, ans)
}

// statsView is a gathered snapshot and the window of slots a stats answer shows.
type statsView struct {
	snap   window.Snapshot
	header statsHeader
	// first and last are the indexes of the slots shown.
	first, last int64
}

// statsView reads the window query parameter and gathers the snapshot of tenant's keys (all
// when empty). On failure it has written the problem and returns false.
func (s *Server) statsView(w http.ResponseWriter, r *http.Request, tenant string) (statsView, bool) {
	cfg := s.stats.window.Config()
	query, p := readQuery(r)
	slots := cfg.Slots
	if p == nil && query.Has("window") {
		slots, p = windowSlots(query.Get("window"), cfg)
	}
	if p != nil {
		problem.Write(w, *p)
		return statsView{}, false
	}
	snap, got, now, err := s.stats.gather(r.Context(), tenant)
	if err != nil {
		if r.Context().Err() == nil {
			s.log.Error("gathering stats", "err", err)
		}
		problem.BusUnavailable.Write(w, "the stats of the ingress instances could not be gathered; try again")
		return statsView{}, false
	}
	slotMs := snap.SlotMs
	last := now.UnixMilli() / slotMs
	v := statsView{snap: snap, first: last - int64(slots) + 1, last: last}
	v.header = statsHeader{
		WindowSeconds: int(int64(slots) * slotMs / 1000), SlotSeconds: int(slotMs / 1000),
		From: timefmt.Of(time.UnixMilli(v.first * slotMs)), To: timefmt.Of(now),
		Ingresses: got, OverCap: snap.Dropped,
	}
	return v, true
}

// windowSlots is the number of slots the window parameter asks for: a duration from one slot to
// the whole window (15m), rounded up to whole slots.
func windowSlots(param string, cfg window.Config) (int, *problem.Problem) {
	d, err := time.ParseDuration(strings.TrimSpace(param))
	most := time.Duration(cfg.Slots) * cfg.Slot
	if err != nil || d <= 0 || d > most {
		return 0, problem.InvalidParameter.New("window must be a duration up to " + shortDuration(most) + ", such as 5m or " + shortDuration(most))
	}
	return int((d + cfg.Slot - 1) / cfg.Slot), nil
}

// shortDuration writes 15m0s as 15m.
func shortDuration(d time.Duration) string {
	s := d.String()
	s, _ = strings.CutSuffix(s, "m0s")
	if s != d.String() {
		s += "m"
	}
	return s
}

// trim returns the slots of the view's window.
func (v *statsView) trim(slots []window.Slot) []window.Slot {
	i := slices.IndexFunc(slots, func(sl window.Slot) bool { return sl.Index >= v.first })
	if i < 0 {
		return nil
	}
	j := slices.IndexFunc(slots, func(sl window.Slot) bool { return sl.Index > v.last })
	if j < 0 {
		j = len(slots)
	}
	return slots[i:j]
}

// agent is the stats of one agent's slots: every slot of the window, those without calls
// included, and their total.
func (v *statsView) agent(name string, slots []window.Slot) (agentStats, window.Slot) {
	slots = v.trim(slots)
	a := agentStats{Agent: name, Slots: make([]slotStats, 0, v.last-v.first+1)}
	var total window.Slot
	for idx := v.first; idx <= v.last; idx++ {
		sl := window.Slot{Index: idx}
		if len(slots) > 0 && slots[0].Index == idx {
			sl, slots = slots[0], slots[1:]
		}
		total.Add(&sl)
		a.Slots = append(a.Slots, slotStats{Start: timefmt.Of(sl.Start(v.snap.SlotMs)), statsCounts: countsOf(&sl)})
	}
	a.Totals = countsOf(&total)
	return a, total
}

// countsOf is the counts of sl, with its quantiles.
func countsOf(sl *window.Slot) statsCounts {
	c := statsCounts{Requests: sl.Requests(), Errors: sl.Errors, ClientErrors: sl.ClientErrors}
	if d, ok := sl.Latency.Quantile(0.5); ok {
		c.P50Ms = millis(d)
	}
	if d, ok := sl.Latency.Quantile(0.99); ok {
		c.P99Ms = millis(d)
	}
	return c
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) *float64 {
	ms := math.Round(float64(d)/1e3) / 1e3
	return &ms
}
