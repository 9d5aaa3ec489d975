package timefmt_test

import (
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/timefmt"
)

func TestFormat(t *testing.T) {
	cet := time.FixedZone("CET", 3600)
	for _, tc := range []struct {
		name string
		in   time.Time
		want string
	}{
		{name: "a whole second has three zeros", in: time.Date(2026, 5, 1, 10, 20, 21, 0, time.UTC), want: "2026-05-01T10:20:21.000Z"},
		{name: "trailing zeros are kept", in: time.Date(2026, 5, 1, 10, 20, 21, 340_000_000, time.UTC), want: "2026-05-01T10:20:21.340Z"},
		{name: "nanoseconds are truncated, not rounded", in: time.Date(2026, 5, 1, 10, 20, 21, 887_941_162, time.UTC), want: "2026-05-01T10:20:21.887Z"},
		{name: "the last nanosecond of a second stays in it", in: time.Date(2026, 12, 31, 23, 59, 59, 999_999_999, time.UTC), want: "2026-12-31T23:59:59.999Z"},
		{name: "another zone is written in UTC", in: time.Date(2026, 1, 1, 0, 30, 0, 5_000_000, cet), want: "2025-12-31T23:30:00.005Z"},
		{name: "local time is written in UTC", in: time.Date(2026, 5, 1, 10, 20, 21, 0, time.UTC).Local(), want: "2026-05-01T10:20:21.000Z"},
		{name: "the zero time", in: time.Time{}, want: "0001-01-01T00:00:00.000Z"},
		{name: "the first year", in: time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), want: "0000-01-01T00:00:00.000Z"},
		{name: "the last year", in: time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC), want: "9999-12-31T23:59:59.999Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, timefmt.Format(tc.in))
			assert.Equal(t, "x"+tc.want, string(timefmt.Append([]byte("x"), tc.in)))
			assert.Equal(t, tc.in.UTC().Format(timefmt.Layout), tc.want, "as time.Format writes Layout")
			assert.Regexp(t, timefmt.Pattern, tc.want)

			b, err := json.Marshal(timefmt.Of(tc.in))
			require.NoError(t, err)
			assert.Equal(t, `"`+tc.want+`"`, string(b))
			txt, err := timefmt.Of(tc.in).MarshalText()
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(txt))

			var back timefmt.Time
			require.NoError(t, json.Unmarshal(b, &back))
			assert.True(t, back.Equal(tc.in.Truncate(time.Millisecond)), "read back %v", back)
			assert.Equal(t, time.UTC, back.Location())
		})
	}
}

// Pattern matches what Format writes and nothing that another precision, zone or year would.
func TestPattern(t *testing.T) {
	re := regexp.MustCompile(timefmt.Pattern)
	assert.True(t, re.MatchString("2026-05-01T10:20:21.887Z"))
	for _, s := range []string{
		"2026-05-01T10:20:21Z", "2026-05-01T10:20:21.34Z", "2026-05-01T10:20:21.887541162Z",
		"2026-05-01T10:20:21.887+00:00", "2026-05-01T12:20:21.887+02:00", "2026-05-01 10:20:21.887Z",
		"12026-05-01T10:20:21.887Z", "2026-05-01T10:20:21.887z",
	} {
		assert.False(t, re.MatchString(s), s)
	}
}

// A time whose year in UTC RFC 3339 cannot hold is refused.
func TestOutOfRange(t *testing.T) {
	for _, in := range []time.Time{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 12, 31, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 0, 0, 0, time.FixedZone("", -3600))} {
		assert.False(t, timefmt.InRange(in), "%v", in)
		_, err := json.Marshal(timefmt.Of(in))
		assert.Error(t, err, "%v", in)
		_, err = timefmt.Of(in).MarshalText()
		assert.Error(t, err, "%v", in)
	}
}

// record has the shapes of the stored records whose times are Time: a time, and an optional one.
type record struct {
	CreatedAt timefmt.Time  `json:"createdAt"`
	RevokedAt *timefmt.Time `json:"revokedAt,omitempty"`
}

