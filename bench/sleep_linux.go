package main

import (
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// sleep waits for about d with microsecond precision, on a timerfd that the runtime's network
// poller watches: the goroutine parks and its P runs other work meanwhile. The runtime's own
// timers are only as precise as the poller's millisecond timeout when the process is otherwise
// idle, and nanosleep(2) blocks a thread that holds a P until the scheduler's monitor takes it
// away, which at thousands of sleeps a second cost the open loop about a third of the machine.
// Without a timerfd it falls back to the runtime's timers.
func sleep(d time.Duration) {
	t := timerFD()
	if t == nil {
		time.Sleep(d)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(max(d.Nanoseconds(), 1))}
	if err := unix.TimerfdSettime(t.fd, 0, &spec, nil); err != nil {
		time.Sleep(d)
		return
	}
	var buf [8]byte
	_, _ = t.f.Read(buf[:]) // the number of expirations; blocks in the poller until the first
}

type timerFile struct {
	mu sync.Mutex
	fd int      // for timerfd_settime: os.File.Fd would make the descriptor blocking
	f  *os.File // for reads through the poller
}

// timerFD is the process's one timerfd, nil where it cannot be made.
var timerFD = sync.OnceValue(func() *timerFile {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil
	}
	// A non-blocking descriptor is registered with the poller: reads park the goroutine.
	return &timerFile{fd: fd, f: os.NewFile(uintptr(fd), "timerfd")}
})
