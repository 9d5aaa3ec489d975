package window

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Snapshot is what a window held at one moment, in a form that travels (JSON) and merges with
// the snapshots of other processes.
type Snapshot struct {
	// SlotMs is the width of a slot in milliseconds; snapshots merge only with equal widths.
	SlotMs int64 `json:"slotMs"`
	// Series holds the keys with observations, by tenant and agent.
	Series []Series `json:"series"`
	// Dropped is set when observations of keys over the window's MaxKeys were not kept within
	// the window.
	Dropped bool `json:"dropped,omitempty"`
}

// Series is the slots of one key that hold observations, by index.
type Series struct {
	Tenant string `json:"tenant"`
	Agent  string `json:"agent"`
	Slots  []Slot `json:"slots"`
}

// Slot is the counts of one time slot. Its requests are Latency.Count().
type Slot struct {
	// Index is the slot's number: its start is Index × SlotMs milliseconds after the Unix epoch.
	Index        int64     `json:"index"`
	Errors       uint64    `json:"errors,omitempty"`
	ClientErrors uint64    `json:"clientErrors,omitempty"`
	Latency      Histogram `json:"latency"`
}

// Requests returns the requests the slot counted.
func (s *Slot) Requests() uint64 { return s.Latency.Count() }

// Add adds o's counts to s.
func (s *Slot) Add(o *Slot) {
	s.Errors += o.Errors
	s.ClientErrors += o.ClientErrors
	s.Latency.Add(&o.Latency)
}

// Start returns the time the slot begins, given the snapshot's slot width.
func (s *Slot) Start(slotMs int64) time.Time { return time.UnixMilli(s.Index * slotMs).UTC() }

// Merge adds o's counts to s: the slots of equal key and index add up, as they would had all
// the observations been made in one window.
func (s *Snapshot) Merge(o Snapshot) error {
	if s.SlotMs == 0 {
		s.SlotMs = o.SlotMs
	}
	if o.SlotMs != s.SlotMs {
		return fmt.Errorf("window: cannot merge slots of %d ms into slots of %d ms", o.SlotMs, s.SlotMs)
	}
	s.Dropped = s.Dropped || o.Dropped
	if len(o.Series) == 0 {
		if s.Series == nil {
			s.Series = []Series{}
		}
		return nil
	}
	byKey := make(map[Key]int, len(s.Series))
	for i, sr := range s.Series {
		byKey[Key{sr.Tenant, sr.Agent}] = i
	}
	for _, sr := range o.Series {
		slots := slices.Clone(sr.Slots)
		slices.SortFunc(slots, func(a, b Slot) int { return cmp.Compare(a.Index, b.Index) })
		i, ok := byKey[Key{sr.Tenant, sr.Agent}]
		if !ok {
			s.Series = append(s.Series, Series{Tenant: sr.Tenant, Agent: sr.Agent, Slots: slots})
			byKey[Key{sr.Tenant, sr.Agent}] = len(s.Series) - 1
			continue
		}
		s.Series[i].Slots = MergeSlots(s.Series[i].Slots, slots)
	}
	s.sort()
	return nil
}

// MergeSlots merges two lists of slots sorted by index into a new one: slots of equal index add
// up.
func MergeSlots(a, b []Slot) []Slot {
	out := make([]Slot, 0, max(len(a), len(b)))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i].Index < b[j].Index):
			out = append(out, a[i])
			i++
		case i == len(a) || b[j].Index < a[i].Index:
			out = append(out, b[j])
			j++
		default:
			sl := a[i]
			sl.Add(&b[j])
			out = append(out, sl)
			i++
			j++
		}
	}
	return out
}

// sort orders the series by tenant and agent, and each series' slots by index.
func (s *Snapshot) sort() {
	slices.SortFunc(s.Series, func(a, b Series) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Agent, b.Agent))
	})
	for _, sr := range s.Series {
		slices.SortFunc(sr.Slots, func(a, b Slot) int { return cmp.Compare(a.Index, b.Index) })
	}
}
