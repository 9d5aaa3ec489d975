// Package jsonenc appends JSON values to byte slices without reflection, for the messages written
// on every call (stored history messages, the webhook call summary). Its output is byte for byte
// what encoding/json writes for the same values, HTML-safe escaping included, so that stored data
// does not change shape with the encoder.
package jsonenc

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

const hex = "0123456789abcdef"

// AppendString appends s as a JSON string, escaped as encoding/json escapes it: quotes,
// backslashes, control characters, <, > and &, U+2028 and U+2029; invalid UTF-8 becomes U+FFFD.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if safe(b) {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				// Other control characters, and <, > and & (HTML-safe).
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// safe reports whether an ASCII byte goes into a JSON string as it is.
func safe(b byte) bool {
	return b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&'
}

// AppendInt appends an integer.
func AppendInt(dst []byte, n int64) []byte { return strconv.AppendInt(dst, n, 10) }

// AppendRaw appends a JSON value already encoded, compacted and HTML-escaped as encoding/json
// writes a json.RawMessage; nil or empty appends null. It fails on invalid JSON.
func AppendRaw(dst []byte, raw []byte) ([]byte, error) {
	if len(raw) == 0 {
		return append(dst, "null"...), nil
	}
	buf := bytes.NewBuffer(dst)
	if err := json.Compact(buf, raw); err != nil {
		return dst, err
	}
	out := buf.Bytes()
	added := out[len(dst):]
	if !bytes.ContainsAny(added, "<>&\u2028\u2029") {
		return out, nil
	}
	// Rare: escape what HTML-safe output escapes, as encoding/json does.
	var esc bytes.Buffer
	json.HTMLEscape(&esc, added)
	return append(out[:len(dst)], esc.Bytes()...), nil
}
