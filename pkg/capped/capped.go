// Package capped keeps what a tenant has of a kind (API keys, event subscriptions, remote
// agents) within its cap when several are created at once, through one process or several. A
// creation counts what the tenant has before it stores the new one (Room), and again once it is
// stored (Keep): a count read after a creation is stored holds every one stored before it, so of
// those created together past the cap the later ones count the earlier and give way. More than
// needed may give way; none is kept past the cap.
package capped

import (
	"context"
	"errors"
)

// Count returns how many of the kind the tenant has.
type Count func(context.Context) (int, error)

// Room answers full when the tenant has max or more already, or count's error.
func Room(ctx context.Context, max int, count Count, full error) error {
	n, err := count(ctx)
	if err != nil {
		return err
	}
	if n >= max {
		return full
	}
	return nil
}

// Keep counts again once a new one is stored. Past max, or when it cannot count, it removes the
// new one (undo, whose context is not cancelled with ctx) and answers full or count's error,
// joined with undo's.
func Keep(ctx context.Context, max int, count Count, undo func(context.Context) error, full error) error {
	n, err := count(ctx)
	if err == nil && n <= max {
		return nil
	}
	if err == nil {
		err = full
	}
	if uerr := undo(context.WithoutCancel(ctx)); uerr != nil {
		err = errors.Join(err, uerr)
	}
	return err
}
