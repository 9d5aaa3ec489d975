package bus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// Fingerprint identifies what a request asks for (kind, workflow, method), to tell a retry of a
// request with a chosen request id from a different request that reuses the id.
func Fingerprint(req *agentbusv1.Request) string {
	h := sha256.New()
	for _, part := range []string{req.GetKind().String(), req.GetWorkflowId(), req.GetMethod()} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// AwaitResult waits until the result of the tenant's request is in the results bucket (it is
// there already, or its handler is still running) and returns it. A request whose id came again
// within the de-duplication window is answered this way: the inbox stored it once. Each try to
// begin the watch waits for the JetStream default timeout, not for ctx's deadline, and a
// transient failure (Transient) is tried again while ctx lasts: a reply lost in an election
// costs a try, not the call.
func AwaitResult(ctx context.Context, results jetstream.KeyValue, tenant, requestID string) (*agentbusv1.Reply, error) {
	// The watch outlives the tries: its context ends when AwaitResult returns.
	wctx, stop := withoutDeadline(ctx)
	defer stop()
	w, err := whileTransient(ctx, wctx, time.Time{}, func(wctx context.Context) (jetstream.KeyWatcher, error) {
		return results.Watch(wctx, subject.ResultKey(tenant, requestID))
	})
	if err != nil {
		return nil, fmt.Errorf("watching result: %w", err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("result watch closed")
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			rep := new(agentbusv1.Reply)
			if err := proto.Unmarshal(e.Value(), rep); err != nil {
				return nil, fmt.Errorf("decoding cached result: %w", err)
			}
			return rep, nil
		}
	}
}
