package subject

import (
	"crypto/sha256"
	"encoding/base64"
	"strconv"
)

// StepsStream is the journal of durable steps (agent.Step): what each step of a request still
// being handled returned, one subject per step (Step), so that a request run again finds its
// finished steps. A request's subjects are purged once it is answered.
const StepsStream = "AGENTBUS_STEPS"

const stepsPrefix = "agentbus.steps"

// MaxSteps bounds the steps of one request: Step numbers them 1 to MaxSteps.
const MaxSteps = 1000

// Step is the journal subject of step n (1 to MaxSteps) of a request of a tenant's workflow
// instance: agentbus.steps.{tenant}.{request}.{n}. The request token is a hash of the workflow
// id and the request id (StepsRequestToken), so that any request id makes a subject of bounded
// length.
func Step(tenant, workflowID, requestID string, n int) string {
	return stepsPrefix + "." + tenant + "." + StepsRequestToken(workflowID, requestID) + "." + strconv.Itoa(n)
}

// RequestSteps is the filter of every step subject of one request (Step).
func RequestSteps(tenant, workflowID, requestID string) string {
	return stepsPrefix + "." + tenant + "." + StepsRequestToken(workflowID, requestID) + ".*"
}

// StepsSubjects is the subject filter of the steps stream.
func StepsSubjects() string { return stepsPrefix + ".>" }

// StepMsgID is the de-duplication id of the record of step n of a request: a step recorded
// again (its first acknowledgement lost) is stored once.
func StepMsgID(tenant, workflowID, requestID string, n int) string {
	return "step:" + tenant + ":" + StepsRequestToken(workflowID, requestID) + ":" + strconv.Itoa(n)
}

// StepsRequestToken is the subject token of a request in the steps stream: the first 128 bits
// of the SHA-256 of its workflow id and request id, unpadded base64url (22 characters).
func StepsRequestToken(workflowID, requestID string) string {
	h := sha256.New()
	h.Write([]byte(workflowID))
	h.Write([]byte{0})
	h.Write([]byte(requestID))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:16])
}
