package subject

import (
	"strconv"
	"strings"
)

// InstanceInbox is the filter of every stored inbox request of a workflow instance of an agent,
// in the agent's partition p: one subject per conversation (participant) of the instance.
func InstanceInbox(agent string, p int, tenant, workflowID string) string {
	return string(startTokens(inboxPrefix).id(agent).plain(strconv.Itoa(p)).plain(tenant).id(workflowID)) + ".*"
}

// IsInstanceInbox reports, without allocating, whether a stored inbox subject
// (agentbus.in.{agent}.{n}.{tenant}.{wf}.{participant}) belongs to the workflow instance whose
// tenant and workflow token (Token of its workflow id) are given.
func IsInstanceInbox(stored, tenant, workflowToken string) bool {
	rest, ok := strings.CutPrefix(stored, inboxPrefix+".")
	if !ok {
		return false
	}
	for range 2 { // the agent and the partition
		if _, rest, ok = strings.Cut(rest, "."); !ok {
			return false
		}
	}
	tok, rest, ok := strings.Cut(rest, ".")
	if !ok || tok != tenant {
		return false
	}
	tok, rest, ok = strings.Cut(rest, ".")
	return ok && tok == workflowToken && rest != "" && !strings.Contains(rest, ".")
}

// StoredInboxTenant returns, without allocating, the tenant of a stored inbox subject
// (agentbus.in.{agent}.{n}.{tenant}.{wf}.{participant}); "" for another subject.
func StoredInboxTenant(stored string) string {
	rest, ok := strings.CutPrefix(stored, inboxPrefix+".")
	if !ok {
		return ""
	}
	for range 2 { // the agent and the partition
		if _, rest, ok = strings.Cut(rest, "."); !ok {
			return ""
		}
	}
	tenant, _, _ := strings.Cut(rest, ".")
	return tenant
}

const inspectPrefix = "agentbus.inspect"

// Inspect is the core NATS subject on which a workflow host answers what it holds (package
// inspect): the requests it has queued or running, by conversation, and why each waits. It is in
// no stream.
func Inspect(hostID string) string { return inspectPrefix + "." + Token(hostID) }
