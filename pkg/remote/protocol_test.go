package remote_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/remote"
	"github.com/agentbus/agentbus/pkg/timefmt"
)

// A request's deadline is in the one form of every time (package timefmt): UTC, exactly three
// fractional digits. A timer's at in an answer may be any RFC 3339 time.
func TestProtocolTimes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		deadline time.Time
		want     string
	}{
		{name: "a whole second", deadline: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC), want: "2026-03-04T05:06:07.000Z"},
		{name: "a trailing zero", deadline: time.Date(2026, 3, 4, 5, 6, 7, 340_000_000, time.UTC), want: "2026-03-04T05:06:07.340Z"},
		{name: "nanoseconds in another zone", deadline: time.Date(2026, 3, 4, 6, 6, 7, 999_999_999, time.FixedZone("CET", 3600)), want: "2026-03-04T05:06:07.999Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(remote.Request{Protocol: remote.ProtocolVersion, Deadline: timefmt.Of(tc.deadline)})
			require.NoError(t, err)
			var raw struct {
				Deadline string `json:"deadline"`
			}
			require.NoError(t, json.Unmarshal(b, &raw))
			assert.Equal(t, tc.want, raw.Deadline)
		})
	}
	for _, at := range []string{"2026-03-04T05:06:07Z", "2026-03-04T06:06:07.5+01:00", "2026-03-04T05:06:07.123456789Z"} {
		var a remote.Answer
		require.NoError(t, json.Unmarshal([]byte(`{"timers":[{"name":"x","at":"`+at+`"}]}`), &a), at)
		require.Len(t, a.Timers, 1)
		require.NotNil(t, a.Timers[0].At, at)
		want, err := time.Parse(time.RFC3339Nano, at)
		require.NoError(t, err)
		assert.True(t, a.Timers[0].At.Equal(want), "%s read as %v", at, a.Timers[0].At)
	}
}
