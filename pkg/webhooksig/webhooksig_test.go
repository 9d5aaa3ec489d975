package webhooksig_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// GitHub's example in "Validating webhook deliveries" (docs.github.com/en/webhooks/
// using-webhooks/validating-webhook-deliveries, "Testing the webhook payload validation").
const (
	githubSecret = "It's a Secret to Everybody"
	githubBody   = "Hello, World!"
	githubSig    = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
)

// Slack's worked example in "Verifying requests from Slack"
// (api.slack.com/authentication/verifying-requests-from-slack): a slash command's form body.
const (
	slackSecret = "8f742231b10e8888abcd99yyyzzz85a5"
	slackTS     = "1531420618"
	slackBody   = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
	slackSig    = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
)

// Stripe's documentation shows a Stripe-Signature header without the secret and payload that
// produced it, so the vector is the test fixture of Stripe's official .NET library
// (github.com/stripe/stripe-dotnet, src/StripeTests/Services/Events/EventUtilityTest.cs with
// src/StripeTests/Resources/event_test_signature.json, its trailing newline included): the
// header as that test sends it, v0 and all. TestVectorsIndependently recomputes v1 the way
// Stripe documents it (HMAC-SHA256 of t + "." + body under the endpoint secret, in hex), and so
// does `(printf 1533204620. && cat event_test_signature.json) | openssl dgst -sha256 -hmac
// webhook_secret`.
const (
	stripeSecret = "webhook_secret"
	stripeTS     = "1533204620"
	stripeBody   = `{
  "id": "evt_123",
  "object": "event",
  "account": "acct_123",
  "api_version": "2017-05-25",
  "created": 1533204620,
  "data": {
    "object": {
      "id": "cus_123",
      "object": "customer",
      "created": 123456789,
      "email": "test@stripe.com",
      "livemode": false,
      "metadata": {}
    }
  },
  "livemode": false,
  "pending_webhooks": 1,
  "request": {
    "id": "req_123",
    "idempotency_key": "idempotency-key-123"
  },
  "type": "customer.created"
}
`
	stripeV1     = "2220f87ef101a04665f11cdf770523143f875572008577fa0f20882ddb9cc3c7"
	stripeHeader = "t=" + stripeTS + ",v1=" + stripeV1 + ",v0=63f3a72374a733066c4be69ed7f8e5ac85c22c9f0a6a612ab9a025a9e4ee7eef"
)

// Generic vectors, computed with `printf '%s' "$genericBody" | openssl dgst -sha256 -hmac
// generic-secret` (hex) and the same with -binary | base64.
const (
	genericSecret = "generic-secret"
	genericBody   = `{"id":"evt_test_webhook","object":"event"}`
	genericHex    = "8f949157ff92cd536254468b3dc96930b2dd96265761ebef9c1e2d6e35907d09"
	genericBase64 = "j5SRV/+SzVNiVEaLPclpMLLdliZXYevvnB4tbjWQfQk="
)

// hmacHex is an HMAC-SHA256 written out here, not through the package, so that the tests check
// the schemes rather than echo the implementation.
func hmacHex(secret, msg string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

func at(unix string) func() time.Time {
	sec, err := strconv.ParseInt(unix, 10, 64)
	if err != nil {
		panic(err)
	}
	return func() time.Time { return time.Unix(sec, 0) }
}

func with(h map[string]string, k, v string) map[string]string {
	h = maps.Clone(h)
	if v == "" {
		delete(h, k)
	} else {
		h[k] = v
	}
	return h
}

type verifyCase struct {
	name    string
	v       webhooksig.Verifier
	header  map[string]string
	body    string
	wantErr error // nil: accepted
}

func runCases(t *testing.T, cases []verifyCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.v.Verify(tc.header, []byte(tc.body))
			if tc.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.wantErr)
			for _, secret := range []string{githubSecret, slackSecret, stripeSecret, genericSecret} {
				assert.NotContains(t, err.Error(), secret, "an error must not carry the secret")
			}
		})
	}
}

