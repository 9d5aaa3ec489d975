package capped_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/capped"
)

var errFull = errors.New("full")

// set is what a tenant has, as a store keeps it: Keep's count sees every one stored before.
type set struct {
	mu sync.Mutex
	n  int
}

func (s *set) count(context.Context) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n, nil
}

func (s *set) add(d int) {
	s.mu.Lock()
	s.n += d
	s.mu.Unlock()
}

// Creations made at once, each finding room before any is stored, keep the cap: the later ones
// count the earlier and give way, removing their own.
func TestCreationsAtOnceKeepTheCap(t *testing.T) {
	const max, tries = 3, 10
	var s set
	ctx := t.Context()
	for range tries {
		require.NoError(t, capped.Room(ctx, max, s.count, errFull), "all find room before any is stored")
	}
	kept := 0
	for range tries { // each stored, then counted again, one after the other
		s.add(1)
		err := capped.Keep(ctx, max, s.count, func(context.Context) error { s.add(-1); return nil }, errFull)
		if err == nil {
			kept++
			continue
		}
		assert.ErrorIs(t, err, errFull)
	}
	assert.Equal(t, max, kept)
	n, _ := s.count(ctx)
	assert.Equal(t, max, n, "none kept past the cap")
	assert.ErrorIs(t, capped.Room(ctx, max, s.count, errFull), errFull)
}

// A count that fails removes the new one too, and says why; so does an undo that fails.
func TestKeepCannotCount(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // undo runs all the same
	errCount, errUndo := errors.New("count"), errors.New("undo")
	undone := false
	err := capped.Keep(ctx, 1, func(context.Context) (int, error) { return 0, errCount }, func(uctx context.Context) error {
		undone = uctx.Err() == nil
		return errUndo
	}, errFull)
	assert.True(t, undone, "undone, with a context that is not cancelled")
	assert.ErrorIs(t, err, errCount)
	assert.ErrorIs(t, err, errUndo)
	assert.NotErrorIs(t, err, errFull)
	assert.ErrorIs(t, capped.Room(ctx, 1, func(context.Context) (int, error) { return 0, errCount }, errFull), errCount)
}
