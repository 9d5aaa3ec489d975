// Package webhooksig verifies the HMAC-SHA256 signatures that GitHub, Stripe, Slack, Standard
// Webhooks senders and other providers put on the webhook calls they send, so that a webhook
// handler acts only on calls that really come from the provider. [Standard] also signs calls.
//
// Each provider is a small config struct whose Verify method takes what an
// [agent.WebhookRequest] carries: its Header map and its raw Body.
//
//	gh := webhooksig.GitHub{Secret: secret}
//	if err := gh.Verify(r.Header, r.Body); err != nil {
//		return webhooksig.Reject(err) // 401
//	}
//
// or, for a whole handler, [Require]:
//
//	a.Webhook("push", webhooksig.Require(gh, log)(agent.WebhookFunc(push)))
//
// Verify must see the body byte for byte as the provider sent it; agentbus passes it unchanged.
// Signatures are compared in constant time, and errors never contain the secret or the expected
// signature. Stripe and Slack also sign a timestamp; calls older or newer than the tolerance
// (5 minutes unless set) are refused, which limits replays.
//
// The package is not for schemes that are not HMAC-SHA256 (such as Standard Webhooks' Ed25519
// "v1a" signatures) or for authenticating callers of the agentbus API, which the ingress
// does with API keys before a handler runs.
package webhooksig

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Errors Verify returns, wrapped with the header it was checking. Callers test them with
// errors.Is; [Reject] turns them into a 401 answer.
var (
	// ErrMissingSignature: a header the signature needs (the signature, or Slack's timestamp)
	// is absent or empty.
	ErrMissingSignature = errors.New("webhooksig: missing signature")
	// ErrMalformedSignature: the header does not have the provider's format (no prefix, not
	// hex, no timestamp, …).
	ErrMalformedSignature = errors.New("webhooksig: malformed signature")
	// ErrBadSignature: the signature is well formed but does not match the body and the
	// secret: the body was altered, the secret is wrong, or the call is forged.
	ErrBadSignature = errors.New("webhooksig: signature does not match")
	// ErrTimestamp: the signature matches, but its timestamp is further from now than the
	// tolerance, in the past (a delayed or replayed call) or in the future.
	ErrTimestamp = errors.New("webhooksig: timestamp outside tolerance")
	// ErrInvalidConfig: the verifier itself is unusable (no secret, no header name, a
	// negative tolerance). Verify fails closed with it; it is a 500, not the caller's fault.
	ErrInvalidConfig = errors.New("webhooksig: invalid verifier config")
)

// A Verifier checks the signature of one webhook call. header holds the call's HTTP headers
// (looked up case-insensitively; [agent.WebhookRequest.Header] uses canonical names) and body
// its raw body. GitHub, Stripe, Slack and HMAC implement it.
type Verifier interface {
	Verify(header map[string]string, body []byte) error
}

// Encoding is how a generic HMAC signature is written in its header.
type Encoding int

const (
	// Hex is lowercase or uppercase hexadecimal, the zero value.
	Hex Encoding = iota
	// Base64 is standard base64 with padding (RFC 4648 section 4), as Shopify uses.
	Base64
)

// HMAC verifies a signature that is the HMAC-SHA256 of the body alone, written in one header,
// optionally after a fixed prefix. GitHub is HMAC{Header: "X-Hub-Signature-256",
// Prefix: "sha256="}.
type HMAC struct {
	// Secret is the shared signing secret. Required.
	Secret []byte
	// Header names the header carrying the signature, in any case. Required.
	Header string
	// Prefix, when set, must start the header value and is removed before decoding
	// (for example "sha256="). Matched exactly.
	Prefix string
	// Encoding of the signature: Hex (the zero value) or Base64.
	Encoding Encoding
}

// Validate reports whether h can verify anything.
func (h HMAC) Validate() error {
	switch {
	case len(h.Secret) == 0:
		return fmt.Errorf("%w: HMAC.Secret is empty", ErrInvalidConfig)
	case strings.TrimSpace(h.Header) == "":
		return fmt.Errorf("%w: HMAC.Header is empty", ErrInvalidConfig)
	case h.Encoding != Hex && h.Encoding != Base64:
		return fmt.Errorf("%w: HMAC.Encoding %d is unknown", ErrInvalidConfig, h.Encoding)
	}
	return nil
}

// Verify checks that the header named h.Header carries h.Prefix followed by the encoded
// HMAC-SHA256 of body under h.Secret.
func (h HMAC) Verify(header map[string]string, body []byte) error {
	if err := h.Validate(); err != nil {
		return err
	}
	name := http.CanonicalHeaderKey(strings.TrimSpace(h.Header))
	v, ok := lookup(header, name)
	if !ok {
		return fmt.Errorf("checking %s: %w", name, ErrMissingSignature)
	}
	got, err := h.decode(v)
	if err != nil {
		return fmt.Errorf("checking %s: %w", name, err)
	}
	if !hmac.Equal(got, mac(h.Secret, body)) {
		return fmt.Errorf("checking %s: %w", name, ErrBadSignature)
	}
	return nil
}

func (h HMAC) decode(v string) ([]byte, error) {
	s, ok := strings.CutPrefix(v, h.Prefix)
	if !ok {
		return nil, fmt.Errorf("no %q prefix: %w", h.Prefix, ErrMalformedSignature)
	}
	var got []byte
	var err error
	if h.Encoding == Base64 {
		got, err = base64.StdEncoding.DecodeString(s)
	} else {
		got, err = hex.DecodeString(s)
	}
	if err != nil || len(got) != sha256.Size {
		return nil, fmt.Errorf("not a %s-encoded SHA-256 HMAC: %w", h.Encoding, ErrMalformedSignature)
	}
	return got, nil
}

func (e Encoding) String() string {
	switch e {
	case Hex:
		return "hex"
	case Base64:
		return "base64"
	}
	return fmt.Sprintf("Encoding(%d)", int(e))
}

// GitHub verifies GitHub's X-Hub-Signature-256 header: "sha256=" and the hex HMAC-SHA256 of
// the body under the webhook's secret. The legacy SHA-1 X-Hub-Signature header is not
// accepted.
type GitHub struct {
	// Secret is the webhook's secret as entered in GitHub. Required.
	Secret []byte
}

// Validate reports whether g can verify anything.
func (g GitHub) Validate() error {
	if len(g.Secret) == 0 {
		return fmt.Errorf("%w: GitHub.Secret is empty", ErrInvalidConfig)
	}
	return nil
}

// Verify checks the X-Hub-Signature-256 header against body.
func (g GitHub) Verify(header map[string]string, body []byte) error {
	if err := g.Validate(); err != nil {
		return err
	}
	return HMAC{Secret: g.Secret, Header: "X-Hub-Signature-256", Prefix: "sha256="}.Verify(header, body)
}

// mac is the HMAC-SHA256 of the parts, concatenated, under secret.
func mac(secret []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, secret)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// lookup finds a header by its canonical name, else in any case (for maps built by hand), and
// reports an empty value as absent.
func lookup(header map[string]string, canonical string) (string, bool) {
	v, ok := header[canonical]
	if !ok {
		for k, hv := range header {
			if strings.EqualFold(k, canonical) {
				v, ok = hv, true
				break
			}
		}
	}
	v = strings.TrimSpace(v)
	return v, ok && v != ""
}
