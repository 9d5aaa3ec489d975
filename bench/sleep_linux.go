package main

import (
	"syscall"
	"time"
)

// sleep blocks the calling thread in nanosleep(2) for about d, with microsecond rather than the
// runtime timers' millisecond precision when the process is otherwise idle. A signal may end it
// early.
func sleep(d time.Duration) {
	ts := syscall.NsecToTimespec(d.Nanoseconds())
	_ = syscall.Nanosleep(&ts, nil)
}
