package webhooksig

import (
	"crypto/hmac"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// StandardSecretPrefix starts a Standard Webhooks secret; the base64 key follows it.
const StandardSecretPrefix = "whsec_"

// Standard signs and verifies webhooks by the Standard Webhooks specification
// (https://www.standardwebhooks.com), which Svix-based providers use: the headers webhook-id,
// webhook-timestamp (Unix seconds) and webhook-signature, a space-separated list of
// "v1,{base64 HMAC-SHA256 of id.timestamp.body}". A receiver accepts a call when any v1
// signature of the list matches, which lets a sender sign with an old and a new secret while it
// rotates them.
type Standard struct {
	// Secret is "whsec_" and the base64 of the key (a bare base64 key is accepted too).
	Secret string
	// Tolerance is how far the timestamp may be from now, either way; zero means
	// DefaultTolerance (5 minutes, as the specification recommends).
	Tolerance time.Duration
	// Now returns the current time; nil means time.Now. Tests set it.
	Now func() time.Time
}

// NewStandardSecret returns a new random Standard Webhooks secret of 32 bytes.
func NewStandardSecret() string {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	return StandardSecretPrefix + base64.StdEncoding.EncodeToString(key)
}

// key decodes the secret.
func (s Standard) key() ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s.Secret, StandardSecretPrefix))
	if err != nil || len(k) == 0 {
		return nil, fmt.Errorf("%w: Standard.Secret is not whsec_ and a base64 key", ErrInvalidConfig)
	}
	return k, nil
}

// Validate reports whether s can sign and verify.
func (s Standard) Validate() error {
	if s.Tolerance < 0 {
		return fmt.Errorf("%w: Standard.Tolerance is negative", ErrInvalidConfig)
	}
	_, err := s.key()
	return err
}

// Sign returns the headers of a call with this id, time and body: webhook-id,
// webhook-timestamp and webhook-signature.
func (s Standard) Sign(id string, at time.Time, body []byte) (map[string]string, error) {
	key, err := s.key()
	if err != nil {
		return nil, err
	}
	ts := strconv.FormatInt(at.Unix(), 10)
	sig := "v1," + base64.StdEncoding.EncodeToString(mac(key, []byte(id), []byte("."), []byte(ts), []byte("."), body))
	return map[string]string{"Webhook-Id": id, "Webhook-Timestamp": ts, "Webhook-Signature": sig}, nil
}

// Verify checks the webhook-signature header against webhook-id, webhook-timestamp and body,
// then the timestamp.
func (s Standard) Verify(header map[string]string, body []byte) error {
	if err := s.Validate(); err != nil {
		return err
	}
	key, _ := s.key()
	const idName, tsName, sigName = "Webhook-Id", "Webhook-Timestamp", "Webhook-Signature"
	values := map[string]string{}
	for _, name := range []string{idName, tsName, sigName} {
		v, ok := lookup(header, name)
		if !ok {
			return fmt.Errorf("checking %s: %w", name, ErrMissingSignature)
		}
		values[name] = v
	}
	sec, err := parseUnix(values[tsName])
	if err != nil {
		return fmt.Errorf("checking %s: %w", tsName, err)
	}
	want := mac(key, []byte(values[idName]), []byte("."), []byte(values[tsName]), []byte("."), body)
	if !anyV1Matches(values[sigName], want) {
		return fmt.Errorf("checking %s: %w", sigName, ErrBadSignature)
	}
	if err := checkTime(sec, now(s.Now), tolerance(s.Tolerance)); err != nil {
		return fmt.Errorf("checking %s: %w", tsName, err)
	}
	return nil
}

// anyV1Matches reports whether a v1 signature of the space-separated list is want. Signatures
// of other versions are skipped, as the specification asks.
func anyV1Matches(list string, want []byte) bool {
	for _, sig := range strings.Fields(list) {
		b64, ok := strings.CutPrefix(sig, "v1,")
		if !ok {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			return true
		}
	}
	return false
}
