package natsembed_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/natsembed"
)

// TestStartServesInProcessAndOnItsAddress: a started server has JetStream ready, answers an
// in-process connection and, with Listen, a TCP client on its address; Stop ends both.
func TestStartServesInProcessAndOnItsAddress(t *testing.T) {
	s, err := natsembed.Start(natsembed.Config{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1"})
	require.NoError(t, err)
	defer s.Stop()

	in, err := s.Connect("in-process")
	require.NoError(t, err)
	defer in.Close()
	js, err := jetstream.New(in)
	require.NoError(t, err)
	_, err = js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
	require.NoError(t, err, "JetStream is ready once Start returns")

	over, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	defer over.Close()
	ack, err := jetstream.New(over)
	require.NoError(t, err)
	pa, err := ack.Publish(t.Context(), "t.1", []byte("hello"))
	require.NoError(t, err)
	assert.Equal(t, uint64(1), pa.Sequence)

	s.Stop()
	assert.Eventually(t, func() bool { return !over.IsConnected() }, 5*time.Second, 10*time.Millisecond)
}

// TestStartRefusesABadConfig: no store directory or an address that is not host:port.
func TestStartRefusesABadConfig(t *testing.T) {
	for _, cfg := range []natsembed.Config{
		{},
		{StoreDir: t.TempDir(), Listen: "4222"},
		{StoreDir: t.TempDir(), Listen: "127.0.0.1:port"},
	} {
		t.Run(fmt.Sprintf("%+v", cfg), func(t *testing.T) {
			_, err := natsembed.Start(cfg)
			assert.ErrorContains(t, err, "natsembed:")
		})
	}
}

// TestMaxStoreIsTheAccountsLimit: the server's storage limit is what its clients' account info
// reports, given or the server's default.
func TestMaxStoreIsTheAccountsLimit(t *testing.T) {
	for _, max := range []int64{0, 64 << 20} {
		s, err := natsembed.Start(natsembed.Config{StoreDir: t.TempDir(), MaxStore: max})
		require.NoError(t, err)
		nc, err := s.Connect("limits")
		require.NoError(t, err)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		ai, err := js.AccountInfo(t.Context())
		require.NoError(t, err)
		if max > 0 {
			assert.Equal(t, max, ai.Limits.MaxStore)
		} else {
			assert.Equal(t, s.JetStreamConfig().MaxStore-1, ai.Limits.MaxStore, "the server's default")
		}
		nc.Close()
		s.Stop()
	}
}
