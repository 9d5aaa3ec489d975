package ingress

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"google.golang.org/protobuf/proto"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/registry"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/tracing"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// errTimeout means the request was accepted but its reply did not come in time.
var errTimeout = errors.New("timed out waiting for the handler")

// errClientGone means the HTTP caller went away while waiting.
var errClientGone = errors.New("client went away")

// errKeyReused means a requestId came again with a different request.
var errKeyReused = errors.New("requestId reused for a different request")

// errUnencodable means a request holds text that is not valid UTF-8, which the bus's encoding
// refuses. The endpoints check what they take before they build a request; this is the guard
// that keeps whatever they missed a client error, not a bus failure.
var errUnencodable = errors.New("the request holds text that is not valid UTF-8")

// errKeyRevoked means the caller's key was revoked while the call waited for its answer: the wait
// ends (bus.Replies.Withdraw), and the answer is withheld.
var errKeyRevoked = errors.New("the API key was revoked while the call waited")

// errReplyLost means the handler answered but its large reply could not be read back.
var errReplyLost = errors.New("reply could not be read")

// publishTimeout bounds how long the inbox may take to acknowledge a request.
const publishTimeout = 10 * time.Second

// publish puts req durably on the inbox; replyTo names the waiter, if any. Once it returns nil
// the request is the bus's: it is processed even if nobody waits. It reports whether the
// requestId was seen before (a duplicate).
func (s *Server) publish(ctx context.Context, req *agentbusv1.Request, replyTo string) (duplicate bool, err error) {
	// The request must reach the bus even if the caller goes away while it is being sent.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	msg, err := s.inboxMsg(ctx, req, replyTo)
	if err != nil {
		return false, err
	}
	ack, err := bus.Publish(ctx, s.js, msg)
	if err != nil {
		return false, fmt.Errorf("publishing request: %w", err)
	}
	return ack.Duplicate, nil
}

// inboxMsg is the inbox message of req; replyTo names the waiter, if any. A request too large
// for one message goes by claim check, stored here.
func (s *Server) inboxMsg(ctx context.Context, req *agentbusv1.Request, replyTo string) (*nats.Msg, error) {
	req.CreatedAtMs = time.Now().UnixMilli()
	if req.KeepResult {
		// Only a requestId the caller chose can come again, for the same request or another.
		req.Fingerprint = bus.Fingerprint(req)
	}
	// The reply subject rides in the envelope when every host that may take the request reads
	// it there: a header would cost a map here, a scan of the header block in the NATS server
	// and a parse into a map again in the host. Otherwise it goes in the header older hosts
	// read (registry.FeatureReplyTo).
	req.ReplyTo = ""
	replyHeader := false
	if replyTo != "" {
		if s.dir.AllLiveHave(req.AgentName, registry.FeatureReplyTo) {
			req.ReplyTo = replyTo
		} else {
			replyHeader = true
		}
	}
	data, err := proto.Marshal(req)
	if err != nil {
		// Strings that are not valid UTF-8 are the only thing proto3 refuses to encode.
		return nil, fmt.Errorf("encoding request: %w: %w", errUnencodable, err)
	}
	if req.GetFile().GetObject() == "" { // a file's request was admitted with its file (storeFile)
		if p := s.admitCall(req.TenantId, req.AgentName, req.WorkflowId); p != nil {
			return nil, &refusal{p}
		}
		if p := s.admit(ctx, req.TenantId, req.WorkflowId, int64(len(data))); p != nil {
			return nil, &refusal{p}
		}
	}
	if !s.claims.Fits(len(data)) {
		// Too large for one message: the request goes by claim check, and the inbox carries
		// what routing and de-duplication need.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
		defer cancel()
		ref, err := s.claims.Put(ctx, subject.ClaimName(req.TenantId, req.RequestId, "request-"+nuid.Next()), data)
		if err != nil {
			return nil, fmt.Errorf("storing request: %w", err)
		}
		stub := &agentbusv1.Request{
			RequestId: req.RequestId, TenantId: req.TenantId, WorkflowId: req.WorkflowId, AgentName: req.AgentName,
			WorkflowType: req.WorkflowType, ActivationName: req.ActivationName, ParticipantId: req.ParticipantId,
			Kind: req.Kind, Method: req.Method, Fingerprint: req.Fingerprint, KeepResult: req.KeepResult,
			MessageId: req.MessageId, CreatedAtMs: req.CreatedAtMs, Stream: req.Stream, EnvelopeRef: ref, ReplyTo: req.ReplyTo,
		}
		if data, err = proto.Marshal(stub); err != nil {
			return nil, fmt.Errorf("encoding request: %w", err)
		}
	}
	msg := &nats.Msg{
		Subject: subject.Inbox(req.AgentName, req.TenantId, req.WorkflowId, req.ParticipantId),
		Data:    data,
		Header:  nats.Header{},
	}
	if replyHeader {
		msg.Header.Set(subject.HeaderReplyTo, replyTo)
	}
	if req.KeepResult {
		// Only a requestId the caller chose can come again. One the ingress made up is new, and
		// the publish is not retried once the server may have stored it (bus.Publish,
		// bus.Waiter.Await), so a de-duplication id would only cost the server a map entry for
		// the whole window.
		msg.Header.Set(subject.HeaderMsgID, subject.DedupeID(req.TenantId, req.RequestId))
	}
	// The host's handler span continues the request's trace.
	tracing.Inject(ctx, msg.Header)
	return msg, nil
}

