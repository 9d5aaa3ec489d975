package usage_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
	"github.com/agentbus/agentbus/pkg/usage"
)

// BenchmarkMeterAdd is what counting a stored record costs its writer (a history append).
func BenchmarkMeterAdd(b *testing.B) {
	res := natstest.Bus(b, bus.Config{})
	m, err := usage.NewMeter(res.JS.Conn(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		m.Add("acme", usage.History, 1200)
	}
}

// BenchmarkUsageOf is what reading a tenant's usage costs the ingress on a request that stores:
// the counters of a tenant with 180 days of every kind, and another process's pending counts.
func BenchmarkUsageOf(b *testing.B) {
	res := natstest.Bus(b, bus.Config{})
	m, err := usage.NewMeter(res.JS.Conn(), nil)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	for d := range 180 {
		for _, k := range usage.Kinds() {
			m.AddAt("acme", k, 1000, now.Add(-time.Duration(d)*24*time.Hour))
		}
	}
	for i := range 1000 {
		m.AddAt("t"+strconv.Itoa(i), usage.History, 1000, now)
	}
	ctx := b.Context()
	if err := m.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	r, err := usage.Watch(ctx, res.JS, res.Config, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	b.ReportAllocs()
	for b.Loop() {
		u := r.Of("acme")
		u.Add(m.Pending("acme"))
	}
}
