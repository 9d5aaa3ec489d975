package subject

import (
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Limits of the values callers give that become part of a subject, a key-value key, an object
// name or a header (docs/identifiers.md#limits). Every such value is checked where it enters
// agentbus with one of the Check functions below, before anything is sent to NATS: the builders
// of this package take values within these limits for granted, and with them no subject they
// build is longer than MaxSubjectBytes.
const (
	// MaxTenantBytes bounds a tenant id (CheckTenant).
	MaxTenantBytes = 64
	// MaxNameBytes bounds a name (CheckName): an agent name, a workflow type, an activation, a
	// participant, a method, a schedule, a topic.
	MaxNameBytes = 256
	// MaxWorkflowIDBytes bounds a workflow id: a tenant id and three names, joined by ':'.
	MaxWorkflowIDBytes = MaxTenantBytes + 3*MaxNameBytes + 3
	// MaxRequestIDBytes bounds a request id a caller chooses (CheckRequestID).
	MaxRequestIDBytes = 200
	// MaxIDBytes bounds an id agentbus made, as a caller names it back (CheckID): a key id, a
	// subscription id.
	MaxIDBytes = 64
	// MaxNumberBytes bounds a whole number a caller names (CheckNumber): a dead letter's or an
	// undelivered event's id, a stream sequence.
	MaxNumberBytes = 20
	// MaxParamBytes bounds every other path or query parameter (CheckParam): cursors, times,
	// limits, names of things that are not on the bus.
	MaxParamBytes = 1024
	// MaxSubjectBytes is the longest subject the builders of this package make from values
	// within the limits above (an Agent2Agent conversation's participant, "agent:" and the
	// calling agent's name lowercased, may be 390 bytes long). NATS refuses a protocol line
	// longer than 4096 bytes and closes the connection that sent it; this leaves room for the
	// verb, a reply subject, a JetStream API prefix and the sizes.
	MaxSubjectBytes = 2304
)

// ValueError is a caller's value refused by a Check function: the field it was given in (a
// path or query parameter, a header, a body field, as the caller named it) and the rule it
// breaks. Its text is safe to show the caller: it never repeats the value. Without a field, it
// is the reason alone, to follow a name the caller of the Check function gives it.
type ValueError struct {
	Field  string
	Reason string
}

func (e *ValueError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + " " + e.Reason
}

func refuse(field, format string, args ...any) error {
	return &ValueError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// CheckTenant checks a tenant id: 1 to MaxTenantBytes characters of A-Z, a-z, 0-9, _ and -, so
// that it is one subject token as it is.
func CheckTenant(field, id string) error {
	if len(id) == 0 || len(id) > MaxTenantBytes {
		return refuse(field, "must be 1-%d characters of A-Z, a-z, 0-9, _ and -", MaxTenantBytes)
	}
	if !tokenSafe(id) {
		return refuse(field, "must be 1-%d characters of A-Z, a-z, 0-9, _ and -", MaxTenantBytes)
	}
	return nil
}

// CheckID checks an id agentbus made (a key id, a subscription id) as a caller names it back:
// 1 to MaxIDBytes characters of A-Z, a-z, 0-9, _ and -, so that it is one subject token as it
// is. A value that passes may still name nothing.
func CheckID(field, id string) error {
	if len(id) == 0 || len(id) > MaxIDBytes || !tokenSafe(id) {
		return refuse(field, "must be 1-%d characters of A-Z, a-z, 0-9, _ and -", MaxIDBytes)
	}
	return nil
}

// CheckNumber checks a whole number given as text: 1 to MaxNumberBytes digits 0-9.
func CheckNumber(field, v string) error {
	if len(v) == 0 || len(v) > MaxNumberBytes {
		return refuse(field, "must be a whole number of 1-%d digits", MaxNumberBytes)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return refuse(field, "must be a whole number of 1-%d digits", MaxNumberBytes)
		}
	}
	return nil
}

// CheckName checks a name: 1 to MaxNameBytes bytes of text (CheckText).
func CheckName(field, name string) error {
	if name == "" {
		return refuse(field, "is empty")
	}
	return CheckText(field, name, MaxNameBytes)
}

// CheckRequestID checks a request id a caller chose (an Idempotency-Key, a send's requestId):
// 1 to MaxRequestIDBytes bytes of text (CheckText).
func CheckRequestID(field, id string) error {
	if id == "" {
		return refuse(field, "is empty")
	}
	return CheckText(field, id, MaxRequestIDBytes)
}

// CheckParam checks any other parameter a caller gives: at most MaxParamBytes bytes of text
// (CheckText), possibly empty.
func CheckParam(field, v string) error { return CheckText(field, v, MaxParamBytes) }

// CheckText checks text of at most max bytes: valid UTF-8 without control characters (C0, DEL
// and C1, which covers NUL, tab, newlines and escapes) and without U+FFFD, the replacement
// character a lossy decoding leaves in place of what it could not read. The empty text passes.
func CheckText(field, s string, max int) error {
	if len(s) > max {
		return refuse(field, "is longer than %d bytes", max)
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return refuse(field, "contains a control character")
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError {
			return refuse(field, "is not valid UTF-8")
		}
		if unicode.IsControl(r) {
			return refuse(field, "contains a control character")
		}
		i += size
	}
	return nil
}

// tokenSafe reports whether s holds only A-Z, a-z, 0-9, _ and -.
func tokenSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// MaxQuotedBytes bounds how much of a caller's value Quote repeats.
const MaxQuotedBytes = 80

// Quote quotes a caller's value for an error message or a log line, as strconv.Quote does, but
// repeats at most MaxQuotedBytes bytes of it, cut at a character's start and followed by "…":
// a message that names what it refuses does not repeat a large value.
func Quote(v string) string {
	if len(v) <= MaxQuotedBytes {
		return strconv.Quote(v)
	}
	n := MaxQuotedBytes
	for n > 0 && !utf8.RuneStart(v[n]) {
		n--
	}
	return strconv.Quote(v[:n]) + "…"
}
