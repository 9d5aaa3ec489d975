package subject_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/subject"
)

func TestRunsAndNoticeSubjects(t *testing.T) {
	assert.Equal(t, "agentbus.runs.acme."+subject.Token("Echo"), subject.Runs("acme", "Echo"))
	assert.True(t, subject.MatchesFilter(subject.Runs("acme", "Echo"), subject.RunsSubjects()))
	assert.True(t, subject.MatchesFilter(subject.Runs("acme", "Echo"), subject.TenantRuns("acme")))
	assert.False(t, subject.MatchesFilter(subject.Runs("acme", "Echo"), subject.TenantRuns("other")))

	wf := "acme:Echo:Supervisor Workflow:a.b c"
	n := subject.InstanceNotice("acme", wf)
	assert.True(t, subject.MatchesFilter(n, subject.InstanceNotices()))
	tenant, got, err := subject.ParseInstanceNotice(n)
	require.NoError(t, err)
	assert.Equal(t, "acme", tenant)
	assert.Equal(t, wf, got)
	tenant, got, err = subject.ParseInstanceNotice(subject.TenantNotice("acme"))
	require.NoError(t, err)
	assert.Equal(t, []string{"acme", ""}, []string{tenant, got}, "a tenant's notice")
	assert.True(t, subject.MatchesFilter(subject.TenantNotice("acme"), subject.InstanceNotices()))
	for _, bad := range []string{"agentbus.ctl.instance", "agentbus.ctl.instance.", "agentbus.ctl.instance.*", "agentbus.ctl.other.acme.x", "agentbus.ctl.instance.acme.a.b", "agentbus.ctl.instance.acme.!!"} {
		_, _, err := subject.ParseInstanceNotice(bad)
		assert.Error(t, err, bad)
	}

	assert.True(t, subject.MatchesFilter(subject.DeadLetter("acme", "Echo", wf, "p"), subject.InstanceDeadLetters("acme", "Echo", wf)))
	assert.False(t, subject.MatchesFilter(subject.DeadLetter("acme", "Echo", wf+"x", "p"), subject.InstanceDeadLetters("acme", "Echo", wf)))
	assert.True(t, subject.MatchesFilter(subject.Thread("acme", wf, "p"), subject.InstanceThreads("acme", wf)))
	for p := range 7 {
		assert.Less(t, subject.InboxPartition("acme", wf, p+1), p+1)
	}
}
