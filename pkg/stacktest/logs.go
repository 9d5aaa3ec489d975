package stacktest

import (
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
)

// keptLines is how many of a test's last log lines of level Info and above Logger keeps for
// the test's log should it fail.
const keptLines = 400

// Logger returns the logger of t's stacks, hosts and ingresses. It keeps the last keptLines
// lines of level Info and above (starts, stops, retries, warnings), shared by every logger of
// t, and writes them to t's log when t fails: a failure that does not come again can still be
// read (Logged searches them). Lines logged after t ended are dropped. With AGENTBUS_TEST_LOG set
// it also writes everything (Debug and above) to stderr at once.
func Logger(t testing.TB) *slog.Logger {
	v, loaded := tails.LoadOrStore(t, &tail{})
	lt := v.(*tail)
	if !loaded {
		t.Cleanup(func() {
			tails.Delete(t)
			if t.Failed() {
				if lines, dropped := lt.lines(); len(lines) > 0 {
					t.Logf("the test's last %d log lines (Info and above; %d before them not kept):\n%s", len(lines), dropped, strings.Join(lines, ""))
				}
			}
		})
	}
	kept := slog.NewTextHandler(lt, &slog.HandlerOptions{Level: slog.LevelInfo})
	if os.Getenv("AGENTBUS_TEST_LOG") != "" {
		return slog.New(slog.NewMultiHandler(kept, slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})))
	}
	return slog.New(kept)
}

// Logged reports whether a line of t's logs that Logger keeps contains s.
func Logged(t testing.TB, s string) bool {
	v, ok := tails.Load(t)
	if !ok {
		return false
	}
	lines, _ := v.(*tail).lines()
	for _, l := range lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// tails holds the log tail of each running test that asked for a Logger.
var tails sync.Map // testing.TB -> *tail

// tail is a ring of the last keptLines lines written to it; slog's text handler writes each
// record in one Write.
type tail struct {
	mu    sync.Mutex
	ring  []string
	next  int
	total int
}

func (l *tail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ring) < keptLines {
		l.ring = append(l.ring, string(p))
	} else {
		l.ring[l.next] = string(p)
	}
	l.next = (l.next + 1) % keptLines
	l.total++
	return len(p), nil
}

// lines returns the kept lines, oldest first, and how many were written before them.
func (l *tail) lines() ([]string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ring) < keptLines {
		return append([]string(nil), l.ring...), 0
	}
	out := append(append([]string(nil), l.ring[l.next:]...), l.ring[:l.next]...)
	return out, l.total - keptLines
}