func TestVectorsIndependently(t *testing.T) {
	assert.Equal(t, githubSig, "sha256="+hmacHex(githubSecret, githubBody))
	assert.Equal(t, slackSig, "v0="+hmacHex(slackSecret, "v0:"+slackTS+":"+slackBody))
	assert.Equal(t, stripeV1, hmacHex(stripeSecret, stripeTS+"."+stripeBody))
	assert.Equal(t, genericHex, hmacHex(genericSecret, genericBody))
	raw, err := hex.DecodeString(genericHex)
	require.NoError(t, err)
	assert.Equal(t, genericBase64, base64.StdEncoding.EncodeToString(raw))
}

func TestGitHub(t *testing.T) {
	v := webhooksig.GitHub{Secret: []byte(githubSecret)}
	h := map[string]string{"X-Hub-Signature-256": githubSig}
	runCases(t, []verifyCase{
		{name: "documented vector", v: v, header: h, body: githubBody},
		{name: "lowercase header name", v: v, header: map[string]string{"x-hub-signature-256": githubSig}, body: githubBody},
		{name: "uppercase hex", v: v, header: with(h, "X-Hub-Signature-256", "sha256="+strings.ToUpper(githubSig[7:])), body: githubBody},
		{name: "altered body", v: v, header: h, body: "Hello, World?", wantErr: webhooksig.ErrBadSignature},
		{name: "wrong secret", v: webhooksig.GitHub{Secret: []byte("It's a secret to nobody")}, header: h, body: githubBody, wantErr: webhooksig.ErrBadSignature},
		{name: "missing header", v: v, header: map[string]string{"X-Hub-Signature": "sha1=abc"}, body: githubBody, wantErr: webhooksig.ErrMissingSignature},
		{name: "empty header", v: v, header: with(h, "X-Hub-Signature-256", " "), body: githubBody, wantErr: webhooksig.ErrMissingSignature},
		{name: "nil header map", v: v, body: githubBody, wantErr: webhooksig.ErrMissingSignature},
		{name: "no prefix", v: v, header: with(h, "X-Hub-Signature-256", githubSig[7:]), body: githubBody, wantErr: webhooksig.ErrMalformedSignature},
		{name: "sha1 prefix", v: v, header: with(h, "X-Hub-Signature-256", "sha1="+githubSig[7:]), body: githubBody, wantErr: webhooksig.ErrMalformedSignature},
		{name: "not hex", v: v, header: with(h, "X-Hub-Signature-256", "sha256=zz"+githubSig[9:]), body: githubBody, wantErr: webhooksig.ErrMalformedSignature},
		{name: "truncated", v: v, header: with(h, "X-Hub-Signature-256", githubSig[:len(githubSig)-2]), body: githubBody, wantErr: webhooksig.ErrMalformedSignature},
		{name: "repeated header joined", v: v, header: with(h, "X-Hub-Signature-256", githubSig+", "+githubSig), body: githubBody, wantErr: webhooksig.ErrMalformedSignature},
		{name: "no secret", v: webhooksig.GitHub{}, header: h, body: githubBody, wantErr: webhooksig.ErrInvalidConfig},
	})
}

