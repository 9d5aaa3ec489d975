package ingress

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/msgkind"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// sendBody is the JSON body of the send endpoint (docs/interface.md#41-send-message-admin).
type sendBody struct {
	AgentName      string          `json:"agentName"`
	ActivationName string          `json:"activationName"`
	ParticipantID  string          `json:"participantId"`
	Type           string          `json:"type"`
	Data           json.RawMessage `json:"data"`
	Text           string          `json:"text"`
	WorkflowType   string          `json:"workflowType"`
	Topic          string          `json:"topic"`
	RequestID      string          `json:"requestId"`
	Hint           string          `json:"hint"`
	Authorization  string          `json:"authorization"`
}

// fileObject is the rich form of a File message's data
// (docs/interface.md#22-file-data-object-rich-form-of-data-for-file).
type fileObject struct {
	Content     *string `json:"content"`
	FileName    string  `json:"fileName"`
	ContentType string  `json:"contentType"`
	// FileSize is in bytes; informative only, the decoded size is what counts.
	FileSize *int64 `json:"fileSize"`
}

// Wait bounds of the synchronous endpoints.
const (
	defaultWait = 60 * time.Second
	maxWaitSecs = 300
	maxTextLen  = 1 << 20
	maxTopicLen = 256
	maxHintLen  = 4096
)

// send serves POST /api/v1/admin/tenants/{tenantId}/messaging/send (and the same without the
// tenant in the path, with X-Tenant-Id): it validates and publishes a message of any type, and
// answers 202 at once or, with wait=true, the handler's reply. Checks go body, key, role,
// tenant, then the message (sendRequest).
func (s *Server) send(w http.ResponseWriter, r *http.Request) {
	body, p := s.readSendBody(w, r)
	var (
		c     caller
		query url.Values
	)
	if p == nil {
		query, p = readQuery(r)
	}
	if p == nil {
		c, p = s.identify(r, query, sendAccess, body.Authorization)
	}
	if p != nil {
		problem.Write(w, *p)
		return
	}
	requestID, keep, ok := bodyRequestID(w, body.RequestID)
	if !ok {
		return
	}
	req, wait, p := s.sendRequest(r, query, c.tenant, body, requestID, keep)
	if p != nil {
		p.RequestID = requestID
		problem.Write(w, *p)
		return
	}
	if !wait.on {
		if _, err := s.publish(r.Context(), req, ""); err != nil {
			s.writeCallError(w, r, req, err)
			return
		}
		writeJSON(w, http.StatusAccepted, idsOf(req))
		return
	}
	rep, err := s.call(r.Context(), c, req, wait.timeout)
	if err != nil {
		s.writeCallError(w, r, req, err)
		return
	}
	s.writeMessageReply(w, req, idsOf(req), rep)
}

// bodyRequestID is the request id of a send or signal body: the caller's (keep), checked before
// it is answered in X-Request-Id and any problem, or a new one. ok is false when the caller's was
// refused (answered 400).
func bodyRequestID(w http.ResponseWriter, chosen string) (requestID string, keep, ok bool) {
	requestID, keep = chosen, chosen != ""
	if !keep {
		requestID = uuid.NewString()
	} else if err := subject.CheckRequestID("requestId", requestID); err != nil {
		problem.InvalidField.Write(w, err.Error())
		return "", false, false
	}
	w.Header().Set("X-Request-Id", requestID)
	return requestID, keep, true
}

// readSendBody reads send's body: one JSON object of at most sendBodyLimit bytes.
func (s *Server) readSendBody(w http.ResponseWriter, r *http.Request) (sendBody, *problem.Problem) {
	var body sendBody
	raw, p := s.readBody(w, r, s.cfg.sendBodyLimit())
	if p != nil {
		return body, p
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&body); err != nil || dec.More() {
		return body, problem.InvalidJSON.New("the body must be one JSON object: " + jsonProblem(err))
	}
	return body, nil
}

// sendWait is how a send call waits: not at all, or up to timeout for the reply.
type sendWait struct {
	on      bool
	timeout time.Duration
}

