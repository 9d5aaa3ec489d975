package subject_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/agentbus/agentbus/pkg/subject"
)

// A step's subject is one token per part whatever the ids hold, of bounded length, in the
// filters of its request, its tenant and the stream, and not in another request's.
func TestStepSubjects(t *testing.T) {
	wf := "acme:Echo:Supervisor Workflow:a.b c"
	long := strings.Repeat("x.*>", 500)
	s := subject.Step("acme", wf, long, subject.MaxSteps)
	assert.Len(t, strings.Split(s, "."), 5, s)
	assert.Less(t, len(s), 64, s)
	assert.Equal(t, "agentbus.steps.acme."+subject.StepsRequestToken(wf, "r-1")+".3", subject.Step("acme", wf, "r-1", 3))

	one := subject.Step("acme", wf, "r-1", 1)
	assert.True(t, subject.MatchesFilter(one, subject.RequestSteps("acme", wf, "r-1")))
	assert.True(t, subject.MatchesFilter(one, subject.StepsSubjects()))
	assert.False(t, subject.MatchesFilter(one, subject.RequestSteps("acme", wf, "r-2")), "another request")
	assert.False(t, subject.MatchesFilter(one, subject.RequestSteps("acme", wf+"x", "r-1")), "another instance")
	assert.False(t, subject.MatchesFilter(one, subject.RequestSteps("other", wf, "r-1")), "another tenant")
	// The workflow and request ids are separated: moving a character from one to the other
	// makes another request.
	assert.NotEqual(t, subject.StepsRequestToken("ab", "c"), subject.StepsRequestToken("a", "bc"))

	assert.NotEqual(t, subject.StepMsgID("acme", wf, "r-1", 1), subject.StepMsgID("acme", wf, "r-1", 2))
	assert.NotEqual(t, subject.StepMsgID("acme", wf, "r-1", 1), subject.StepMsgID("other", wf, "r-1", 1))
}
