package webhooksig_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// The example of the Standard Webhooks specification: its secret, id, timestamp, payload and
// the signature it documents.
const (
	stdSecret  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	stdID      = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	stdTS      = "1614265330"
	stdPayload = `{"test": 2432232314}`
	stdSig     = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestStandardSignsAsTheSpecification(t *testing.T) {
	s := webhooksig.Standard{Secret: stdSecret}
	h, err := s.Sign(stdID, time.Unix(1614265330, 0), []byte(stdPayload))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"Webhook-Id": stdID, "Webhook-Timestamp": stdTS, "Webhook-Signature": stdSig}, h)
}

func TestStandardVerify(t *testing.T) {
	s := webhooksig.Standard{Secret: stdSecret, Now: at(stdTS)}
	good := map[string]string{"webhook-id": stdID, "webhook-timestamp": stdTS, "webhook-signature": stdSig}
	require.NoError(t, s.Verify(good, []byte(stdPayload)))
	// A list with a signature of another key and another version passes on the v1 that matches.
	require.NoError(t, s.Verify(with(good, "webhook-signature", "v1a,xyz v1,bm90IGl0 "+stdSig), []byte(stdPayload)))

	for name, tc := range map[string]struct {
		header map[string]string
		body   string
		want   error
	}{
		"altered body":    {good, `{"test": 2432232315}`, webhooksig.ErrBadSignature},
		"other id":        {with(good, "webhook-id", "msg_other"), stdPayload, webhooksig.ErrBadSignature},
		"other timestamp": {with(good, "webhook-timestamp", "1614265331"), stdPayload, webhooksig.ErrBadSignature},
		"no v1":           {with(good, "webhook-signature", "v2,"+stdSig[3:]), stdPayload, webhooksig.ErrBadSignature},
		"no signature":    {with(good, "webhook-signature", ""), stdPayload, webhooksig.ErrMissingSignature},
		"no id":           {with(good, "webhook-id", ""), stdPayload, webhooksig.ErrMissingSignature},
		"bad timestamp":   {with(good, "webhook-timestamp", "-1"), stdPayload, webhooksig.ErrMalformedSignature},
		"too old":         {good, stdPayload, webhooksig.ErrTimestamp},
	} {
		t.Run(name, func(t *testing.T) {
			v := s
			if name == "too old" {
				v.Now = func() time.Time { return time.Unix(1614265330, 0).Add(6 * time.Minute) }
			}
			err := v.Verify(tc.header, []byte(tc.body))
			assert.ErrorIs(t, err, tc.want)
			assert.NotContains(t, err.Error(), stdSecret[6:])
		})
	}
}

func TestStandardSecrets(t *testing.T) {
	secret := webhooksig.NewStandardSecret()
	assert.Regexp(t, `^whsec_[A-Za-z0-9+/]{43}=$`, secret)
	assert.NotEqual(t, secret, webhooksig.NewStandardSecret())
	s := webhooksig.Standard{Secret: secret}
	h, err := s.Sign("msg_1", time.Now(), []byte("{}"))
	require.NoError(t, err)
	require.NoError(t, s.Verify(h, []byte("{}")))
	assert.ErrorIs(t, webhooksig.Standard{Secret: "whsec_!!"}.Validate(), webhooksig.ErrInvalidConfig)
	assert.ErrorIs(t, webhooksig.Standard{Secret: secret, Tolerance: -1}.Validate(), webhooksig.ErrInvalidConfig)
}
