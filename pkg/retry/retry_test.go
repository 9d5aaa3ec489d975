package retry_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/retry"
)

// TestDelay: the n-th wait of each kind of policy, the random source injected.
func TestDelay(t *testing.T) {
	zero := func(int64) int64 { return 0 }
	top := func(n int64) int64 { return n - 1 }
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		p    retry.Policy
		n    []int
		want []time.Duration
	}{
		{"doubling to a cap", retry.Policy{First: 50 * ms, Max: 2 * time.Second},
			[]int{0, 1, 2, 3, 6, 7, 100}, []time.Duration{50 * ms, 50 * ms, 100 * ms, 200 * ms, 1600 * ms, 2 * time.Second, 2 * time.Second}},
		{"a cap under the first wait", retry.Policy{First: time.Second, Max: 50 * ms},
			[]int{1, 5}, []time.Duration{50 * ms, 50 * ms}},
		{"a factor of its own", retry.Policy{First: ms, Factor: 3, Max: time.Second},
			[]int{1, 2, 3, 8}, []time.Duration{ms, 3 * ms, 9 * ms, time.Second}},
		{"no cap, no overflow", retry.Policy{First: time.Second},
			[]int{2, 200}, []time.Duration{2 * time.Second, math.MaxInt64}},
		{"jitter, least", retry.Policy{First: 100 * time.Microsecond, Max: 4 * ms, Jitter: 0.5, Rand: zero},
			[]int{1, 2, 7}, []time.Duration{50 * time.Microsecond, 100 * time.Microsecond, 2 * ms}},
		{"jitter, most", retry.Policy{First: 100 * time.Microsecond, Max: 4 * ms, Jitter: 0.5, Rand: top},
			[]int{1, 2, 7}, []time.Duration{100 * time.Microsecond, 200 * time.Microsecond, 4 * ms}},
		{"the zero policy", retry.Policy{}, []int{1, 10}, []time.Duration{0, 0}},
	} {
		for i, n := range tc.n {
			if got := tc.p.Delay(n); got != tc.want[i] {
				t.Errorf("%s: Delay(%d) = %v, want %v", tc.name, n, got, tc.want[i])
			}
		}
	}
}

// TestJitterRange: without an injected source, a jittered wait stays within its bounds.
func TestJitterRange(t *testing.T) {
	p := retry.Policy{First: time.Millisecond, Jitter: 0.25}
	for range 1000 {
		if d := p.Delay(1); d < 750*time.Microsecond || d > time.Millisecond {
			t.Fatalf("Delay(1) = %v, outside [750µs, 1ms]", d)
		}
	}
}

// TestGaveUp: attempts, patience, and patience with a least number of attempts.
func TestGaveUp(t *testing.T) {
	for _, tc := range []struct {
		name    string
		p       retry.Policy
		n       int
		elapsed time.Duration
		want    bool
	}{
		{"for ever", retry.Policy{}, 1000, time.Hour, false},
		{"attempts left", retry.Policy{MaxAttempts: 3}, 2, time.Hour, false},
		{"attempts used", retry.Policy{MaxAttempts: 3}, 3, 0, true},
		{"within patience", retry.Policy{Patience: time.Second}, 100, time.Second - 1, false},
		{"past patience", retry.Policy{Patience: time.Second}, 1, time.Second, true},
		{"past patience, few attempts", retry.Policy{Patience: time.Second, MinAttempts: 64}, 63, time.Hour, false},
		{"past patience and attempts", retry.Policy{Patience: time.Second, MinAttempts: 64}, 64, time.Second, true},
	} {
		if got := tc.p.GaveUp(tc.n, tc.elapsed); got != tc.want {
			t.Errorf("%s: GaveUp(%d, %v) = %v, want %v", tc.name, tc.n, tc.elapsed, got, tc.want)
		}
	}
}

// TestDo: Do retries until success, stops at an error that is not retryable, gives up, and
// honours ctx.
func TestDo(t *testing.T) {
	errPassing, errFinal := errors.New("passing"), errors.New("final")
	p := retry.Policy{First: time.Microsecond, MaxAttempts: 5}

	calls := 0
	if err := p.Do(context.Background(), func() error {
		if calls++; calls < 3 {
			return errPassing
		}
		return nil
	}); err != nil || calls != 3 {
		t.Errorf("success on the third call: err %v, calls %d", err, calls)
	}

	calls = 0
	err := p.Do(context.Background(), func() error { calls++; return errPassing })
	if !errors.Is(err, errPassing) || !errors.Is(err, retry.ErrGaveUp) || calls != 5 {
		t.Errorf("gave up: err %v, calls %d", err, calls)
	}

	errOwn := errors.New("own give-up")
	own := p
	own.GiveUp = errOwn
	err = own.Do(context.Background(), func() error { return errPassing })
	if !errors.Is(err, errPassing) || !errors.Is(err, errOwn) || errors.Is(err, retry.ErrGaveUp) {
		t.Errorf("a give-up error of its own: err %v", err)
	}

	q := p
	q.Retryable = func(err error) bool { return err == errPassing }
	calls = 0
	if err := q.Do(context.Background(), func() error { calls++; return errFinal }); err != errFinal || calls != 1 {
		t.Errorf("not retryable: err %v, calls %d", err, calls)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls = 0
	err = retry.Policy{First: time.Hour}.Do(ctx, func() error { calls++; return errPassing })
	if !errors.Is(err, errPassing) || !errors.Is(err, context.Canceled) || calls != 1 {
		t.Errorf("ended context: err %v, calls %d", err, calls)
	}
}

// TestAttempts: Failed counts, answers the policy's waits, and Reset starts again.
func TestAttempts(t *testing.T) {
	a := retry.Policy{First: time.Millisecond, Max: 4 * time.Millisecond, MaxAttempts: 4}.Start()
	for i, want := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond} {
		if d, ok := a.Failed(); !ok || d != want {
			t.Errorf("failure %d: %v %v, want %v", i+1, d, ok, want)
		}
	}
	if _, ok := a.Failed(); ok || a.N() != 4 {
		t.Errorf("the fourth failure gives up (N %d)", a.N())
	}
	a.Reset()
	if d, ok := a.Failed(); !ok || d != time.Millisecond {
		t.Errorf("after Reset: %v %v", d, ok)
	}
	if err := a.Wait(context.Background()); err != nil {
		t.Errorf("Wait: %v", err)
	}
}
