package agent

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The webhook call and answer are stored as encoding/json would write them.
func FuzzWebhookSummaryMatchesEncodingJSON(f *testing.F) {
	f.Add("a", "1", "b", "<x>", []byte(`{"ping":1}`), 200, "application/json", false)
	f.Add("", "", "", "", []byte("\xff\x00"), 500, "", false)
	f.Add("k", "\u2028", "k2", "\"", []byte("x"), -1, "text/plain; charset=utf-8", true)
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, body []byte, status int, contentType string, huge bool) {
		if huge {
			body = []byte(strings.Repeat("y", maxStoredBody+1))
		}
		summary := func(b []byte) any {
			switch {
			case len(b) > maxStoredBody:
				return map[string]any{"truncated": true, "size": len(b)}
			case utf8.Valid(b):
				return string(b)
			default:
				return map[string]any{"base64": base64.StdEncoding.EncodeToString(b), "size": len(b)}
			}
		}
		params := map[string]string{k1: v1, k2: v2}
		want, err := json.Marshal(struct {
			Params map[string]string `json:"params"`
			Body   any               `json:"body"`
		}{params, summary(body)})
		require.NoError(t, err)
		assert.Equal(t, string(want), string(appendWebhookCall(nil, params, body)))

		resp := Response{StatusCode: status, ContentType: contentType, Content: body}
		want, err = json.Marshal(struct {
			StatusCode  int    `json:"statusCode"`
			ContentType string `json:"contentType"`
			Content     any    `json:"content"`
		}{status, contentType, summary(body)})
		require.NoError(t, err)
		assert.Equal(t, string(want), string(appendWebhookAnswer(nil, resp)))
	})
}
