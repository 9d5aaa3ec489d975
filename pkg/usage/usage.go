// Package usage counts what each tenant keeps in JetStream, for the storage quotas: the bytes of
// its history records, uploaded files, large payloads (claim checks), what is kept of it for an
// operator (dead letters, undelivered events), its workflow instances' records and its timers, and
// its instances. Writers count as they store (Meter): they add up in memory and, once a second,
// publish one increment per tenant, kind and UTC day to a JetStream counter stream, where every
// process of the deployment adds to the same counters. Readers follow the counters (Reader) and sum
// each tenant's days that are still within their kind's retention, so that bytes that aged out of
// the store drop out of the usage with their day. A writer that also reads (Meter.SeenBy) counts
// what it stored as its own (Meter.Pending) until its Reader holds it. It also reads how full the
// JetStream account's storage is (Level).
//
// It refuses nothing itself: the ingress decides what to refuse (docs/limits.md#storage-quotas).
// It is not a billing record: a process that dies loses the counts of its last second.
package usage

import (
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
)

// Kind is a kind of stored bytes, counted apart.
type Kind uint8

// The kinds of stored bytes.
const (
	// History is the conversation history's records (AGENTBUS_MESSAGES).
	History Kind = iota
	// Files is the files of File messages (AGENTBUS_FILES).
	Files
	// Payloads is the requests and replies too large for one message (claim checks,
	// AGENTBUS_CLAIMS), and the requests waiting for an event with those held behind them
	// (AGENTBUS_WAITS); they are counted while they exist.
	Payloads
	// Kept is the dead letters and undelivered events kept for an operator to look at, send
	// again or throw away (bus.Kept: AGENTBUS_DEADLETTERS, AGENTBUS_UNDELIVERED); they are
	// counted while they exist.
	Kept
	numKinds
)

// kinds is the one table of the kinds: the name each has in counter subjects, the API and
// metrics, and how long the store keeps what it counts.
var kinds = [numKinds]struct {
	name   string
	window func(bus.Config) time.Duration
}{
	History:  {"history", func(c bus.Config) time.Duration { return c.HistoryMaxAge }},
	Files:    {"files", func(c bus.Config) time.Duration { return c.HistoryMaxAge }},
	Payloads: {"payloads", func(c bus.Config) time.Duration { return c.InboxMaxAge }},
	Kept:     {"kept", func(c bus.Config) time.Duration { return c.InboxMaxAge }},
}

// Kinds lists the kinds, in order.
func Kinds() []Kind { return []Kind{History, Files, Payloads, Kept} }

// String is the kind's name: history, files, payloads or kept.
func (k Kind) String() string {
	if k < numKinds {
		return kinds[k].name
	}
	return "unknown"
}

// kindNamed returns the kind of a name String gives.
func kindNamed(name string) (Kind, bool) {
	for k := range numKinds {
		if kinds[k].name == name {
			return k, true
		}
	}
	return 0, false
}

// StateName names the bytes of the instance records where the kinds' names stand (Kind.String):
// in the API, the metrics and the counters' subjects.
const StateName = stateCounter

// TimersName names the bytes of the timers where the kinds' names stand.
const TimersName = timersCounter

// The totals counters, beside the kinds' day counters: what each is named, and the kind a
// counter of each has (past the kinds).
const (
	instancesCounter = "instances"
	stateCounter     = "state"
	timersCounter    = "timers"

	// instancesTotal counts a tenant's workflow instances.
	instancesTotal = numKinds
	// stateTotal counts the bytes of a tenant's instance records as they are now: each write
	// adds what the record takes more, or less, than the revision it replaced.
	stateTotal = numKinds + 1
	// timersTotal counts the bytes of a tenant's timers (their schedules) as they are now.
	timersTotal = numKinds + 2
	// numTotals is the number of totals counters.
	numTotals = 3
)

// totalNames are the totals counters' names, by their kind less numKinds.
var totalNames = [numTotals]string{instancesTotal - numKinds: instancesCounter, stateTotal - numKinds: stateCounter,
	timersTotal - numKinds: timersCounter}

