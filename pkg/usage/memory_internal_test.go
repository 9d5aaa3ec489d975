package usage

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/subject"
)

// BenchmarkReaderMemory is what a Reader holds for 10,000 tenants that each stored history,
// files and payloads on every day of the 180 days history is kept: the worst case of the
// counters it follows. It reports the heap it grew by, per tenant and per tenant-day.
func BenchmarkReaderMemory(b *testing.B) {
	const tenants, days = 10_000, 180
	first := time.Now().UTC().AddDate(0, 0, -days+1)
	subjects := make([]string, 0, tenants*days*int(numKinds))
	for t := range tenants {
		for d := range days {
			day := first.AddDate(0, 0, d).Format(subject.UsageDayLayout)
			for k := range numKinds {
				subjects = append(subjects, subject.UsageDay(fmt.Sprintf("tenant-%05d", t), k.String(), day))
			}
		}
	}
	data := []byte(`{"val":"123456"}`)
	var grew uint64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		r := &Reader{cfg: bus.Config{HistoryMaxAge: days * 24 * time.Hour, InboxMaxAge: 7 * 24 * time.Hour}, now: time.Now, tenants: map[string]*tally{}}
		for _, s := range subjects {
			r.apply(s, data)
		}
		for t := range tenants {
			r.Of(fmt.Sprintf("tenant-%05d", t))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		grew = after.HeapAlloc - before.HeapAlloc
		runtime.KeepAlive(r)
	}
	b.ReportMetric(float64(grew)/(1<<20), "MiB")
	b.ReportMetric(float64(grew)/tenants, "B/tenant")
	b.ReportMetric(float64(grew)/(tenants*days), "B/tenant-day")
}