func TestSlack(t *testing.T) {
	v := webhooksig.Slack{Secret: []byte(slackSecret), Now: at(slackTS)}
	h := map[string]string{"X-Slack-Signature": slackSig, "X-Slack-Request-Timestamp": slackTS}
	// A genuine call signed at ts, for the tolerance cases.
	signedAt := func(ts string) map[string]string {
		return map[string]string{"X-Slack-Signature": "v0=" + hmacHex(slackSecret, "v0:"+ts+":"+slackBody), "X-Slack-Request-Timestamp": ts}
	}
	base, _ := strconv.ParseInt(slackTS, 10, 64)
	ts := func(d time.Duration) string { return strconv.FormatInt(base+int64(d/time.Second), 10) }
	runCases(t, []verifyCase{
		{name: "documented vector", v: v, header: h, body: slackBody},
		{name: "lowercase header names", v: v, header: map[string]string{"x-slack-signature": slackSig, "x-slack-request-timestamp": slackTS}, body: slackBody},
		{name: "altered body", v: v, header: h, body: slackBody + "&x=1", wantErr: webhooksig.ErrBadSignature},
		{name: "altered timestamp", v: v, header: with(h, "X-Slack-Request-Timestamp", ts(time.Second)), body: slackBody, wantErr: webhooksig.ErrBadSignature},
		{name: "wrong secret", v: webhooksig.Slack{Secret: []byte("0000000000000000abcd99yyyzzz85a5"), Now: at(slackTS)}, header: h, body: slackBody, wantErr: webhooksig.ErrBadSignature},
		{name: "missing signature", v: v, header: with(h, "X-Slack-Signature", ""), body: slackBody, wantErr: webhooksig.ErrMissingSignature},
		{name: "missing timestamp", v: v, header: with(h, "X-Slack-Request-Timestamp", ""), body: slackBody, wantErr: webhooksig.ErrMissingSignature},
		{name: "no v0 prefix", v: v, header: with(h, "X-Slack-Signature", slackSig[3:]), body: slackBody, wantErr: webhooksig.ErrMalformedSignature},
		{name: "not hex", v: v, header: with(h, "X-Slack-Signature", "v0=xyz"), body: slackBody, wantErr: webhooksig.ErrMalformedSignature},
		{name: "timestamp not a number", v: v, header: with(h, "X-Slack-Request-Timestamp", "yesterday"), body: slackBody, wantErr: webhooksig.ErrMalformedSignature},
		{name: "signed timestamp not a number", v: v, header: signedAt("-1531420618"), body: slackBody, wantErr: webhooksig.ErrMalformedSignature},
		{name: "5 minutes old", v: v, header: signedAt(ts(-5 * time.Minute)), body: slackBody},
		{name: "5 minutes ahead", v: v, header: signedAt(ts(5 * time.Minute)), body: slackBody},
		{name: "stale", v: v, header: signedAt(ts(-5*time.Minute - time.Second)), body: slackBody, wantErr: webhooksig.ErrTimestamp},
		{name: "future", v: v, header: signedAt(ts(5*time.Minute + time.Second)), body: slackBody, wantErr: webhooksig.ErrTimestamp},
		{name: "documented vector today", v: webhooksig.Slack{Secret: []byte(slackSecret)}, header: h, body: slackBody, wantErr: webhooksig.ErrTimestamp},
		{name: "huge timestamp", v: v, header: signedAt("9223372036854775807"), body: slackBody, wantErr: webhooksig.ErrTimestamp},
		{name: "longer tolerance", v: webhooksig.Slack{Secret: []byte(slackSecret), Now: at(slackTS), Tolerance: time.Hour}, header: signedAt(ts(-59 * time.Minute)), body: slackBody},
		{name: "negative tolerance", v: webhooksig.Slack{Secret: []byte(slackSecret), Tolerance: -time.Second}, header: h, body: slackBody, wantErr: webhooksig.ErrInvalidConfig},
		{name: "no secret", v: webhooksig.Slack{}, header: h, body: slackBody, wantErr: webhooksig.ErrInvalidConfig},
	})
}

