package ingress

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/instance"
)

// TestStoreFailed: a failure of a store is answered 503 bus-unavailable with Retry-After; a
// write that kept losing compare-and-set races (bus.ErrConflictsPersisted, however wrapped) is
// answered the same, with a detail that says so.
func TestStoreFailed(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler)}
	for _, tc := range []struct {
		err    error
		detail string
	}{
		{fmt.Errorf("completing instance: %w: %w", instance.ErrConflict, bus.ErrConflictsPersisted), "other writers kept changing the same record at the same time; try again"},
		{errors.New("nats: timeout"), "try again"},
	} {
		w := httptest.NewRecorder()
		s.storeFailed(w, "writing", tc.err)
		assert.Equal(t, http.StatusServiceUnavailable, w.Code, "%v", tc.err)
		assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"), "%v", tc.err)
		assert.Equal(t, "1", w.Header().Get("Retry-After"), "%v", tc.err)
		var p struct{ Type, Detail string }
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p))
		assert.Equal(t, "urn:agentbus:problem:bus-unavailable", p.Type, "%v", tc.err)
		assert.Equal(t, tc.detail, p.Detail, "%v", tc.err)
	}
}
