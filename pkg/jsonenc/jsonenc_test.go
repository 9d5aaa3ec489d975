package jsonenc_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/jsonenc"
)

// The encoders write what encoding/json writes.
func FuzzMatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{"", "plain", `quote " backslash \ slash /`, "<script>&amp;</script>", "\x00\x01\b\f\n\r\t\x1f\x7f",
		"\u2028\u2029", "caf\u00e9 \U0001F600", "\xff\xfe bad", "\xed\xa0\x80", `{"a": [1, 2.5, "<x>"] }`, " [ ] ", "null"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(jsonenc.AppendString(nil, s)), "string %q", s)

		raw := json.RawMessage(s)
		want, wantErr := json.Marshal(raw)
		got, err := jsonenc.AppendRaw([]byte("x"), raw)
		if len(raw) == 0 {
			assert.Equal(t, "xnull", string(got))
			return
		}
		if wantErr != nil {
			assert.Error(t, err, "raw %q", s)
			return
		}
		require.NoError(t, err, "raw %q", s)
		assert.Equal(t, "x"+string(want), string(got), "raw %q", s)
	})
}
