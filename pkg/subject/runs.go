package subject

import (
	"fmt"
	"hash/fnv"
	"strings"
)

// RunsStream is the index of workflow runs: one small record per run started, on one subject per
// tenant and agent (Runs), so that an agent's instances are listed newest first without scanning
// the instances bucket, whose keys cannot be read by range.
const RunsStream = "AGENTBUS_RUNS"

const runsPrefix = "agentbus.runs"

// Runs is the subject of the run index records of a tenant's agent.
func Runs(tenant, agent string) string {
	return string(startTokens(runsPrefix).plain(tenant).id(agent))
}

// RunsSubjects is the subject filter of the run index stream.
func RunsSubjects() string { return runsPrefix + ".>" }

// TenantRuns is the filter of every run index subject of a tenant.
func TenantRuns(tenant string) string { return runsPrefix + "." + tenant + ".>" }

// InstanceDeadLetters is the filter of the dead letters of one workflow instance of an agent.
func InstanceDeadLetters(tenant, agent, workflowID string) string {
	return deadPrefix + "." + tenant + "." + Token(agent) + "." + Token(workflowID) + ".>"
}

// InstanceThreads is the filter of every conversation thread of a workflow instance in the
// history stream.
func InstanceThreads(tenant, workflowID string) string {
	return string(startTokens(msgPrefix).plain(tenant).id(workflowID)) + ".*"
}

// InboxPartition is the inbox partition (0..partitions-1) that the inbox's subject transform
// (InboxTransform) gives every request of the workflow instance. It is what nats-server's
// partition(n, tokens...) mapping function computes: the FNV-1a 32-bit hash of the named
// tokens written one after the other without separator (here the tenant token and the workflow
// token), modulo n.
func InboxPartition(tenant, workflowID string, partitions int) int {
	return partitionOf(tenant, Token(workflowID), partitions)
}

// RequestPartition is the inbox partition of a request published on subj, an Inbox subject,
// as InboxPartition names it; ok is false for any other subject (an inbox marker).
func RequestPartition(subj string, partitions int) (p int, ok bool) {
	rest, ok := strings.CutPrefix(subj, inboxPrefix+".")
	if !ok {
		return 0, false
	}
	_, rest, ok = strings.Cut(rest, ".") // the agent
	if !ok {
		return 0, false
	}
	tenant, rest, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, false
	}
	wf, participant, ok := strings.Cut(rest, ".")
	if !ok || tenant == "" || wf == "" || participant == "" || strings.Contains(participant, ".") {
		return 0, false
	}
	return partitionOf(tenant, wf, partitions), true
}

// partitionOf is partition(n, 1, 2) of the tenant token and the workflow token.
func partitionOf(tenant, workflowToken string, partitions int) int {
	if partitions <= 0 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(tenant))
	_, _ = h.Write([]byte(workflowToken))
	return int(h.Sum32() % uint32(partitions))
}

const noticePrefix = "agentbus.ctl.instance"

// InstanceNotice is the core NATS subject on which an operator's change of an instance record
// (the admin API's complete) is announced: a workflow host holding the instance in memory drops
// its copy, so that the next request reads the record anew. It is in no stream.
func InstanceNotice(tenant, workflowID string) string {
	return string(startTokens(noticePrefix).plain(tenant).id(workflowID))
}

// TenantNotice is the InstanceNotice of every instance of a tenant, whose data was erased
// (package tenantdata): a workflow host drops its copies of them all.
func TenantNotice(tenant string) string { return noticePrefix + "." + tenant }

// InstanceNotices is the filter of every InstanceNotice and TenantNotice.
func InstanceNotices() string { return noticePrefix + ".>" }

// ParseInstanceNotice reads the tenant and workflow id back from an InstanceNotice subject; the
// workflow id is empty for a TenantNotice.
func ParseInstanceNotice(subj string) (tenant, workflowID string, err error) {
	rest, ok := strings.CutPrefix(subj, noticePrefix+".")
	tenant, tok, found := strings.Cut(rest, ".")
	if ok && !found && CheckTenant("tenant", tenant) == nil {
		return tenant, "", nil
	}
	if !ok || !found || strings.Contains(tok, ".") {
		return "", "", fmt.Errorf("subject %q is not an instance notice", subj)
	}
	workflowID, err = ParseToken(tok)
	return tenant, workflowID, err
}