// sendRequest checks the message of a send call and builds its request: the message's fields
// (sendTarget), wait and timeoutSeconds, the tenant's waiting calls, the target's registration
// and host, then the payload (sendPayload).
func (s *Server) sendRequest(r *http.Request, query url.Values, tenant string, body sendBody, requestID string, keep bool) (*agentbusv1.Request, sendWait, *problem.Problem) {
	var wait sendWait
	wf, kind, participant, p := sendTarget(tenant, body, requestID)
	if p != nil {
		return nil, wait, p
	}
	var perr string
	if wait.on, wait.timeout, perr = waitParams(query); perr != "" {
		return nil, wait, problem.InvalidQuery.New(perr)
	}
	if wait.on {
		if p := s.holdWaiting(r, tenant); p != nil {
			return nil, wait, p
		}
	}
	if p := s.checkAgent(r, wf, kind, body.Text, keep); p != nil {
		return nil, wait, p
	}
	req := newMessageRequest(wf, participant, kind, body.Text, requestID, keep)
	req.Scope, req.Hint = body.Topic, body.Hint
	return req, wait, s.sendPayload(r.Context(), req, body)
}

// sendTarget checks the fields of a send body that name the message and its target: the
// required fields, type, names, participant, lengths, and the method of Data and
// Webhook messages. The workflow type defaults to ident.DefaultWorkflowType.
func sendTarget(tenant string, body sendBody, requestID string) (ident.Workflow, agentbusv1.Kind, string, *problem.Problem) {
	fail := func(t problem.Type, detail string) (ident.Workflow, agentbusv1.Kind, string, *problem.Problem) {
		return ident.Workflow{}, 0, "", t.New(detail)
	}
	for _, f := range []struct{ name, v string }{
		{"agentName", body.AgentName}, {"activationName", body.ActivationName}, {"participantId", body.ParticipantID}, {"type", body.Type},
	} {
		if strings.TrimSpace(f.v) == "" {
			return fail(problem.MissingField, f.name+" is required")
		}
	}
	k, ok := msgkind.Named(body.Type)
	if !ok || !k.Sent {
		return fail(problem.InvalidField, "type must be one of Chat, Data, File, Webhook")
	}
	wf := ident.Workflow{Tenant: tenant, Agent: body.AgentName, WorkflowType: cmp.Or(body.WorkflowType, ident.DefaultWorkflowType), Activation: body.ActivationName}
	for _, f := range []struct{ name, v string }{
		{"agentName", wf.Agent}, {"workflowType", wf.WorkflowType}, {"activationName", wf.Activation},
	} {
		if err := ident.ValidName(f.v); err != nil {
			return fail(problem.InvalidField, f.name+" "+err.Error())
		}
	}
	participant, err := ident.SenderParticipant(body.ParticipantID)
	switch {
	case errors.Is(err, ident.ErrAgentParticipant):
		return fail(problem.InvalidField, err.Error())
	case err != nil || participant == "":
		return fail(problem.InvalidField, "participantId must be 1-256 characters of text")
	case len(body.Text) > maxTextLen || len(body.Topic) > maxTopicLen || len(body.Hint) > maxHintLen:
		return fail(problem.InvalidField, "text, topic or hint is too long")
	case k.Method && strings.TrimSpace(body.Text) == "":
		return fail(problem.MissingField, "text is required for "+body.Type+" messages: it names the method")
	}
	return wf, k.Wire, participant, nil
}

// sendPayload puts a send body's data on req, as its kind takes it: a Webhook's body, a Data
// message's parameters (a JSON object that matches the method's schema), a Chat message's data,
// a File's stored content.
func (s *Server) sendPayload(ctx context.Context, req *agentbusv1.Request, body sendBody) *problem.Problem {
	given := len(body.Data) > 0 && string(body.Data) != "null"
	k := msgkind.Of(req.GetKind())
	switch k.Payload {
	case msgkind.HTTPBody:
		req.Body = webhookBody(body.Data)
		req.ContentType = "application/json"
	case msgkind.StoredFile:
		ref, p := s.storeFile(ctx, req, body)
		if p != nil {
			return p
		}
		req.File = ref
	default:
		// JSON data: a method's parameters (Data), or data beside the text (Chat).
		if k.Method && given && !isJSONObject(body.Data) {
			return problem.InvalidField.New("data must be a JSON object holding the method's parameters")
		}
		if given {
			req.Data = body.Data
		}
		if k.Method {
			if p := s.checkParams(req.GetAgentName(), req.GetMethod(), req.GetData()); p != nil {
				return p
			}
		}
	}
	return nil
}

// waitParams reads wait and timeoutSeconds.
func waitParams(q url.Values) (wait bool, timeout time.Duration, problem string) {
	if v := q.Get("wait"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, 0, "wait must be true or false"
		}
		wait = b
	}
	timeout = defaultWait
	if v := q.Get("timeoutSeconds"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxWaitSecs {
			return false, 0, fmt.Sprintf("timeoutSeconds must be a whole number from 1 to %d", maxWaitSecs)
		}
		timeout = time.Duration(n) * time.Second
	}
	return wait, timeout, ""
}

