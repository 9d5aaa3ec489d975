package ingress_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/stacktest"
)

func TestWebhookCountCompleteNewRun(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	wf := "default:Echo:Supervisor Workflow:counting"

	status, ct, b := call(t, s.URL, wf, "count", q("apikey", s.Key), nil)
	require.Equal(t, http.StatusOK, status, "first count: %s", b)
	require.Equal(t, "application/json", ct, "first count")
	first := decode(t, b)
	require.Equal(t, 1.0, first["count"], "first count")
	_, _, b = call(t, s.URL, wf, "count", q("apikey", s.Key), nil)
	second := decode(t, b)
	assert.Equal(t, 2.0, second["count"], "second count")
	assert.Equal(t, first["runId"], second["runId"], "second call's run")
	status, _, b = call(t, s.URL, wf, "complete", q("apikey", s.Key), nil)
	require.Equal(t, http.StatusOK, status, "complete: %s", b)
	_, _, b = call(t, s.URL, wf, "count", q("apikey", s.Key), nil)
	third := decode(t, b)
	assert.Equal(t, 1.0, third["count"], "count after complete")
	assert.NotEqual(t, first["runId"], third["runId"], "after complete, a new run")
}

func TestWebhookEchoBodies(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	large := make([]byte, 5<<20)
	_, err := rand.Read(large)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"empty", nil},
		{"json", []byte(`{"a":1}`)},
		{"non-utf8", []byte{0xff, 0xfe, 0x00, 'a', 0x80}},
		{"large binary", large},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, b := call(t, s.URL, "Echo", "echo", q("apikey", s.Key, "tenantId", "default", "x", "1", "y", "two words"), tc.body, "Content-Type", "application/octet-stream")
			require.Equal(t, http.StatusOK, status, "%.200s", b)
			got := decode(t, b)
			sum := sha256.Sum256(tc.body)
			assert.Equal(t, hex.EncodeToString(sum[:]), got["sha256"], "body changed in transit")
			assert.Equal(t, float64(len(tc.body)), got["size"], "body changed in transit")
			if body, ok := got["body"].(string); ok {
				assert.Equal(t, string(tc.body), body)
			}
			if b64, ok := got["bodyBase64"].(string); ok {
				raw, err := base64.StdEncoding.DecodeString(b64)
				require.NoError(t, err)
				assert.Equal(t, tc.body, raw, "base64 body differs")
			}
			assert.Equal(t, map[string]any{"x": "1", "y": "two words"}, got["params"], "params: exactly x and y")
		})
	}
	// An answer longer than net/http's buffer says its length rather than coming in chunks.
	for _, body := range [][]byte{[]byte(`{"a":1}`), large} {
		resp, err := http.Post(s.URL+"/api/user/webhooks/Echo/echo?apikey="+s.Key, "application/octet-stream", bytes.NewReader(body))
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%.200s", b)
		assert.Equal(t, int64(len(b)), resp.ContentLength, "Content-Length of an answer of %d bytes", len(b))
		assert.Empty(t, resp.TransferEncoding, "an answer of %d bytes", len(b))
	}
}

func TestWebhookVerifyStatusAck(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	status, ct, b := call(t, s.URL, "Echo", "verify", q("apikey", s.Key, "challenge", "abc123"), nil)
	assert.Equal(t, http.StatusOK, status, "verify by query")
	assert.Regexp(t, "^text/plain", ct, "verify by query")
	assert.Equal(t, "abc123", string(b), "verify by query")
	status, ct, b = call(t, s.URL, "Echo", "verify", q("apikey", s.Key), []byte(`{"challenge":"from-body"}`))
	assert.Equal(t, http.StatusOK, status, "verify by body")
	assert.Regexp(t, "^text/plain", ct, "verify by body")
	assert.Equal(t, "from-body", string(b), "verify by body")
	status, _, b = call(t, s.URL, "Echo", "status", q("apikey", s.Key, "code", "418"), nil)
	assert.Equal(t, 418, status, "status: %s", b)

	wf := "Echo:Conversational"
	start := time.Now()
	status, _, b = call(t, s.URL, wf, "ack", q("apikey", s.Key, "ms", "1500"), nil)
	require.Equal(t, http.StatusAccepted, status, "ack: %s", b)
	assert.Less(t, time.Since(start), 1200*time.Millisecond, "ack waited for the work")
	// The async work shows in the state once done; the state call queues behind it.
	status, _, b = call(t, s.URL, wf, "state", q("apikey", s.Key), nil)
	require.Equal(t, http.StatusOK, status, "state after ack: %s", b)
	assert.Equal(t, 1.0, decode(t, b)["state"].(map[string]any)["acks"], "state after ack: %s", b)
}
