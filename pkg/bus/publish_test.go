package bus

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var pubAckSeeds = []string{
	`{"stream":"AGENTBUS_HISTORY","seq":12}`,
	`{"stream":"AGENTBUS_INBOX","seq":7,"duplicate":true}`,
	`{"stream":"AGENTBUS_MESSAGES","seq":99}`,
	`{"stream":"S","domain":"hub","seq":3}`,
	`{"stream":"S","seq":3,"domain":"hub","duplicate":true,"val":"5"}`,
	`{"stream":"S","seq":18446744073709551615}`,
	`{"stream":"S","seq":18446744073709551616}`,
	`{"stream":"S","seq":1,"duplicate":false}`,
	`{"stream":"S","seq":1,"batch":"b1","count":2}`,
	`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 4"},"stream":"S","seq":0}`,
	`{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}`,
	`{"stream":"","seq":1}`,
	`{"stream":"S\"x","seq":1}`,
	`{"stream":"S","seq":-1}`,
	`{"stream":"S","seq":1`,
	`not json`,
	``,
}

func TestParsePubAck(t *testing.T) {
	ack, err := parsePubAck([]byte(`{"stream":"AGENTBUS_INBOX","seq":7,"duplicate":true}`))
	require.NoError(t, err)
	assert.Equal(t, &jetstream.PubAck{Stream: "AGENTBUS_INBOX", Sequence: 7, Duplicate: true}, ack)

	_, err = parsePubAck([]byte(`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 4"},"stream":"S","seq":0}`))
	var apiErr *jetstream.APIError
	require.True(t, errors.As(err, &apiErr), "%v", err)
	assert.Equal(t, jetstream.JSErrCodeStreamWrongLastSequence, apiErr.ErrorCode)

	_, err = parsePubAck([]byte(`nope`))
	assert.ErrorIs(t, err, jetstream.ErrInvalidJSAck)

	for _, s := range pubAckSeeds {
		checkPubAck(t, []byte(s))
	}
}

// checkPubAck: whenever the hand-written reader accepts an acknowledgement, encoding/json reads
// the same from it.
func checkPubAck(t *testing.T, data []byte) {
	t.Helper()
	fast, ok := parsePubAckFast(data)
	if !ok {
		return
	}
	slow, err := parsePubAckJSON(data)
	require.NoError(t, err, "fast path accepted %q", data)
	require.Equal(t, slow, fast, "%q", data)
}

func FuzzParsePubAck(f *testing.F) {
	for _, s := range pubAckSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkPubAck(t, data) })
}
