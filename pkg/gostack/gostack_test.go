package gostack

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func parked(stop <-chan struct{}) { <-stop }

func TestNamingFindsAParkedGoroutine(t *testing.T) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); parked(stop) }()
	assert.Eventually(t, func() bool { return len(Naming("gostack.parked")) == 1 }, time.Second, time.Millisecond)
	close(stop)
	<-done
	assert.Empty(t, Naming("gostack.parked"))
	assert.GreaterOrEqual(t, len(All()), 1)
}
