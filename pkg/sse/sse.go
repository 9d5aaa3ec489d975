// Package sse reads Server-Sent Events (text/event-stream) as the WHATWG HTML standard's event
// stream interpretation says: lines end with CRLF, LF or CR; a line starting with a colon is a
// comment; a field is the line up to its first colon (the whole line when it has none) and its
// value the rest, less one space after the colon; data lines are joined with "\n"; an event is
// dispatched at a blank line, and only when it has data; the id and the reconnection time stay
// set for the events after the one that set them. A stream that ends without a blank line drops
// the event it was reading. Lines and an event's data are bounded, so that a stream without
// line ends cannot fill the memory.
//
// The CLI's tail and converse --stream, the host's calls of remote agents that stream their
// answers, the conformance suite, the soak and the tests read event streams with it.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"time"
)

// DefaultMaxLine is the longest line, and the most data of one event, a Reader of NewReader
// takes.
const DefaultMaxLine = 8 << 20

// ErrTooLong is the error of a stream with a line or an event's data longer than the Reader's
// bound.
var ErrTooLong = errors.New("sse: line or event too long")

// Event is one dispatched event, or a comment when the Reader keeps them.
type Event struct {
	// ID is the stream's last event id: the value of the last id field (one holding a NUL is
	// ignored), of this event or an earlier one; empty when none was set.
	ID string
	// Event is the event's type, "message" when the stream names none; empty only for a
	// comment.
	Event string
	// Data is the event's data lines joined with "\n".
	Data string
	// Retry is the reconnection time the stream last set (a retry field of digits only), 0 when
	// none.
	Retry time.Duration
	// Comment is a comment line's text after the colon, less one leading space, for a comment
	// (Event empty) handed out because the Reader keeps comments.
	Comment string
}

// IsComment reports whether e is a comment rather than an event.
func (e Event) IsComment() bool { return e.Event == "" }

// Reader reads the events of a stream.
type Reader struct {
	sc *bufio.Scanner
	// KeepComments makes Next hand out each comment line as an Event with Comment set and Event
	// empty; by default comments are skipped, as the standard says.
	KeepComments bool

	max     int
	started bool
	id      string
	retry   time.Duration
	typ     string
	data    strings.Builder
	hasData bool
}

// NewReader reads events from r with lines and data of at most DefaultMaxLine bytes.
func NewReader(r io.Reader) *Reader { return NewReaderSize(r, DefaultMaxLine) }

// NewReaderSize reads events from r with lines, and each event's data, of at most max bytes.
func NewReaderSize(r io.Reader, max int) *Reader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, min(max, 64<<10)), max)
	sc.Split(scanLines)
	return &Reader{sc: sc, max: max}
}

// Next returns the next event (or comment, with KeepComments). At the end of the stream it
// returns io.EOF; the error of r, or ErrTooLong, otherwise.
func (r *Reader) Next() (Event, error) {
	for r.sc.Scan() {
		line := r.sc.Bytes()
		if !r.started {
			r.started = true
			line = bytes.TrimPrefix(line, []byte("\ufeff"))
		}
		if len(line) == 0 {
			if ev, ok := r.dispatch(); ok {
				return ev, nil
			}
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "":
			if r.KeepComments {
				return Event{ID: r.id, Retry: r.retry, Comment: string(value)}, nil
			}
		case "event":
			r.typ = string(value)
		case "data":
			if r.data.Len()+len(value)+1 > r.max {
				return Event{}, ErrTooLong
			}
			if r.hasData {
				r.data.WriteByte('\n')
			}
			r.data.Write(value)
			r.hasData = true
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				r.id = string(value)
			}
		case "retry":
			if ms, err := strconv.ParseUint(string(value), 10, 64); err == nil { // digits only: no sign
				r.retry = time.Duration(min(ms, uint64(1<<63-1)/uint64(time.Millisecond))) * time.Millisecond
			}
		}
	}
	if err := r.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Event{}, ErrTooLong
		}
		return Event{}, err
	}
	return Event{}, io.EOF
}

// dispatch ends the event being read: it returns it when it has data, and starts the next.
func (r *Reader) dispatch() (Event, bool) {
	ev := Event{ID: r.id, Event: r.typ, Data: r.data.String(), Retry: r.retry}
	ok := r.hasData
	r.typ, r.hasData = "", false
	r.data.Reset()
	if ev.Event == "" {
		ev.Event = "message"
	}
	return ev, ok
}

// Each calls f with every event (and comment, with KeepComments) of r until f returns false or
// the stream ends; it returns nil at the stream's end or when f stopped it, else the error.
func (r *Reader) Each(f func(Event) bool) error {
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if !f(ev) {
			return nil
		}
	}
}

// scanLines splits at CRLF, LF or CR. A CR at the end of the data read so far waits for the next
// byte (unless the stream ended), which may be the LF of the same line end.
func scanLines(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if atEOF && len(data) == 0 {
		return 0, nil, nil
	}
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		if data[i] == '\n' {
			return i + 1, data[:i], nil
		}
		if i+1 < len(data) {
			if data[i+1] == '\n' {
				return i + 2, data[:i], nil
			}
			return i + 1, data[:i], nil
		}
		if atEOF {
			return i + 1, data[:i], nil
		}
		return 0, nil, nil // a CR last: wait for the next byte
	}
	if atEOF {
		return len(data), data, nil
	}
	return 0, nil, nil
}
