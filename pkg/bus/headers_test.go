package bus

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHeaderBlockRoundTrip(t *testing.T) {
	var b []byte
	b = AppendHeader(b, "Content-Type", "application/json")
	b = AppendHeader(b, "X-Hub-Signature-256", "sha256=abc: def")
	b = AppendHeader(b, "X-Empty", "")
	b = AppendHeader(b, "X-Bad", "a\nInjected: 1")
	b = AppendHeader(b, "Bad:Name", "v")
	b = AppendHeader(b, "", "v")
	assert.Equal(t, map[string]string{
		"Content-Type":        "application/json",
		"X-Hub-Signature-256": "sha256=abc: def",
		"X-Empty":             "",
	}, ParseHeaders(b))
	assert.Empty(t, ParseHeaders(nil))
	assert.NotNil(t, ParseHeaders(nil))
}

// FuzzHeaderBlock: whatever is appended and kept reads back as it was, and nothing read back
// was not appended.
func FuzzHeaderBlock(f *testing.F) {
	f.Add("Content-Type", "text/plain", "X-A", "1, 2")
	f.Add("X-A", "x: y", "X-B", "")
	f.Add("A:B", "v", "C", "\n")
	f.Fuzz(func(t *testing.T, n1, v1, n2, v2 string) {
		b := AppendHeader(AppendHeader(nil, n1, v1), n2, v2)
		got := ParseHeaders(b)
		want := map[string]string{}
		for _, kv := range [][2]string{{n1, v1}, {n2, v2}} {
			if len(AppendHeader(nil, kv[0], kv[1])) > 0 {
				want[kv[0]] = kv[1]
			}
		}
		require.Equal(t, want, got, "block %q", b)
	})
}
