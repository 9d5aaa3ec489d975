package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
)

// allocSites are where a measured window's heap allocations were made, from the runtime's
// sampled allocation profile (runtime.MemProfile, one sample per runtime.MemProfileRate bytes
// on average), scaled up as pprof scales it. The profile is as of the last completed garbage
// collection: the window's figures start at the collection before it (the end of the warm-up,
// the same load) and end at one forced after it.
type allocSites struct {
	site  map[string]float64 // innermost function outside the runtime: allocations
	owner map[string]float64 // whose code asked for them (see owner): allocations
	total float64
}

// allocHook returns an OnMeasure hook that records the window's allocation sites into dst, and
// calls next's hook (when next is not nil) inside it.
func allocHook(dst *allocSites, next func() func()) func() func() {
	return func() func() {
		before := memProfile()
		endNext := func() {}
		if next != nil {
			endNext = next()
		}
		return func() {
			endNext()
			runtime.GC() // publish the window's allocations to the profile
			*dst = diffSites(before, memProfile())
		}
	}
}

// memProfile reads the allocation profile: allocations by stack, scaled.
func memProfile() map[[32]uintptr]float64 {
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, true)
	for {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, true); ok {
			recs = recs[:n]
			break
		}
	}
	rate := float64(runtime.MemProfileRate)
	out := make(map[[32]uintptr]float64, len(recs))
	for _, r := range recs {
		if r.AllocObjects == 0 {
			continue
		}
		// pprof's scaling: a sample stands for 1/(1-e^(-size/rate)) allocations of its size.
		objs := float64(r.AllocObjects)
		if rate > 0 {
			size := float64(r.AllocBytes) / objs
			objs /= 1 - math.Exp(-size/rate)
		}
		out[r.Stack0] += objs
	}
	return out
}

// diffSites is what was allocated between two profiles.
func diffSites(before, after map[[32]uintptr]float64) allocSites {
	d := allocSites{site: map[string]float64{}, owner: map[string]float64{}}
	for stack, allocs := range after {
		n := allocs - before[stack]
		if n <= 0 {
			continue
		}
		site, owner := attribute((&runtime.MemProfileRecord{Stack0: stack}).Stack())
		d.site[site] += n
		d.owner[owner] += n
		d.total += n
	}
	return d
}

// attribute names an allocation's site, the innermost function outside the runtime, and its
// owner: the innermost code outside Go's standard library on its stack, named by module (the load
// generator for this command's own code), or the standard library when there is none (net/http
// reading a request before any handler runs).
func attribute(stack []uintptr) (site, owner string) {
	frames := runtime.CallersFrames(stack)
	for {
		f, more := frames.Next()
		fn := f.Function
		if site == "" && fn != "" && !strings.HasPrefix(fn, "runtime.") && !strings.HasPrefix(fn, "internal/") {
			site = fn
		}
		if site != "" {
			if o := ownerOf(fn); o != "" {
				return site, o
			}
		}
		if !more {
			break
		}
	}
	if site == "" {
		site = "runtime"
	}
	return site, "Go standard library"
}

// owners maps function name prefixes to who they belong to, checked in order.
var owners = []struct{ prefix, owner string }{
	{"github.com/agentbus/agentbus/", "agentbus"},
	{"main.", "load generator"},
	{"github.com/nats-io/nats-server/", "nats-server"},
	{"github.com/nats-io/nats%2ego", "nats.go"}, // symbol names escape the dots of a path's last element
	{"github.com/nats-io/nats.go/", "nats.go"},
	{"google.golang.org/protobuf/", "protobuf"},
	{"github.com/gorilla/mux", "gorilla/mux"},
	{"github.com/prometheus/", "prometheus"},
}

// ownerOf is the owner of function fn, or "" for the standard library's and the runtime's.
func ownerOf(fn string) string {
	for _, o := range owners {
		if strings.HasPrefix(fn, o.prefix) {
			return o.owner
		}
	}
	// Another module's: its path's first three elements (host, owner, repository).
	parts := strings.SplitN(fn, "/", 4)
	if len(parts) < 2 || !strings.Contains(parts[0], ".") {
		return "" // a standard library package's (no host in its path) or the runtime's
	}
	last := min(len(parts), 3) - 1
	parts[last], _, _ = strings.Cut(parts[last], ".")
	return strings.Join(parts[:last+1], "/")
}

// print writes the n largest sites and the owners' shares, with allocations per call from
// perCall, the window's exact count.
func (a allocSites) print(w io.Writer, n int, perCall float64) {
	if a.total == 0 {
		return
	}
	top := func(m map[string]float64) []string {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(x, y string) int { return cmp.Or(cmp.Compare(m[y], m[x]), strings.Compare(x, y)) })
		return keys
	}
	fmt.Fprintf(w, "allocations of the agentbus phase by whose code asked (share; per call):")
	for _, o := range top(a.owner) {
		fmt.Fprintf(w, " %s %.0f%% (%.0f);", o, 100*a.owner[o]/a.total, perCall*a.owner[o]/a.total)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "top allocation sites (sampled; share, per call):\n")
	for i, s := range top(a.site) {
		if i == n {
			break
		}
		fmt.Fprintf(w, "  %5.1f%% %6.1f  %s\n", 100*a.site[s]/a.total, perCall*a.site[s]/a.total, s)
	}
}
