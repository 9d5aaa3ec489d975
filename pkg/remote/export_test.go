package remote

import "time"

// SetMarkerGrace sets how old a removal marker must be before it is dropped, until the test
// ends.
func SetMarkerGrace(t interface{ Cleanup(func()) }, d time.Duration) {
	old := markerGrace
	markerGrace = d
	t.Cleanup(func() { markerGrace = old })
}
