package remote

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDecodeGivesAStoredRegistrationItsPartitions: a registration stored without a partition
// count gets the default by who calls it; one with a count Put never writes is refused, so that
// no host is started with it.
func TestDecodeGivesAStoredRegistrationItsPartitions(t *testing.T) {
	for raw, want := range map[string]int{
		`{"name":"A","url":"http://x/"}`:                               DefaultSharedPartitions,
		`{"name":"A","url":"http://x/","tenants":["acme"]}`:            DefaultPartitions,
		`{"name":"A","url":"http://x/","owner":"acme"}`:                DefaultPartitions,
		`{"name":"A","url":"http://x/","owner":"acme","partitions":8}`: 8,
	} {
		r, err := decode([]byte(raw))
		require.NoError(t, err, raw)
		assert.Equal(t, want, r.Partitions, raw)
	}
	for _, raw := range []string{`{"name":"A","partitions":-1}`, `{"name":"A","partitions":5000}`} {
		_, err := decode([]byte(raw))
		assert.ErrorContains(t, err, "partitions", raw)
	}
}
