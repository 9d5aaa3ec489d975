package bus

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
)

// TestTransient: Ensure retries what a starting JetStream or a cluster missing a peer for a
// moment answers, and gives up at once on anything else.
func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{nats.ErrTimeout, true},
		{nats.ErrNoResponders, true},
		{fmt.Errorf("creating stream X: %w", &jetstream.APIError{Code: 503, Description: "JetStream system temporarily unavailable"}), true},
		{fmt.Errorf("creating stream X: %w", &jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement, peer offline"}), true},
		{fmt.Errorf("creating stream X: %w", &jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use with a different configuration"}), false},
		{errors.New("invalid configuration"), false},
	} {
		assert.Equal(t, tc.want, Transient(tc.err), "%v", tc.err)
	}
}
