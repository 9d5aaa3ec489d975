package subject

import (
	"strconv"
	"strings"
)

// WaitsStream keeps the requests parked until an event (agent.Wait) and, behind each, the later
// requests of its conversation held until it resumes: one subject per wait (Wait), the parked
// request first. A wait's subject is purged once it resumes.
const WaitsStream = "AGENTBUS_WAITS"

const waitsPrefix = "agentbus.waits"

// MaxHeld bounds the requests held behind one waiting request.
const MaxHeld = 1000

// WaitID names the wait of step n of a request of a workflow instance: the request's token in
// the steps journal (StepsRequestToken) and n, "{token}.{n}".
func WaitID(workflowID, requestID string, n int) string {
	return StepsRequestToken(workflowID, requestID) + "." + strconv.Itoa(n)
}

// Wait is the subject of a tenant's wait (WaitID) in the waits stream:
// agentbus.waits.{tenant}.{token}.{n}.
func Wait(tenant, waitID string) string { return waitsPrefix + "." + tenant + "." + waitID }

// WaitsSubjects is the subject filter of the waits stream.
func WaitsSubjects() string { return waitsPrefix + ".>" }

// waitTimerPrefix starts the name of the timer that ends a wait at its deadline; agents' own
// timers may not use it (ReservedTimerName).
const waitTimerPrefix = "agentbus:wait:"

// WaitTimer is the name of the timer that ends a wait at its deadline.
func WaitTimer(waitID string) string { return waitTimerPrefix + waitID }

// WaitOfTimer returns the wait a timer ends, when the timer is a wait's deadline.
func WaitOfTimer(name string) (waitID string, ok bool) {
	return strings.CutPrefix(name, waitTimerPrefix)
}

// ReservedTimerName reports whether a timer name is agentbus's own (WaitTimer).
func ReservedTimerName(name string) bool { return strings.HasPrefix(name, "agentbus:") }

// De-duplication ids of what a wait publishes, so that a host that does it again after a crash
// publishes each once: the parked request (ParkMsgID), a request held behind it (HoldMsgID,
// by its inbox sequence), the parked request sent again to resume (ResumeMsgID) and a held
// request sent back to the inbox (ReleaseMsgID, by its sequence in the waits stream).
func ParkMsgID(tenant, waitID string) string { return "park:" + tenant + ":" + waitID }

func HoldMsgID(tenant, waitID string, inboxSeq uint64) string {
	return "hold:" + tenant + ":" + waitID + ":" + strconv.FormatUint(inboxSeq, 10)
}

func ResumeMsgID(tenant, waitID string) string { return "resume:" + tenant + ":" + waitID }

func ReleaseMsgID(tenant, waitID string, seq uint64) string {
	return "release:" + tenant + ":" + waitID + ":" + strconv.FormatUint(seq, 10)
}