// total is the field of u that the totals counter of kind k (instancesTotal, stateTotal or
// timersTotal) counts.
func (u *Usage) total(k Kind) *int64 {
	switch k {
	case instancesTotal:
		return &u.Instances
	case stateTotal:
		return &u.State
	}
	return &u.Timers
}

// withTotals returns u with the totals counters' values, indexed by kind less numKinds.
func (u Usage) withTotals(totals [numTotals]int64) Usage {
	for i, v := range totals {
		*u.total(numKinds + Kind(i)) = v
	}
	return u
}

// Usage is what one tenant keeps: bytes by kind, within each kind's retention; the bytes of its
// instance records (each instance's state, status and counts) and of its timers, as they are
// now; and its instances.
type Usage struct {
	Bytes     [numKinds]int64
	State     int64
	Timers    int64
	Instances int64
}

// Floored is u as it counts: records and timers stored before their writes were counted count
// from their next write, by what it changed, so State or Timers may fall below 0, which counts
// as 0.
func (u Usage) Floored() Usage {
	u.State, u.Timers = max(u.State, 0), max(u.Timers, 0)
	return u
}

// Total is the bytes of every kind, of the instance records and of the timers together (as
// Floored counts them), what the byte quota bounds.
func (u Usage) Total() int64 {
	u = u.Floored()
	n := u.State + u.Timers
	for _, b := range u.Bytes {
		n += b
	}
	return n
}

// Add adds v's figures to u's.
func (u *Usage) Add(v Usage) {
	for k := range u.Bytes {
		u.Bytes[k] += v.Bytes[k]
	}
	u.State += v.State
	u.Timers += v.Timers
	u.Instances += v.Instances
}

// Quota bounds what one tenant may keep. Zero means no bound.
type Quota struct {
	// Bytes bounds the tenant's bytes stored, every kind together.
	Bytes int64
	// Instances bounds how many workflow instances the tenant has.
	Instances int64
}

// Quotas gives a tenant's quota. It is asked on every request that stores something, so it
// answers from memory, and it may answer differently from one call to the next (a per-tenant
// setting changed at runtime).
type Quotas func(tenant string) Quota

// Fixed is the Quotas that gives every tenant q.
func Fixed(q Quota) Quotas { return func(string) Quota { return q } }

// Report is a tenant's usage as the API answers it
// (GET /api/v1/admin/tenants/{tenantId}/usage, docs/admin.md#storage-usage).
type Report struct {
	Tenant string      `json:"tenant"`
	Bytes  ReportBytes `json:"bytes"`
	// Instances is how many workflow instances the tenant has.
	Instances int64       `json:"instances"`
	Quota     ReportQuota `json:"quota"`
}

// ReportBytes are a tenant's bytes stored, by kind and in all.
type ReportBytes struct {
	History  int64 `json:"history"`
	Files    int64 `json:"files"`
	Payloads int64 `json:"payloads"`
	Kept     int64 `json:"kept"`
	State    int64 `json:"state"`
	Timers   int64 `json:"timers"`
	Total    int64 `json:"total"`
}

// ReportQuota is a tenant's quota; 0 means no bound.
type ReportQuota struct {
	Bytes     int64 `json:"bytes"`
	Instances int64 `json:"instances"`
}

// NewReport is the report of tenant's usage u under quota q.
func NewReport(tenant string, u Usage, q Quota) Report {
	u = u.Floored()
	return Report{
		Tenant: tenant,
		Bytes: ReportBytes{
			History: u.Bytes[History], Files: u.Bytes[Files], Payloads: u.Bytes[Payloads], Kept: u.Bytes[Kept],
			State: u.State, Timers: u.Timers, Total: u.Total(),
		},
		Instances: u.Instances,
		Quota:     ReportQuota{Bytes: q.Bytes, Instances: q.Instances},
	}
}

// dayOf is the UTC day of t, counted from the Unix epoch.
func dayOf(t time.Time) int32 {
	s := t.Unix()
	d := s / secondsPerDay
	if s < 0 && s%secondsPerDay != 0 {
		d--
	}
	return int32(d)
}

const secondsPerDay = 24 * 60 * 60

// dayStart is when day d begins.
func dayStart(d int32) time.Time { return time.Unix(int64(d)*secondsPerDay, 0).UTC() }