func TestStripe(t *testing.T) {
	v := webhooksig.Stripe{Secret: []byte(stripeSecret), Now: at(stripeTS)}
	sig := func(ts string) string { return hmacHex(stripeSecret, ts+"."+stripeBody) }
	header := func(s string) map[string]string { return map[string]string{"Stripe-Signature": s} }
	h := header("t=" + stripeTS + ",v1=" + stripeV1)
	other := strings.Repeat("ab", 32)
	base, _ := strconv.ParseInt(stripeTS, 10, 64)
	signedAt := func(d time.Duration) map[string]string {
		ts := strconv.FormatInt(base+int64(d/time.Second), 10)
		return header("t=" + ts + ",v1=" + sig(ts))
	}
	runCases(t, []verifyCase{
		{name: "stripe-dotnet's vector", v: v, header: header(stripeHeader), body: stripeBody},
		{name: "v1 alone", v: v, header: h, body: stripeBody},
		{name: "without the trailing newline", v: v, header: h, body: strings.TrimSuffix(stripeBody, "\n"), wantErr: webhooksig.ErrBadSignature},
		{name: "lowercase header name", v: v, header: map[string]string{"stripe-signature": "t=" + stripeTS + ",v1=" + stripeV1}, body: stripeBody},
		{name: "any v1 may match", v: v, header: header("t=" + stripeTS + ",v1=" + other + ",v1=" + stripeV1 + ",v0=" + other), body: stripeBody},
		{name: "v0 and unknown schemes ignored", v: v, header: header("v0=" + stripeV1 + ",t=" + stripeTS + ",v9=x,v1=" + stripeV1), body: stripeBody},
		{name: "spaces after commas", v: v, header: header("t=" + stripeTS + ", v1=" + stripeV1), body: stripeBody},
		{name: "altered body", v: v, header: h, body: stripeBody + " ", wantErr: webhooksig.ErrBadSignature},
		{name: "altered timestamp", v: v, header: header("t=1533204621,v1=" + stripeV1), body: stripeBody, wantErr: webhooksig.ErrBadSignature},
		{name: "wrong secret", v: webhooksig.Stripe{Secret: []byte("whsec_other"), Now: at(stripeTS)}, header: h, body: stripeBody, wantErr: webhooksig.ErrBadSignature},
		{name: "only v0 matches", v: v, header: header("t=" + stripeTS + ",v1=" + other + ",v0=" + stripeV1), body: stripeBody, wantErr: webhooksig.ErrBadSignature},
		{name: "missing header", v: v, header: map[string]string{"Content-Type": "application/json"}, body: stripeBody, wantErr: webhooksig.ErrMissingSignature},
		{name: "no t", v: v, header: header("v1=" + stripeV1), body: stripeBody, wantErr: webhooksig.ErrMalformedSignature},
		{name: "t twice", v: v, header: header("t=" + stripeTS + ",t=" + stripeTS + ",v1=" + stripeV1), body: stripeBody, wantErr: webhooksig.ErrMalformedSignature},
		{name: "t not a number", v: v, header: header("t=now,v1=" + stripeV1), body: stripeBody, wantErr: webhooksig.ErrMalformedSignature},
		{name: "no v1", v: v, header: header("t=" + stripeTS + ",v0=" + stripeV1), body: stripeBody, wantErr: webhooksig.ErrMalformedSignature},
		{name: "v1 not hex", v: v, header: header("t=" + stripeTS + ",v1=nothex"), body: stripeBody, wantErr: webhooksig.ErrMalformedSignature},
		{name: "element without =", v: v, header: header("t=" + stripeTS + ",v1"), body: stripeBody, wantErr: webhooksig.ErrMalformedSignature},
		{name: "5 minutes old", v: v, header: signedAt(-5 * time.Minute), body: stripeBody},
		{name: "stale", v: v, header: signedAt(-5*time.Minute - time.Second), body: stripeBody, wantErr: webhooksig.ErrTimestamp},
		{name: "future", v: v, header: signedAt(5*time.Minute + time.Second), body: stripeBody, wantErr: webhooksig.ErrTimestamp},
		{name: "longer tolerance", v: webhooksig.Stripe{Secret: []byte(stripeSecret), Now: at(stripeTS), Tolerance: 10 * time.Minute}, header: signedAt(-9 * time.Minute), body: stripeBody},
		{name: "shorter tolerance", v: webhooksig.Stripe{Secret: []byte(stripeSecret), Now: at(stripeTS), Tolerance: time.Minute}, header: signedAt(-2 * time.Minute), body: stripeBody, wantErr: webhooksig.ErrTimestamp},
		{name: "real clock", v: webhooksig.Stripe{Secret: []byte(stripeSecret)}, header: h, body: stripeBody, wantErr: webhooksig.ErrTimestamp},
		{name: "no secret", v: webhooksig.Stripe{Now: at(stripeTS)}, header: h, body: stripeBody, wantErr: webhooksig.ErrInvalidConfig},
	})

	// The real clock: a call signed now passes without Now set.
	now := strconv.FormatInt(time.Now().Unix(), 10)
	require.NoError(t, webhooksig.Stripe{Secret: []byte(stripeSecret)}.Verify(header("t="+now+",v1="+sig(now)), []byte(stripeBody)))
}

