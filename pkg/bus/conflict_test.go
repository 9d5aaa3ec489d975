package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/natstest"
)

// TestIsConflict: the errors a compare-and-set write is refused with, as the stream and nats.go's
// KV answer them, are conflicts; other errors are not.
func TestIsConflict(t *testing.T) {
	wrongLast := &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence, Description: "wrong last sequence: 3"}
	inProcess := &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant, Description: "wrong last sequence"}
	for name, err := range map[string]error{
		"wrong last sequence":                        fmt.Errorf("nats: %w", wrongLast),
		"wrong last sequence, replicated":            fmt.Errorf("nats: %w", inProcess),
		"key exists":                                 jetstream.ErrKeyExists,
		"key exists, replicated":                     fmt.Errorf("%w: %w", inProcess, jetstream.ErrKeyExists),
		"key revision mismatch":                      fmt.Errorf("%w: %w", wrongLast, jetstream.ErrKeyRevisionMismatch),
		"key revision mismatch, replicated":          fmt.Errorf("%w: %w", inProcess, jetstream.ErrKeyRevisionMismatch),
		"create of a deleted key, replicated":        inProcess,
		"wrapped by the caller":                      fmt.Errorf("writing: %w", fmt.Errorf("nats: %w", inProcess)),
		"revision mismatch without the stream's own": jetstream.ErrKeyRevisionMismatch,
	} {
		assert.True(t, bus.IsConflict(err), "%s: %v", name, err)
	}
	for name, err := range map[string]error{
		"nil":             nil,
		"other API error": &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"},
		"no stream":       jetstream.ErrNoStreamResponse,
		"timeout":         context.DeadlineExceeded,
		"key not found":   jetstream.ErrKeyNotFound,
	} {
		assert.False(t, bus.IsConflict(err), "%s: %v", name, err)
	}
}

// Race tests set racers writers going at once, a round at a time, until a replicated stream has
// refused one of them with the code it uses while another write to the subject is still being
// agreed on (jetstream.JSErrCodeStreamWrongLastSequenceConstant), or fail after maxRaceRounds.
const (
	racers        = 8
	maxRaceRounds = 200
)

// errorCode returns the JetStream API error code in err's chain, or 0.
func errorCode(err error) jetstream.ErrorCode {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode
	}
	return 0
}

// TestRetryConflicts: an attempt is made again after each conflict until it answers anything
// else, which is returned as it is; a conflict outlasting the context is answered with both.
func TestRetryConflicts(t *testing.T) {
	conflict := fmt.Errorf("writing: %w", jetstream.ErrKeyRevisionMismatch)
	other := errors.New("the bus is down")
	for _, last := range []error{nil, other} {
		calls := 0
		err := bus.RetryConflicts(context.Background(), func() error {
			if calls++; calls < 3 {
				return conflict
			}
			return last
		})
		assert.Equal(t, 3, calls)
		assert.Equal(t, last, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	err := bus.RetryConflicts(ctx, func() error { calls++; return conflict })
	assert.ErrorIs(t, err, jetstream.ErrKeyRevisionMismatch)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 1, calls, "the pause after the first conflict meets the ended context")
}

// TestConflictBackoff: the pauses after conflicts start well under a millisecond, grow, stay
// within a few milliseconds, and differ from one writer to another; a context that ends cuts one
// short, and a write that has met conflicts for ConflictPatience, and made its least number of
// attempts, gives up.
func TestConflictBackoff(t *testing.T) {
	var b bus.ConflictBackoff
	steps := []time.Duration{100 * time.Microsecond, 200 * time.Microsecond, 400 * time.Microsecond,
		800 * time.Microsecond, 1600 * time.Microsecond, 3200 * time.Microsecond, 4 * time.Millisecond, 4 * time.Millisecond}
	for i, step := range steps {
		d := b.NextConflictWait()
		assert.GreaterOrEqual(t, d, step/2, "pause %d", i+1)
		assert.LessOrEqual(t, d, step, "pause %d", i+1)
	}
	distinct := map[time.Duration]bool{}
	for range 20 {
		var b bus.ConflictBackoff
		for range 5 {
			b.NextConflictWait()
		}
		distinct[b.NextConflictWait()] = true
	}
	assert.Greater(t, len(distinct), 1, "pauses are jittered")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, b.Wait(ctx), context.Canceled)
	require.NoError(t, b.Wait(context.Background()))
	b.SinceFirstConflict(bus.ConflictPatience - time.Second)
	require.NoError(t, b.Wait(context.Background()), "within its patience")
	b.SinceFirstConflict(bus.ConflictPatience)
	require.NoError(t, b.Wait(context.Background()), "past its patience, but with few attempts (a busy machine)")
	b.MetConflicts(bus.ConflictMinAttempts)
	assert.ErrorIs(t, b.Wait(context.Background()), bus.ErrConflictsPersisted, "past its patience and its attempts")

	// A patience of its own.
	long := bus.ConflictBackoff{Patience: 3 * bus.ConflictPatience}
	require.NoError(t, long.Wait(context.Background()))
	long.MetConflicts(bus.ConflictMinAttempts)
	long.SinceFirstConflict(2 * bus.ConflictPatience)
	require.NoError(t, long.Wait(context.Background()), "within its own patience")
	long.SinceFirstConflict(3 * bus.ConflictPatience)
	assert.ErrorIs(t, long.Wait(context.Background()), bus.ErrConflictsPersisted, "past its own patience")
}