// A record written by encoding/json from time.Time fields, as releases before package timefmt
// stored them, decodes to the same times, whatever its precision and zone; written again, it
// has milliseconds.
func TestRecordsWrittenWithTimeTimeDecode(t *testing.T) {
	type oldRecord struct {
		CreatedAt time.Time  `json:"createdAt"`
		RevokedAt *time.Time `json:"revokedAt,omitempty"`
	}
	revoked := time.Date(2026, 5, 1, 10, 20, 22, 0, time.UTC)
	for _, tc := range []struct {
		name string
		old  oldRecord
		want string
	}{
		{name: "nanoseconds", old: oldRecord{CreatedAt: time.Date(2026, 5, 1, 10, 20, 21, 887_541_162, time.UTC), RevokedAt: &revoked},
			want: `{"createdAt":"2026-05-01T10:20:21.887Z","revokedAt":"2026-05-01T10:20:22.000Z"}`},
		{name: "trailing zeros dropped", old: oldRecord{CreatedAt: time.Date(2026, 5, 1, 10, 20, 21, 340_000_000, time.UTC)},
			want: `{"createdAt":"2026-05-01T10:20:21.340Z"}`},
		{name: "an offset", old: oldRecord{CreatedAt: time.Date(2026, 5, 1, 12, 20, 21, 5_000, time.FixedZone("CEST", 7200))},
			want: `{"createdAt":"2026-05-01T10:20:21.000Z"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stored, err := json.Marshal(tc.old)
			require.NoError(t, err)
			var r record
			require.NoError(t, json.Unmarshal(stored, &r), "%s", stored)
			assert.True(t, r.CreatedAt.Equal(tc.old.CreatedAt), "createdAt of %s: %v", stored, r.CreatedAt)
			if tc.old.RevokedAt == nil {
				assert.Nil(t, r.RevokedAt)
			} else if assert.NotNil(t, r.RevokedAt) {
				assert.True(t, r.RevokedAt.Equal(*tc.old.RevokedAt), "revokedAt of %s: %v", stored, r.RevokedAt)
			}
			again, err := json.Marshal(r)
			require.NoError(t, err)
			assert.JSONEq(t, tc.want, string(again))
		})
	}
}

func TestUnmarshal(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     time.Time
		err      bool
	}{
		{name: "no fraction", in: `"2026-05-01T10:20:21Z"`, want: time.Date(2026, 5, 1, 10, 20, 21, 0, time.UTC)},
		{name: "nanoseconds", in: `"2026-05-01T10:20:21.887541162Z"`, want: time.Date(2026, 5, 1, 10, 20, 21, 887541162, time.UTC)},
		{name: "an offset", in: `"2026-05-01T12:20:21.5+02:00"`, want: time.Date(2026, 5, 1, 10, 20, 21, 500_000_000, time.UTC)},
		{name: "not RFC 3339", in: `"2026-05-01 10:20:21"`, err: true},
		{name: "a number", in: `1714558821`, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got timefmt.Time
			err := json.Unmarshal([]byte(tc.in), &got)
			if tc.err {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.True(t, got.Equal(tc.want), "got %v", got)
			parsed, err := timefmt.Parse(tc.in[1 : len(tc.in)-1])
			require.NoError(t, err)
			assert.True(t, parsed.Equal(tc.want), "Parse: %v", parsed)
		})
	}
	// A null leaves the time as it was, as for a time.Time, and a missing pointer stays nil.
	was := timefmt.Of(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	got := was
	require.NoError(t, json.Unmarshal([]byte("null"), &got))
	assert.Equal(t, was, got)
	var r record
	require.NoError(t, json.Unmarshal([]byte(`{"createdAt":"2026-05-01T10:20:21.000Z","revokedAt":null}`), &r))
	assert.Nil(t, r.RevokedAt)
}

// Now equals what its JSON form reads back as.
func TestNowRoundTrips(t *testing.T) {
	now := timefmt.Now()
	b, err := json.Marshal(now)
	require.NoError(t, err)
	var back timefmt.Time
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, now, back)
	assert.WithinDuration(t, time.Now(), now.Time, time.Second)
}

func TestPointers(t *testing.T) {
	assert.Nil(t, timefmt.OfPtr(nil))
	var none *timefmt.Time
	assert.Nil(t, none.Std())
	at := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	p := timefmt.OfPtr(&at)
	require.NotNil(t, p)
	assert.True(t, p.Std().Equal(at))
}

func BenchmarkMarshalJSON(b *testing.B) {
	t := timefmt.Of(time.Date(2026, 5, 1, 10, 20, 21, 887_541_162, time.UTC))
	for b.Loop() {
		if _, err := t.MarshalJSON(); err != nil {
			b.Fatal(err)
		}
	}
}
