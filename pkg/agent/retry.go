package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	backoff "github.com/agentbus/agentbus/pkg/retry"
)

// Retryable marks err as a passing failure, such as a model or an API that did not answer: a Chat,
// Data or File handler that returns it is run again after a backoff, and once the request has
// been tried HostConfig.MaxDeliveries times it is kept as a dead letter and the caller is told
// so. The conversation's later messages wait meanwhile, so that they are still handled in order.
//
// Any other error is the handler's answer: it is stored and sent, and not retried. A panic is
// retried like a Retryable error. Webhook handlers return Retry instead.
func Retryable(err error) error {
	if err == nil {
		err = errors.New("retryable failure")
	}
	return &retryableError{err}
}

// Retry is a webhook handler's passing failure (see Retryable): the call is run again after a
// backoff instead of being answered, and dead-lettered once its attempts are used up.
func Retry(err error) Response {
	if err == nil {
		err = errors.New("retryable failure")
	}
	return Response{retry: err}
}

// IsRetryable reports whether err, or an error it wraps, was marked by Retryable.
func IsRetryable(err error) bool {
	var r *retryableError
	return errors.As(err, &r)
}

type retryableError struct{ err error }

func (e *retryableError) Error() string { return "retryable: " + e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

// errStopping means the host is shutting down before a request could be finished: it goes back
// to the bus, which delivers it to the partition's next owner.
var errStopping = errors.New("host shutting down")

// attempts counts the tries of one request. The count starts at the bus's delivery count, so a
// request that crashed its hosts is counted too, and goes on locally with each retry.
type attempts struct {
	n, max   int
	backoff  time.Duration // with max, the request's handlerPolicy
	stopping <-chan struct{}
	// h and d, when set, show a wait to the host's inspection and let an operator cut it short
	// (inspect.go).
	h *Host
	d *delivery
}

// maxBackoff caps the doubling of the retry backoff.
const maxBackoff = time.Minute

// handlerPolicy is the retry policy of a request whose handler failed with a Retryable error:
// HostConfig.RetryBackoff doubling up to maxBackoff, HostConfig.MaxDeliveries attempts. A
// request's attempts keep only its two numbers, and make the policy when they need it.
func handlerPolicy(retryBackoff time.Duration, maxDeliveries int) backoff.Policy {
	return backoff.Policy{First: retryBackoff, Max: maxBackoff, MaxAttempts: maxDeliveries}
}

// policy is a's handlerPolicy.
func (a *attempts) policy() backoff.Policy { return handlerPolicy(a.backoff, a.max) }

// The host's policies for riding out NATS hiccups (a leader election, a reconnect): waits that
// double up to a cap, never giving up while their context lasts.
var (
	// busPolicy: the bus operations of a request that was accepted (retry), and a partition's
	// takeover: 50 ms doubling to 2 s.
	busPolicy = backoff.Policy{First: 50 * time.Millisecond, Max: 2 * time.Second}
	// reloadPolicy: reading an instance's record again: 50 ms doubling to 1 s.
	reloadPolicy = backoff.Policy{First: 50 * time.Millisecond, Max: time.Second}
	// consumePolicy: creating a partition's consumer again: 100 ms doubling to 5 s.
	consumePolicy = backoff.Policy{First: 100 * time.Millisecond, Max: 5 * time.Second}
)

// exhausted reports whether no attempt is left after the current one.
func (a *attempts) exhausted() bool { return a.policy().GaveUp(a.n, 0) }

// overdrawn reports whether the request was delivered more often than it may be tried.
func (a *attempts) overdrawn() bool { return a.n > a.max }

// wait sleeps before the next attempt and counts it. It returns errStopping when the host begins
// to shut down first, ctx's error when ctx ends.
func (a *attempts) wait(ctx context.Context) error {
	d := a.policy().Delay(a.n)
	t := time.NewTimer(d)
	defer t.Stop()
	var now <-chan struct{}
	if a.h != nil {
		now = a.h.backingOff(a.d, time.Now().Add(d), a.n+1)
		defer a.h.backedOff(a.d)
	}
	select {
	case <-t.C:
		a.n++
		return nil
	case <-now: // an operator asked for the retry now
		a.n++
		return nil
	case <-a.stopping:
		return errStopping
	case <-ctx.Done():
		return fmt.Errorf("waiting to retry: %w", ctx.Err())
	}
}