// storeFile decodes a File message's content and stores it in AGENTBUS_FILES, if req's tenant may
// store it (admit). Empty content and invalid base64 are not errors: the handler is told, and
// answers as the interface asks (docs/interface.md#41-send-message-admin, rules 3 and 4).
func (s *Server) storeFile(ctx context.Context, req *agentbusv1.Request, body sendBody) (*agentbusv1.FileRef, *problem.Problem) {
	tenant := req.GetTenantId()
	ref := &agentbusv1.FileRef{FileName: body.Text}
	var content string
	switch {
	case len(body.Data) == 0 || string(body.Data) == "null":
		ref.Empty = true
		return ref, nil
	case body.Data[0] == '"':
		if err := json.Unmarshal(body.Data, &content); err != nil {
			return nil, problem.InvalidField.New("data must be a base64 string or a file object")
		}
	case body.Data[0] == '{':
		var obj fileObject
		if err := json.Unmarshal(body.Data, &obj); err != nil {
			return nil, problem.InvalidField.New("data is not a valid file object: " + jsonProblem(err))
		}
		if obj.Content != nil {
			content = *obj.Content
		}
		if obj.FileName != "" {
			ref.FileName = obj.FileName
		}
		ref.ContentType = obj.ContentType
	default:
		return nil, problem.InvalidField.New("data must be a base64 string or a file object")
	}
	if len(ref.FileName) > 1024 || len(ref.ContentType) > 256 {
		return nil, problem.InvalidField.New("fileName or contentType is too long")
	}
	content = strings.TrimSpace(content)
	if content == "" {
		ref.Empty = true
		return ref, nil
	}
	// Refuse oversized files before decoding or storing anything.
	if int64(base64.StdEncoding.DecodedLen(len(content))) > s.cfg.MaxFileBytes+2 {
		return nil, problem.FileTooLarge.New(fmt.Sprintf("files may be at most %d bytes", s.cfg.MaxFileBytes))
	}
	data, ok := decodeBase64(content)
	if !ok {
		ref.Invalid = true
		return ref, nil
	}
	if int64(len(data)) > s.cfg.MaxFileBytes {
		return nil, problem.FileTooLarge.New(fmt.Sprintf("files may be at most %d bytes", s.cfg.MaxFileBytes))
	}
	if len(data) == 0 {
		ref.Empty = true
		return ref, nil
	}
	if p := s.admitCall(tenant, req.GetAgentName(), req.GetWorkflowId()); p != nil {
		return nil, p
	}
	if p := s.admit(ctx, tenant, req.GetWorkflowId(), int64(len(data))); p != nil {
		return nil, p
	}
	sum := sha256.Sum256(data)
	ref.Size, ref.Sha256 = int64(len(data)), hex.EncodeToString(sum[:])
	ref.Object = subject.FileObject(tenant, uuid.NewString())
	meta := jetstream.ObjectMeta{Name: ref.Object, Description: ref.FileName, Headers: map[string][]string{"Content-Type": {ref.ContentType}}}
	info, err := s.res.Files.Put(ctx, meta, bytes.NewReader(data))
	if err != nil {
		s.log.Error("storing file", "err", err)
		return nil, problem.BusUnavailable.New("the file could not be stored; try again")
	}
	s.storage.countFile(tenant, info)
	return ref, nil
}

// decodeBase64 accepts standard and URL-safe base64, padded or not, ignoring line breaks.
func decodeBase64(s string) ([]byte, bool) {
	s = strings.NewReplacer("\n", "", "\r", "").Replace(s)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, true
		}
	}
	return nil, false
}

// webhookBody is the body a Webhook message's data becomes: a JSON string's text, else the JSON.
func webhookBody(data json.RawMessage) []byte {
	if len(data) == 0 || string(data) == "null" {
		return nil
	}
	var str string
	if json.Unmarshal(data, &str) == nil {
		return []byte(str)
	}
	return data
}

func isJSONObject(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{'
}

// jsonProblem describes a JSON decoding error without internals.
func jsonProblem(err error) string { return problem.JSONDetail(err) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	writeJSONBody(w, status, b, err)
}

// writeJSONBody answers with the JSON body b, or a 500 problem when encoding it failed (err).
func writeJSONBody(w http.ResponseWriter, status int, b []byte, err error) {
	if err != nil {
		problem.Internal.Write(w, "internal error")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