// TestConflictOnReplicatedStream: on a stream and a bucket with three replicas, writers racing on
// one subject with appends that expect its last sequence, on one key with updates at its
// revision, and on one deleted key with creates, are refused as conflicts, whichever code the
// stream refuses them with, and at most one of each round wins.
func TestConflictOnReplicatedStream(t *testing.T) {
	nc, js, ctx := withCluster(t, 30*time.Second)
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "CAS", Subjects: []string{"cas.>"}, Replicas: 3})
	require.NoError(t, err)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "cas", Replicas: 3})
	require.NoError(t, err)

	t.Run("appends", func(t *testing.T) {
		rounds(t, func() []error {
			var last uint64
			if raw, err := bus.LeaderLast(ctx, nc, "CAS", "cas.one"); err == nil {
				last = raw.Sequence
			} else {
				require.ErrorIs(t, err, jetstream.ErrMsgNotFound)
			}
			return natstest.Race(racers, func(i int) error {
				m := nats.NewMsg("cas.one")
				m.Data = []byte(strconv.Itoa(i))
				m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last, 10))
				_, err := bus.Publish(ctx, js, m)
				return err
			})
		})
	})
	t.Run("kv updates", func(t *testing.T) {
		rev, err := kv.Create(ctx, "update", []byte("0"))
		require.NoError(t, err)
		rounds(t, func() []error {
			e, err := kv.Get(ctx, "update")
			require.NoError(t, err)
			rev = max(rev, e.Revision()) // a replica may answer with an older one
			return natstest.Race(racers, func(i int) error {
				_, err := kv.Update(ctx, "update", []byte(strconv.Itoa(i)), rev)
				return err
			})
		})
	})
	t.Run("kv creates of a deleted key", func(t *testing.T) {
		rounds(t, func() []error {
			require.NoError(t, kv.Delete(ctx, "create"))
			return natstest.Race(racers, func(i int) error {
				_, err := kv.Create(ctx, "create", []byte(strconv.Itoa(i)))
				return err
			})
		})
	})
}

// rounds runs round, which sets writers racing and returns their errors, until one was the
// replicated stream's, at most maxRaceRounds times. Every error must be a conflict, and at most
// one writer of a round may win.
func rounds(t *testing.T, round func() []error) {
	t.Helper()
	counts := map[jetstream.ErrorCode]int{}
	won := 0
	for n := 1; counts[jetstream.JSErrCodeStreamWrongLastSequenceConstant] == 0; n++ {
		require.LessOrEqual(t, n, maxRaceRounds, "no write was refused with code %d in %d rounds (codes seen: %v)",
			jetstream.JSErrCodeStreamWrongLastSequenceConstant, maxRaceRounds, counts)
		wins := 0
		for _, err := range round() {
			if err == nil {
				wins++
				continue
			}
			counts[errorCode(err)]++
			require.True(t, bus.IsConflict(err), "round %d: a refusal not taken for a conflict: %v", n, err)
		}
		require.LessOrEqual(t, wins, 1, "round %d: writers that won", n)
		won += wins
	}
	require.Positive(t, won, "writes that won")
	t.Logf("refusals by code: %v; writes that won: %d", counts, won)
}
