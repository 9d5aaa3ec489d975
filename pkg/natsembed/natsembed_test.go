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
