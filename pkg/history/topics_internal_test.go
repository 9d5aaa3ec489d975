package history

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/agentbus/agentbus/pkg/subject"
)

// One tenant writing scoped messages to more threads than the topic cache holds empties its own
// part of the cache, not another tenant's: the other's threads stay known, and cost no read.
func TestTopicCacheKeepsOtherTenants(t *testing.T) {
	s := &Store{known: make(map[string]map[string]map[string]struct{})}
	key := func(tenant string, i int) string {
		return subject.TopicsKey(tenant, fmt.Sprintf("%s:Echo:Supervisor Workflow:t-%d", tenant, i), "user")
	}
	for i := range 10 {
		s.remember("quiet", key("quiet", i), []string{"billing"})
	}
	for i := range 3 * maxKnownTopicThreads {
		s.remember("busy", key("busy", i), []string{"billing"})
		assert.LessOrEqual(t, s.knownThreads, maxKnownTopicThreads)
	}
	for i := range 10 {
		assert.True(t, s.isKnown("quiet", key("quiet", i), "billing"), "quiet's thread %d is known", i)
	}
	assert.True(t, s.isKnown("busy", key("busy", 3*maxKnownTopicThreads-1), "billing"), "busy's newest thread is known")
	assert.False(t, s.isKnown("quiet", key("busy", 3*maxKnownTopicThreads-1), "billing"), "by tenant")
	threads := 0
	for _, m := range s.known {
		threads += len(m)
	}
	assert.Equal(t, threads, s.knownThreads)
}
