//go:build !race || !unix

package stacktest

// ClearShadowInPlace makes the race detector clear its shadow of large allocations by writing
// zeros; without the race detector, or off Unix, it does nothing (see shadow_race_unix.go).
func ClearShadowInPlace() {}
