// Package timefmt is the one way agentbus writes a time into JSON that others read: HTTP
// answers, subscription events, the remote agent protocol, and the stored records and bus
// messages those are made of. A time is written in RFC 3339, in UTC, with exactly three
// fractional digits (Layout), so that times compare and sort as strings the way they compare as
// times. Reading takes any RFC 3339 time, so that what was written with another precision or
// offset (records stored by earlier releases) still decodes.
//
// It is not for durations, for times that stay in memory, nor for what people read (the CLI
// shows local time).
package timefmt

import (
	"fmt"
	"time"
)

// Layout is the form every time is written in: UTC, milliseconds, "Z".
const Layout = "2006-01-02T15:04:05.000Z"

// Pattern is a regular expression (RE2 and ECMA-262 alike) that matches exactly the times Format
// writes for the years 0000-9999; the OpenAPI document gives it to every time of an answer or an
// event.
const Pattern = `^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$`

// Format writes t in Layout: in UTC, truncated (not rounded) to the millisecond. A time whose
// year in UTC is outside 0000-9999, which RFC 3339 cannot hold, is written as time.Format writes
// it; Time's MarshalJSON refuses it.
func Format(t time.Time) string { return string(Append(make([]byte, 0, len(Layout)), t)) }

// Append appends t as Format writes it.
func Append(b []byte, t time.Time) []byte {
	u := t.UTC()
	year, month, day := u.Date()
	if !InRange(u) {
		return u.AppendFormat(b, Layout)
	}
	// By hand rather than with AppendFormat, which reads the layout each time: times are
	// written in every answer, event and stored message.
	hour, minute, sec := u.Clock()
	b = appendDigits(b, year, 4)
	b = append(b, '-')
	b = appendDigits(b, int(month), 2)
	b = append(b, '-')
	b = appendDigits(b, day, 2)
	b = append(b, 'T')
	b = appendDigits(b, hour, 2)
	b = append(b, ':')
	b = appendDigits(b, minute, 2)
	b = append(b, ':')
	b = appendDigits(b, sec, 2)
	b = append(b, '.')
	b = appendDigits(b, u.Nanosecond()/int(time.Millisecond), 3)
	return append(b, 'Z')
}

// appendDigits appends the n (at most 4) low decimal digits of v (v >= 0), with leading zeros.
func appendDigits(b []byte, v, n int) []byte {
	start := len(b)
	b = append(b, "0000"[:n]...)
	for i := len(b) - 1; i >= start; i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return b
}

// InRange reports whether t can be written in RFC 3339: its year in UTC has four digits.
func InRange(t time.Time) bool {
	y := t.UTC().Year()
	return y >= 0 && y <= 9999
}

// Parse reads an RFC 3339 time with any number of fractional digits (or none) and any offset.
func Parse(s string) (time.Time, error) { return time.Parse(time.RFC3339Nano, s) }

// Time is a time.Time whose JSON and text forms are Layout; it reads any RFC 3339 time. It embeds
// time.Time, so that its methods (Before, IsZero, Sub, ...) work on it; pass t.Time where a
// time.Time is wanted.
type Time struct{ time.Time }

// Of returns t as a Time.
func Of(t time.Time) Time { return Time{Time: t} }

// OfPtr returns t as a *Time, nil for nil.
func OfPtr(t *time.Time) *Time {
	if t == nil {
		return nil
	}
	return &Time{Time: *t}
}

// Now is the current time as a Time: in UTC and truncated to the millisecond, so that it equals
// what its JSON form reads back as.
func Now() Time { return Time{Time: time.Now().UTC().Truncate(time.Millisecond)} }

// Std returns t's time.Time, nil for nil.
func (t *Time) Std() *time.Time {
	if t == nil {
		return nil
	}
	u := t.Time
	return &u
}

// MarshalJSON writes t as a JSON string in Layout. Like time.Time's, it fails for a year outside
// 0000-9999.
func (t Time) MarshalJSON() ([]byte, error) {
	b, err := t.AppendText(append(make([]byte, 0, len(Layout)+2), '"'))
	if err != nil {
		return nil, err
	}
	return append(b, '"'), nil
}

// UnmarshalJSON reads a JSON string holding any RFC 3339 time, as time.Time's does (a JSON null
// leaves t as it is).
func (t *Time) UnmarshalJSON(b []byte) error { return t.Time.UnmarshalJSON(b) }

// MarshalText writes t in Layout; it fails as MarshalJSON does.
func (t Time) MarshalText() ([]byte, error) { return t.AppendText(make([]byte, 0, len(Layout))) }

// AppendText appends t in Layout; it fails as MarshalJSON does.
func (t Time) AppendText(b []byte) ([]byte, error) {
	if !InRange(t.Time) {
		return b, fmt.Errorf("timefmt: year %d is outside 0000-9999", t.UTC().Year())
	}
	return Append(b, t.Time), nil
}

// UnmarshalText reads any RFC 3339 time.
func (t *Time) UnmarshalText(b []byte) error { return t.Time.UnmarshalText(b) }
