package bus

import (
	"fmt"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// DedupedRequest is the inbox message of a request that agentbus itself derived from another
// (an agent's post or message, a fired timer): its request id is stable across repeats of what
// made it, so it carries that id as its de-duplication id and the inbox stores it once.
func DedupedRequest(req *agentbusv1.Request) (*nats.Msg, error) {
	data, err := proto.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encoding request: %w", err)
	}
	return &nats.Msg{
		Subject: subject.Inbox(req.GetAgentName(), req.GetTenantId(), req.GetWorkflowId(), req.GetParticipantId()),
		Data:    data,
		Header:  nats.Header{subject.HeaderMsgID: []string{subject.DedupeID(req.GetTenantId(), req.GetRequestId())}},
	}, nil
}
