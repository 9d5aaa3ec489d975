//go:build race && unix

package stacktest

import (
	"os"
	"slices"
	"strings"
	"syscall"
)

// shadowSetting is the race detector's setting ClearShadowInPlace adds to GORACE, with the value
// shadowValue: every allocation's shadow up to 1 GiB is cleared by writing zeros.
const shadowSetting, shadowValue = "clear_shadow_mmap_threshold", "1073741824"

// ClearShadowInPlace makes the race detector clear its shadow of each allocation and each
// freed object by writing zeros, as it does up to 64 KiB by default, instead of mapping fresh
// zero pages over it, each of which then faults when first written, with an interrupt that
// flushes the other CPUs' TLBs. That pays in a test binary that fills large buffers (request
// and answer bodies of megabytes) and costs one that allocates large buffers it fills in part:
// call it first in the TestMain of the former (docs/development.md). The detector reads its
// settings when the process starts, so the binary executes itself again, in the same process,
// with the setting added to GORACE; it does nothing when GORACE names the setting already, and
// in a binary built without the race detector.
func ClearShadowInPlace() {
	gorace := os.Getenv("GORACE")
	if strings.Contains(gorace, shadowSetting) {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GORACE=") })
	env = append(env, "GORACE="+strings.TrimSpace(gorace+" "+shadowSetting+"="+shadowValue))
	// Exec returns only when it fails; the tests then run with the default.
	_ = syscall.Exec(exe, os.Args, env)
}
