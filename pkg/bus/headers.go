package bus

import (
	"strings"
	"unicode/utf8"
)

// A request's HTTP headers travel in its envelope as one block of lines, "Name: value\n" each,
// rather than as a protobuf map: a map is marshalled through reflection, with two allocations per
// entry on each side, and every webhook call carries a handful of headers.

// AppendHeader appends one header line to a block. A name or value holding a line break or a
// name holding a colon cannot be told apart in the block and is left out: net/http refuses such
// headers before a handler sees them, so only a caller building headers by hand could pass one.
func AppendHeader(dst []byte, name, value string) []byte {
	if name == "" || strings.ContainsAny(name, ":\r\n") || strings.ContainsAny(value, "\r\n") {
		return dst
	}
	dst = append(dst, name...)
	dst = append(dst, ": "...)
	dst = append(dst, value...)
	return append(dst, '\n')
}

// ParseHeaders reads a block written by AppendHeader into a map of name to value. The names and
// values share one copy of the block. A malformed line is skipped; nil or empty gives an empty map.
func ParseHeaders(block []byte) map[string]string {
	s := string(block)
	h := make(map[string]string, strings.Count(s, "\n"))
	for line := range strings.Lines(s) {
		line = strings.TrimSuffix(line, "\n")
		name, value, ok := strings.Cut(line, ": ")
		if !ok || name == "" {
			continue
		}
		h[name] = value
	}
	return h
}

// maxErrorLen bounds an error text kept in a header (a panic's text may be long).
const maxErrorLen = 1024

// HeaderSafe makes an error text fit a NATS header value: one line, valid UTF-8, at most
// about 1 KiB.
func HeaderSafe(s string) string {
	s = strings.ToValidUTF8(s, "?")
	s = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' || r == '\t' {
			return ' '
		}
		return r
	}, s)
	if len(s) > maxErrorLen {
		cut := maxErrorLen
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
