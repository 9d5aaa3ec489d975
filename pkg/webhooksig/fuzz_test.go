package webhooksig_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// FuzzVerify feeds arbitrary header values and bodies to every verifier: none may panic, and
// each refusal must be one of the package's errors, which Reject maps to an answer.
func FuzzVerify(f *testing.F) {
	f.Add("sha256="+githubSig[7:], "t="+stripeTS+",v1="+stripeV1, slackSig, slackTS, genericBase64, githubBody)
	f.Add("", "", "", "", "", "")
	f.Add("sha256=", "t=,v1=", "v0=", "-1", "====", "x")
	f.Add("sha256=zz", "t=99999999999999999999,v1=00", "v0=0", "9223372036854775807", "AA==", "")
	f.Add("sha256", ",,,=,t,v1==,", "v0==", "+1", "%%%", "\x00\xff")
	now := func() time.Time { return time.Unix(1531420618, 0) }
	verifiers := []webhooksig.Verifier{
		webhooksig.GitHub{Secret: []byte(githubSecret)},
		webhooksig.Stripe{Secret: []byte(stripeSecret), Now: now},
		webhooksig.Slack{Secret: []byte(slackSecret), Now: now},
		webhooksig.HMAC{Secret: []byte(genericSecret), Header: "X-Signature", Prefix: "sha256="},
		webhooksig.HMAC{Secret: []byte(genericSecret), Header: "X-Signature", Encoding: webhooksig.Base64},
	}
	known := []error{webhooksig.ErrMissingSignature, webhooksig.ErrMalformedSignature, webhooksig.ErrBadSignature, webhooksig.ErrTimestamp}
	f.Fuzz(func(t *testing.T, github, stripe, slackSig, slackTS, generic, body string) {
		header := map[string]string{
			"X-Hub-Signature-256":       github,
			"Stripe-Signature":          stripe,
			"X-Slack-Signature":         slackSig,
			"X-Slack-Request-Timestamp": slackTS,
			"X-Signature":               generic,
			// A second spelling of one name, as a map built by hand might hold.
			"x-signature": github,
		}
		for _, v := range verifiers {
			err := v.Verify(header, []byte(body))
			if err == nil {
				continue
			}
			ok := false
			for _, k := range known {
				ok = ok || errors.Is(err, k)
			}
			require.True(t, ok, "%T: unexpected error %v", v, err)
		}
	})
}
