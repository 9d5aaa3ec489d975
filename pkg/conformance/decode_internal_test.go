package conformance

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDecodeLargeEcho: Echo's answer decodes to the same fields whether its bodyBase64 is cut
// out (compact or spaced JSON) or the answer is decoded whole (an escaped string, or a parameter
// of the same name before it), and an answer
// that is not a JSON object, or whose bodyBase64 is not base64, is an error either way.
func TestDecodeLargeEcho(t *testing.T) {
	body := []byte("\xff\x00 binary \"body\" \\ with quotes")
	want := largeEcho{Size: len(body), SHA256: sha(body), BodyBase64: body}
	compact, err := json.Marshal(map[string]any{"params": map[string]string{"k": `"bodyBase64":"x`}, "size": len(body), "sha256": sha(body), "bodyBase64": body})
	require.NoError(t, err)
	for name, answer := range map[string]string{
		"compact":                       string(compact),
		"spaced":                        `{"params": {}, "size": ` + jsonString(t, len(body)) + `, "sha256": "` + sha(body) + `", "bodyBase64" : "/wAgYmluYXJ5ICJib2R5IiBcIHdpdGggcXVvdGVz"}`,
		"a parameter of the name first": `{"params":{"bodyBase64":"AAAA"},"size":` + jsonString(t, len(body)) + `,"sha256":"` + sha(body) + `","bodyBase64":"/wAgYmluYXJ5ICJib2R5IiBcIHdpdGggcXVvdGVz"}`,
		"escaped":                       `{"size":` + jsonString(t, len(body)) + `,"sha256":"` + sha(body) + `","bodyBase64":"\/wAgYmluYXJ5ICJib2R5IiBcIHdpdGggcXVvdGVz"}`,
	} {
		got, err := decodeLargeEcho([]byte(answer))
		require.NoError(t, err, name)
		assert.Equal(t, want, got, name)
	}
	for name, answer := range map[string]string{
		"not JSON after the body":  `{"size":1,"bodyBase64":"AA==",}`,
		"not JSON before the body": `{"size":,"bodyBase64":"AA=="}`,
		"not base64":               `{"size":1,"bodyBase64":"A!=="}`,
		"an unterminated string":   `{"size":1,"bodyBase64":"AA==`,
		"an array":                 `["bodyBase64":"AA=="]`,
	} {
		_, err := decodeLargeEcho([]byte(answer))
		assert.Error(t, err, name)
	}
}

func jsonString(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
