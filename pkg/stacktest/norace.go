//go:build !race

package stacktest

// raceDetector is true in a binary built with the race detector (go test -race).
const raceDetector = false
