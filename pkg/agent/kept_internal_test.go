package agent

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// A keptRing knows the last keptRingSize requests, each only within the window it is asked
// about, and tells a request from one with the same id and another fingerprint.
func TestKeptRingKnowsTheLastRequestsWithinTheWindow(t *testing.T) {
	req := func(i int) *agentbusv1.Request {
		return &agentbusv1.Request{RequestId: fmt.Sprint("r-", i), Fingerprint: "f"}
	}
	var r keptRing
	for i := range keptRingSize + 8 {
		r.add(keptSum(req(i)), int64(100+i))
	}
	for i := range 8 {
		assert.False(t, r.has(keptSum(req(i)), 0), "request %d was pushed out", i)
	}
	for i := 8; i < keptRingSize+8; i++ {
		assert.True(t, r.has(keptSum(req(i)), 100), "request %d", i)
	}
	last := keptRingSize + 7
	assert.True(t, r.has(keptSum(req(last)), int64(100+last)), "finished at the window's start")
	assert.False(t, r.has(keptSum(req(last)), int64(101+last)), "finished before the window")
	other := req(last)
	other.Fingerprint = "g"
	assert.False(t, r.has(keptSum(other), 0), "the same id for another request")
}
