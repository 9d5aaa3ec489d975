package sse

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// all reads every event of stream, with comments when keep is set.
func all(t *testing.T, r io.Reader, keep bool) ([]Event, error) {
	t.Helper()
	rd := NewReaderSize(r, 64)
	rd.KeepComments = keep
	var out []Event
	err := rd.Each(func(ev Event) bool { out = append(out, ev); return true })
	return out, err
}

func TestReader(t *testing.T) {
	msg := func(id, data string) Event { return Event{ID: id, Event: "message", Data: data} }
	for _, tc := range []struct {
		name, stream string
		keep         bool
		want         []Event
	}{
		{"one event", "event: delta\ndata: {\"a\":1}\n\n", false, []Event{{Event: "delta", Data: `{"a":1}`}}},
		{"the type defaults to message", "data: x\n\n", false, []Event{msg("", "x")}},
		{"data lines joined with LF", "data: a\ndata: b\ndata\n\n", false, []Event{msg("", "a\nb\n")}},
		{"one space after the colon is dropped, no more", "data:a\ndata:  b\n\n", false, []Event{msg("", "a\n b")}},
		{"a field without a colon has an empty value", "data\n\n", false, []Event{msg("", "")}},
		{"CRLF line ends", "id: 1\r\ndata: a\r\n\r\n", false, []Event{msg("1", "a")}},
		{"CR line ends", "id: 1\rdata: a\r\rdata: b\r\r", false, []Event{msg("1", "a"), msg("1", "b")}},
		{"mixed line ends", "data: a\r\n\ndata: b\r\r\n", false, []Event{msg("", "a"), msg("", "b")}},
		{"comments skipped", ": hi\ndata: a\n: there\n\n", false, []Event{msg("", "a")}},
		{"comments kept", ": listening\n\ndata: a\n\n:x\n", true, []Event{{Comment: "listening"}, msg("", "a"), {Comment: "x"}}},
		{"no dispatch without data", "event: x\nid: 7\n\ndata: a\n\n", false, []Event{msg("7", "a")}},
		{"the type is reset after an event", "event: x\ndata: a\n\ndata: b\n\n", false, []Event{{Event: "x", Data: "a"}, msg("", "b")}},
		{"the id stays", "id: 1\ndata: a\n\ndata: b\n\nid\ndata: c\n\n", false, []Event{msg("1", "a"), msg("1", "b"), msg("", "c")}},
		{"an id with NUL is ignored", "id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n", false, []Event{msg("1", "a"), msg("1", "b")}},
		{"retry", "retry: 1500\ndata: a\n\nretry: 1x\ndata: b\n\n", false, []Event{{Event: "message", Data: "a", Retry: 1500 * time.Millisecond}, {Event: "message", Data: "b", Retry: 1500 * time.Millisecond}}},
		{"unknown fields ignored", "foo: bar\ndata: a\n\n", false, []Event{msg("", "a")}},
		{"a leading BOM is dropped", "\ufeffdata: a\n\n", false, []Event{msg("", "a")}},
		{"an event not ended is dropped", "data: a\n\ndata: b\n", false, []Event{msg("", "a")}},
		{"blank lines alone", "\n\n\r\n", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := all(t, strings.NewReader(tc.stream), tc.keep)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			// The same, a byte at a time: a CR last in what was read waits for its LF.
			got, err = all(t, iotest.OneByteReader(strings.NewReader(tc.stream)), tc.keep)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got, "a byte at a time")
		})
	}
}

func TestReaderBounds(t *testing.T) {
	_, err := all(t, strings.NewReader("data: "+strings.Repeat("x", 100)+"\n\n"), false)
	assert.ErrorIs(t, err, ErrTooLong, "a long line")
	_, err = all(t, strings.NewReader(strings.Repeat("data: "+strings.Repeat("x", 20)+"\n", 4)+"\n"), false)
	assert.ErrorIs(t, err, ErrTooLong, "an event's data over the bound")
}

func TestReaderStops(t *testing.T) {
	rd := NewReader(strings.NewReader("data: a\n\ndata: b\n\n"))
	var got []string
	require.NoError(t, rd.Each(func(ev Event) bool { got = append(got, ev.Data); return false }))
	assert.Equal(t, []string{"a"}, got)
	ev, err := rd.Next()
	require.NoError(t, err)
	assert.Equal(t, "b", ev.Data, "Next goes on after Each stopped")
	_, err = rd.Next()
	assert.Equal(t, io.EOF, err)

	broken := errors.New("broken")
	_, err = NewReader(iotest.ErrReader(broken)).Next()
	assert.ErrorIs(t, err, broken)
}
