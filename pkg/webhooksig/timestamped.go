package webhooksig

import (
	"crypto/hmac"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// DefaultTolerance is how far a signed timestamp may be from now when a verifier's Tolerance
// is zero: 5 minutes, what Stripe's libraries and Slack's documentation use.
const DefaultTolerance = 5 * time.Minute

// Stripe verifies Stripe's Stripe-Signature header,
// "t=<unix seconds>,v1=<hex>[,v1=<hex>…][,v0=…]": each v1 is the hex HMAC-SHA256 of
// t + "." + body under the endpoint's signing secret, and any one of them may match (Stripe
// sends several while a secret is being rolled). Other schemes (v0, test-mode signatures) are
// ignored.
type Stripe struct {
	// Secret is the endpoint's signing secret, the whole "whsec_…" string. Required.
	Secret []byte
	// Tolerance is how far t may be from now, either way; zero means DefaultTolerance.
	Tolerance time.Duration
	// Now returns the current time; nil means time.Now. Tests set it.
	Now func() time.Time
}

// Validate reports whether s can verify anything.
func (s Stripe) Validate() error {
	switch {
	case len(s.Secret) == 0:
		return fmt.Errorf("%w: Stripe.Secret is empty", ErrInvalidConfig)
	case s.Tolerance < 0:
		return fmt.Errorf("%w: Stripe.Tolerance is negative", ErrInvalidConfig)
	}
	return nil
}

// Verify checks the Stripe-Signature header against body, then its timestamp.
func (s Stripe) Verify(header map[string]string, body []byte) error {
	if err := s.Validate(); err != nil {
		return err
	}
	const name = "Stripe-Signature"
	v, ok := lookup(header, name)
	if !ok {
		return fmt.Errorf("checking %s: %w", name, ErrMissingSignature)
	}
	ts, sigs, err := parseStripe(v)
	if err != nil {
		return fmt.Errorf("checking %s: %w", name, err)
	}
	sec, err := parseUnix(ts)
	if err != nil {
		return fmt.Errorf("checking %s: %w", name, err)
	}
	want := mac(s.Secret, []byte(ts), []byte("."), body)
	matched := false
	for _, sig := range sigs {
		if hmac.Equal(sig, want) {
			matched = true
			break
		}
	}
	if !matched {
		return fmt.Errorf("checking %s: %w", name, ErrBadSignature)
	}
	if err := checkTime(sec, now(s.Now), tolerance(s.Tolerance)); err != nil {
		return fmt.Errorf("checking %s: %w", name, err)
	}
	return nil
}

// parseStripe returns the header's t, as sent (it is signed as text), and its decoded v1
// signatures.
func parseStripe(v string) (ts string, sigs [][]byte, err error) {
	for item := range strings.SplitSeq(v, ",") {
		key, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return "", nil, fmt.Errorf("element without '=': %w", ErrMalformedSignature)
		}
		switch key {
		case "t":
			if ts != "" {
				return "", nil, fmt.Errorf("t given twice: %w", ErrMalformedSignature)
			}
			if ts = val; ts == "" {
				return "", nil, fmt.Errorf("empty t: %w", ErrMalformedSignature)
			}
		case "v1":
			// A v1 that is not a SHA-256 HMAC cannot match; the others still may.
			if b, err := hex.DecodeString(val); err == nil && len(b) == 32 {
				sigs = append(sigs, b)
			}
		}
	}
	switch {
	case ts == "":
		return "", nil, fmt.Errorf("no t: %w", ErrMalformedSignature)
	case len(sigs) == 0:
		return "", nil, fmt.Errorf("no v1 signature: %w", ErrMalformedSignature)
	}
	return ts, sigs, nil
}

// Slack verifies Slack's X-Slack-Signature header, "v0=" and the hex HMAC-SHA256 of
// "v0:" + X-Slack-Request-Timestamp + ":" + body under the app's signing secret, and that the
// timestamp is within the tolerance of now.
type Slack struct {
	// Secret is the app's signing secret (Basic Information, App Credentials). Required. It is
	// not the deprecated verification token.
	Secret []byte
	// Tolerance is how far the timestamp may be from now, either way; zero means
	// DefaultTolerance, the 5 minutes Slack documents.
	Tolerance time.Duration
	// Now returns the current time; nil means time.Now. Tests set it.
	Now func() time.Time
}

// Validate reports whether s can verify anything.
func (s Slack) Validate() error {
	switch {
	case len(s.Secret) == 0:
		return fmt.Errorf("%w: Slack.Secret is empty", ErrInvalidConfig)
	case s.Tolerance < 0:
		return fmt.Errorf("%w: Slack.Tolerance is negative", ErrInvalidConfig)
	}
	return nil
}

// Verify checks the X-Slack-Signature header against the timestamp and body, then the
// timestamp.
func (s Slack) Verify(header map[string]string, body []byte) error {
	if err := s.Validate(); err != nil {
		return err
	}
	const sigName, tsName = "X-Slack-Signature", "X-Slack-Request-Timestamp"
	v, ok := lookup(header, sigName)
	if !ok {
		return fmt.Errorf("checking %s: %w", sigName, ErrMissingSignature)
	}
	ts, ok := lookup(header, tsName)
	if !ok {
		return fmt.Errorf("checking %s: %w", tsName, ErrMissingSignature)
	}
	sec, err := parseUnix(ts)
	if err != nil {
		return fmt.Errorf("checking %s: %w", tsName, err)
	}
	hexSig, ok := strings.CutPrefix(v, "v0=")
	if !ok {
		return fmt.Errorf("checking %s: no \"v0=\" prefix: %w", sigName, ErrMalformedSignature)
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil || len(got) != 32 {
		return fmt.Errorf("checking %s: not a hex SHA-256 HMAC: %w", sigName, ErrMalformedSignature)
	}
	if !hmac.Equal(got, mac(s.Secret, []byte("v0:"), []byte(ts), []byte(":"), body)) {
		return fmt.Errorf("checking %s: %w", sigName, ErrBadSignature)
	}
	if err := checkTime(sec, now(s.Now), tolerance(s.Tolerance)); err != nil {
		return fmt.Errorf("checking %s: %w", tsName, err)
	}
	return nil
}

// checkTime reports whether the Unix time sec is within tol of now. It runs after the
// signature matched, so ErrTimestamp always means a genuine call that came too late (or from
// a clock far ahead), not a forgery.
func checkTime(sec int64, now time.Time, tol time.Duration) error {
	// Sub saturates instead of overflowing, so absurd timestamps are simply far off.
	d := now.Sub(time.Unix(sec, 0))
	switch {
	case d > tol:
		return fmt.Errorf("timestamp %d is %s old, tolerance %s: %w", sec, d.Truncate(time.Second), tol, ErrTimestamp)
	case d < -tol:
		return fmt.Errorf("timestamp %d is %s ahead, tolerance %s: %w", sec, (-d).Truncate(time.Second), tol, ErrTimestamp)
	}
	return nil
}

// parseUnix parses decimal Unix seconds: digits only, no sign.
func parseUnix(ts string) (int64, error) {
	if ts == "" || ts[0] < '0' || ts[0] > '9' {
		return 0, fmt.Errorf("timestamp is not Unix seconds: %w", ErrMalformedSignature)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("timestamp is not Unix seconds: %w", ErrMalformedSignature)
	}
	return sec, nil
}

func now(f func() time.Time) time.Time {
	if f == nil {
		return time.Now()
	}
	return f()
}

func tolerance(d time.Duration) time.Duration {
	if d == 0 {
		return DefaultTolerance
	}
	return d
}