func TestHMAC(t *testing.T) {
	hexV := webhooksig.HMAC{Secret: []byte(genericSecret), Header: "x-signature", Prefix: "sha256="}
	b64V := webhooksig.HMAC{Secret: []byte(genericSecret), Header: "X-Shopify-Hmac-Sha256", Encoding: webhooksig.Base64}
	hexH := map[string]string{"X-Signature": "sha256=" + genericHex}
	b64H := map[string]string{"X-Shopify-Hmac-Sha256": genericBase64}
	runCases(t, []verifyCase{
		{name: "hex with prefix", v: hexV, header: hexH, body: genericBody},
		{name: "hex without prefix", v: webhooksig.HMAC{Secret: []byte(genericSecret), Header: "X-Signature"}, header: map[string]string{"X-Signature": genericHex}, body: genericBody},
		{name: "base64", v: b64V, header: b64H, body: genericBody},
		{name: "altered body", v: hexV, header: hexH, body: genericBody + "\n", wantErr: webhooksig.ErrBadSignature},
		{name: "base64 altered body", v: b64V, header: b64H, body: "{}", wantErr: webhooksig.ErrBadSignature},
		{name: "wrong secret", v: webhooksig.HMAC{Secret: []byte("generic-secreT"), Header: "X-Signature", Prefix: "sha256="}, header: hexH, body: genericBody, wantErr: webhooksig.ErrBadSignature},
		{name: "missing header", v: hexV, header: b64H, body: genericBody, wantErr: webhooksig.ErrMissingSignature},
		{name: "missing prefix", v: hexV, header: map[string]string{"X-Signature": genericHex}, body: genericBody, wantErr: webhooksig.ErrMalformedSignature},
		{name: "base64 where hex expected", v: webhooksig.HMAC{Secret: []byte(genericSecret), Header: "X-Shopify-Hmac-Sha256"}, header: b64H, body: genericBody, wantErr: webhooksig.ErrMalformedSignature},
		{name: "hex where base64 expected", v: b64V, header: map[string]string{"X-Shopify-Hmac-Sha256": genericHex}, body: genericBody, wantErr: webhooksig.ErrMalformedSignature},
		{name: "base64 unpadded", v: b64V, header: map[string]string{"X-Shopify-Hmac-Sha256": strings.TrimRight(genericBase64, "=")}, body: genericBody, wantErr: webhooksig.ErrMalformedSignature},
		{name: "no header name", v: webhooksig.HMAC{Secret: []byte(genericSecret)}, header: hexH, body: genericBody, wantErr: webhooksig.ErrInvalidConfig},
		{name: "no secret", v: webhooksig.HMAC{Header: "X-Signature"}, header: hexH, body: genericBody, wantErr: webhooksig.ErrInvalidConfig},
		{name: "unknown encoding", v: webhooksig.HMAC{Secret: []byte(genericSecret), Header: "X-Signature", Encoding: 7}, header: hexH, body: genericBody, wantErr: webhooksig.ErrInvalidConfig},
	})
}

// GitHub is the generic HMAC with GitHub's header and prefix.
func TestGitHubIsHMAC(t *testing.T) {
	h := map[string]string{"X-Hub-Signature-256": githubSig}
	v := webhooksig.HMAC{Secret: []byte(githubSecret), Header: "X-Hub-Signature-256", Prefix: "sha256="}
	require.NoError(t, v.Verify(h, []byte(githubBody)))
}

func TestErrorsDoNotEchoSecretsOrSignatures(t *testing.T) {
	secret := []byte("top-secret-value")
	h := map[string]string{
		"X-Hub-Signature-256": "sha256=" + strings.Repeat("00", 32), "Stripe-Signature": "t=1,v1=" + strings.Repeat("00", 32),
		"X-Slack-Signature": "v0=" + strings.Repeat("00", 32), "X-Slack-Request-Timestamp": "1",
	}
	for _, v := range []webhooksig.Verifier{
		webhooksig.GitHub{Secret: secret}, webhooksig.Stripe{Secret: secret}, webhooksig.Slack{Secret: secret},
		webhooksig.HMAC{Secret: secret, Header: "X-Hub-Signature-256", Prefix: "sha256="},
	} {
		err := v.Verify(h, []byte("body"))
		require.ErrorIs(t, err, webhooksig.ErrBadSignature)
		assert.NotContains(t, err.Error(), string(secret))
		assert.NotContains(t, err.Error(), "0000", "the received or expected signature")
	}
}