// call publishes req for c and waits up to timeout for its reply. It does not wait for the
// inbox's acknowledgement on its own: the waiter reads it as it reads the reply
// (bus.Waiter.Await). Once c's key is revoked the wait ends (the revocation withdraws the waits of
// its key), and a reply that comes after is not returned either (errKeyRevoked).
//
// A request with a caller-chosen requestId (KeepResult) is kept alive through a NATS failover
// for its whole timeout: it is published again with its de-duplication id while no stream
// stores it, and once its reply is late the waiter also reads the result a host keeps for it,
// answering with whichever comes first (bus.Waiter.LookUpResult). A duplicate (the id was
// accepted before) is answered the same way, from the first request's reply or kept result.
func (s *Server) call(ctx context.Context, c caller, req *agentbusv1.Request, timeout time.Duration) (*agentbusv1.Reply, error) {
	waiter := s.replies.WaitFor(c.key.ID)
	defer waiter.Done()
	msg, err := s.inboxMsg(ctx, req, waiter.Subject)
	if err != nil {
		return nil, err
	}
	accept := publishTimeout
	if req.KeepResult {
		// Sending it again is safe: the inbox stores one copy.
		accept = max(accept, timeout)
		waiter.LookUpResult(s.res.Results, subject.ResultKey(req.TenantId, req.RequestId), req.Fingerprint)
	}
	if err := waiter.Send(msg); err != nil {
		return nil, fmt.Errorf("publishing request: %w", err)
	}
	rep, err := waiter.Await(ctx, accept, timeout)
	switch {
	case err == nil:
	case errors.Is(err, errKeyRevoked):
		return nil, err
	case ctx.Err() != nil:
		return nil, errClientGone
	case errors.Is(err, bus.ErrReused):
		return nil, errKeyReused
	case errors.Is(err, bus.ErrNotAccepted):
		return nil, fmt.Errorf("publishing request: %w", err)
	default:
		return nil, errTimeout
	}
	if s.revoked.revokedSince(c) {
		return nil, errKeyRevoked
	}
	if waiter.FromKeptResult(rep) {
		s.metrics.kept.Inc()
	}
	if err := s.resolveContent(ctx, req, rep); err != nil {
		return nil, err
	}
	return rep, nil
}

// resolveContent reads a reply's content that travelled by claim check.
func (s *Server) resolveContent(ctx context.Context, req *agentbusv1.Request, rep *agentbusv1.Reply) error {
	ref := rep.GetContentRef()
	if ref == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	content, err := s.claims.Get(ctx, ref)
	if err != nil {
		s.log.Error("reading large reply", "requestId", req.RequestId, "err", err)
		return errReplyLost
	}
	rep.Content, rep.ContentRef = content, nil
	if !req.KeepResult {
		_ = s.claims.Delete(ctx, ref)
	}
	return nil
}

// writeCallError answers a request whose call failed.
func (s *Server) writeCallError(w http.ResponseWriter, r *http.Request, req *agentbusv1.Request, err error) {
	problem.Write(w, s.callProblem(r.URL.Path, req, err))
}

// callProblem is what the caller of a request whose call failed is told; path names the
// endpoint in the log of an unexpected failure.
func (s *Server) callProblem(path string, req *agentbusv1.Request, err error) problem.Problem {
	var (
		p       *problem.Problem
		refused *refusal
	)
	switch {
	case errors.As(err, &refused):
		p = refused.p
	case errors.Is(err, errTimeout):
		s.metrics.timeouts.Inc()
		p = problem.HandlerTimeout.New("the handler did not answer in time; the request was accepted and will still be processed")
	case errors.Is(err, errKeyReused):
		p = problem.RequestIDReused.New("this requestId (Idempotency-Key) was used for a different request within the dedupe window")
	case errors.Is(err, errReplyLost):
		p = problem.ReplyUnavailable.New("the handler answered, but its reply could not be read back; retry with the same requestId")
	case errors.Is(err, errUnencodable):
		s.log.Warn("request refused by the bus's encoding", "requestId", req.RequestId, "path", path, "err", err)
		p = problem.InvalidText.New("the request holds text that is not valid UTF-8")
	case errors.Is(err, errKeyRevoked):
		p = problem.Unauthorized.New("the API key was revoked while the call waited; the request was accepted, and its answer is not given to the revoked key")
	case errors.Is(err, errClientGone):
		// Nobody reads this answer; 499-like, but keep to registered codes.
		p = problem.ClientGone.New("the client went away")
	default:
		s.log.Error("request failed", "requestId", req.RequestId, "path", path, "err", err)
		p = problem.BusUnavailable.New("the request could not be accepted; try again")
	}
	p.RequestID = req.RequestId
	return *p
}

// writeReply sends a handler's reply as the HTTP answer.
func (s *Server) writeReply(w http.ResponseWriter, rep *agentbusv1.Reply) {
	status := int(rep.GetStatusCode())
	if rep.GetError() != "" {
		problem.Write(w, hostProblem(rep))
		return
	}
	if status < 200 || status > 599 {
		s.log.Warn("handler chose an invalid status", "status", status, "requestId", rep.GetRequestId())
		p := problem.InvalidHandlerStatus.New("the handler answered with an invalid status code")
		p.RequestID = rep.GetRequestId()
		problem.Write(w, *p)
		return
	}
	ct := rep.GetContentType()
	if ct == "" {
		ct = "application/json"
	}
	w.Header().Set("Content-Type", ct)
	if n := len(rep.GetContent()); n > chunkedAbove && status != http.StatusNoContent && status != http.StatusNotModified {
		// net/http would send it in chunks; its length is known, so the client learns it first.
		w.Header().Set("Content-Length", strconv.Itoa(n))
	}
	w.WriteHeader(status)
	_, _ = w.Write(rep.GetContent())
}

// chunkedAbove is the longest answer net/http sends with a Content-Length of its own: a longer
// one, written in one piece after WriteHeader, goes in chunks unless the handler sets it.
const chunkedAbove = 2048
