package ingress

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/problem"
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

// sendTypes maps the type field to the bus kind.
var sendTypes = map[string]agentbusv1.Kind{
	"Chat":    agentbusv1.Kind_KIND_CHAT,
	"Data":    agentbusv1.Kind_KIND_DATA,
	"File":    agentbusv1.Kind_KIND_FILE,
	"Webhook": agentbusv1.Kind_KIND_WEBHOOK,
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
// answers 202 at once or, with wait=true, the handler's reply.
func (s *Server) send(w http.ResponseWriter, r *http.Request) {
	requestID := ""
	fail := func(status int, slug, detail string) {
		problem.Write(w, problem.Problem{Status: status, Slug: slug, Detail: detail, RequestID: requestID})
	}
	raw, p := readBody(w, r, s.sendBodyLimit())
	if p != nil {
		problem.Write(w, *p)
		return
	}
	var body sendBody
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&body); err != nil || dec.More() {
		fail(http.StatusBadRequest, "invalid-json", "the body must be one JSON object: "+jsonProblem(err))
		return
	}

	key, p := s.authenticateSend(r, body.Authorization)
	if p != nil {
		problem.Write(w, *p)
		return
	}
	tenant, p := s.sendTenant(r, key)
	if p != nil {
		problem.Write(w, *p)
		return
	}
	if key.Role == keys.RoleUser {
		fail(http.StatusForbidden, "forbidden", "sending through the admin endpoint needs an admin key")
		return
	}

	requestID = body.RequestID
	keep := requestID != ""
	if !keep {
		requestID = uuid.NewString()
	}
	w.Header().Set("X-Request-Id", requestID)
	if len(requestID) > maxIdempotencyKey {
		fail(http.StatusBadRequest, "invalid-field", fmt.Sprintf("requestId is longer than %d characters", maxIdempotencyKey))
		return
	}
	for _, f := range []struct{ name, v string }{
		{"agentName", body.AgentName}, {"activationName", body.ActivationName}, {"participantId", body.ParticipantID}, {"type", body.Type},
	} {
		if strings.TrimSpace(f.v) == "" {
			fail(http.StatusBadRequest, "missing-field", f.name+" is required")
			return
		}
	}
	kind, ok := sendTypes[body.Type]
	if !ok {
		fail(http.StatusBadRequest, "invalid-field", "type must be one of Chat, Data, File, Webhook")
		return
	}
	if body.WorkflowType == "" {
		body.WorkflowType = ident.DefaultWorkflowType
	}
	wf := ident.Workflow{Tenant: tenant, Agent: body.AgentName, WorkflowType: body.WorkflowType, Activation: body.ActivationName}
	for _, f := range []struct{ name, v string }{
		{"agentName", wf.Agent}, {"workflowType", wf.WorkflowType}, {"activationName", wf.Activation},
	} {
		if err := ident.ValidName(f.v); err != nil {
			fail(http.StatusBadRequest, "invalid-field", f.name+" "+err.Error())
			return
		}
	}
	participant, err := ident.SenderParticipant(body.ParticipantID)
	if errors.Is(err, ident.ErrAgentParticipant) {
		fail(http.StatusBadRequest, "invalid-field", err.Error())
		return
	}
	if err != nil || participant == "" {
		fail(http.StatusBadRequest, "invalid-field", "participantId must be 1-256 characters of text")
		return
	}
	if len(body.Text) > maxTextLen || len(body.Topic) > maxTopicLen || len(body.Hint) > maxHintLen {
		fail(http.StatusBadRequest, "invalid-field", "text, topic or hint is too long")
		return
	}
	if (kind == agentbusv1.Kind_KIND_DATA || kind == agentbusv1.Kind_KIND_WEBHOOK) && strings.TrimSpace(body.Text) == "" {
		fail(http.StatusBadRequest, "missing-field", "text is required for "+body.Type+" messages: it names the method")
		return
	}
	wait, timeout, perr := waitParams(r)
	if perr != "" {
		fail(http.StatusBadRequest, "invalid-query", perr)
		return
	}
	if wait {
		if p := s.holdWaiting(r, tenant); p != nil {
			p.RequestID = requestID
			problem.Write(w, *p)
			return
		}
	}
	if p := s.checkTarget(wf, kind, body.Text); p != nil {
		p.RequestID = requestID
		problem.Write(w, *p)
		return
	}

	req := newMessageRequest(wf, participant, kind, body.Text, requestID, keep)
	req.Scope, req.Hint = body.Topic, body.Hint
	switch kind {
	case agentbusv1.Kind_KIND_DATA, agentbusv1.Kind_KIND_WEBHOOK:
		if kind == agentbusv1.Kind_KIND_WEBHOOK {
			req.Body = webhookBody(body.Data)
			req.ContentType = "application/json"
		} else if len(body.Data) > 0 && string(body.Data) != "null" {
			if !isJSONObject(body.Data) {
				fail(http.StatusBadRequest, "invalid-field", "data must be a JSON object holding the method's parameters")
				return
			}
			req.Data = body.Data
		}
	case agentbusv1.Kind_KIND_CHAT:
		if len(body.Data) > 0 && string(body.Data) != "null" {
			req.Data = body.Data
		}
	case agentbusv1.Kind_KIND_FILE:
		ref, p := s.storeFile(r.Context(), tenant, body)
		if p != nil {
			p.RequestID = requestID
			problem.Write(w, *p)
			return
		}
		req.File = ref
	}

	ids := idsOf(req)
	if !wait {
		if _, err := s.publish(r.Context(), req, ""); err != nil {
			s.writeCallError(w, r, req, err)
			return
		}
		writeJSON(w, http.StatusAccepted, ids)
		return
	}
	rep, err := s.call(r.Context(), req, timeout)
	if err != nil {
		s.writeCallError(w, r, req, err)
		return
	}
	s.writeMessageReply(w, req, ids, rep)
}

// sendIDs name what send accepted.
type sendIDs struct {
	MessageID  string `json:"messageId"`
	RequestID  string `json:"requestId"`
	WorkflowID string `json:"workflowId"`
	ThreadID   string `json:"threadId"`
}

// authenticateSend checks the Authorization header and the body's authorization field: the
// header wins when both are valid, and an invalid one of them is refused.
func (s *Server) authenticateSend(r *http.Request, bodyAuth string) (keys.Key, *problem.Problem) {
	return s.authenticate("the Authorization header or the authorization field", r.Header.Get("Authorization"), bodyAuth)
}

// sendTenant finds the tenant of an admin call: the path's, or X-Tenant-Id; it must be the key's
// (system keys may name any existing tenant) and exist.
func (s *Server) sendTenant(r *http.Request, key keys.Key) (string, *problem.Problem) {
	bad := func(status int, slug, detail string) *problem.Problem {
		return &problem.Problem{Status: status, Slug: slug, Detail: detail}
	}
	path, header := r.PathValue("tenantId"), r.Header.Get("X-Tenant-Id")
	tenant := path
	switch {
	case path != "" && header != "" && path != header:
		return "", bad(http.StatusBadRequest, "tenant-mismatch", "the path tenant and X-Tenant-Id differ")
	case tenant == "":
		tenant = header
	}
	if tenant == "" {
		return "", bad(http.StatusBadRequest, "missing-tenant", "the tenant is required in the path or X-Tenant-Id")
	}
	if q, given := r.URL.Query()["tenantId"]; given && q[0] != tenant {
		return "", bad(http.StatusForbidden, "forbidden", "the tenantId query parameter names another tenant")
	}
	if !ident.ValidTenant(tenant) {
		return "", bad(http.StatusBadRequest, "invalid-tenant", ident.ErrInvalidTenant.Error())
	}
	if key.Role != keys.RoleSystemAdmin && key.Tenant != tenant {
		return "", bad(http.StatusForbidden, "forbidden", "the API key belongs to another tenant")
	}
	if key.Role == keys.RoleSystemAdmin {
		// A system key may name any tenant, which must exist. A tenant's own key needs no read:
		// deleting a tenant revokes its keys (keys.Store.DeleteTenant), as webhook and converse
		// rely on too (startUserCall).
		if _, err := s.keys.GetTenant(r.Context(), tenant); err != nil {
			if errors.Is(err, keys.ErrUnknownTenant) {
				return "", bad(http.StatusNotFound, "unknown-tenant", "no such tenant")
			}
			s.log.Error("reading tenant", "err", err)
			return "", &problem.Problem{Status: http.StatusServiceUnavailable, Slug: "bus-unavailable", Detail: "try again", RetryAfter: 1}
		}
	}
	noteTenant(r, tenant)
	return tenant, nil
}

// waitParams reads wait and timeoutSeconds.
func waitParams(r *http.Request) (wait bool, timeout time.Duration, problem string) {
	q := r.URL.Query()
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

// storeFile decodes a File message's content and stores it in AGENTBUS_FILES. Empty content and
// invalid base64 are not errors: the handler is told, and answers as the interface asks
// (docs/interface.md#41-send-message-admin, rules 3 and 4).
func (s *Server) storeFile(ctx context.Context, tenant string, body sendBody) (*agentbusv1.FileRef, *problem.Problem) {
	ref := &agentbusv1.FileRef{FileName: body.Text}
	var content string
	switch {
	case len(body.Data) == 0 || string(body.Data) == "null":
		ref.Empty = true
		return ref, nil
	case body.Data[0] == '"':
		if err := json.Unmarshal(body.Data, &content); err != nil {
			return nil, &problem.Problem{Status: http.StatusBadRequest, Slug: "invalid-field", Detail: "data must be a base64 string or a file object"}
		}
	case body.Data[0] == '{':
		var obj fileObject
		if err := json.Unmarshal(body.Data, &obj); err != nil {
			return nil, &problem.Problem{Status: http.StatusBadRequest, Slug: "invalid-field", Detail: "data is not a valid file object: " + jsonProblem(err)}
		}
		if obj.Content != nil {
			content = *obj.Content
		}
		if obj.FileName != "" {
			ref.FileName = obj.FileName
		}
		ref.ContentType = obj.ContentType
	default:
		return nil, &problem.Problem{Status: http.StatusBadRequest, Slug: "invalid-field", Detail: "data must be a base64 string or a file object"}
	}
	if len(ref.FileName) > 1024 || len(ref.ContentType) > 256 {
		return nil, &problem.Problem{Status: http.StatusBadRequest, Slug: "invalid-field", Detail: "fileName or contentType is too long"}
	}
	content = strings.TrimSpace(content)
	if content == "" {
		ref.Empty = true
		return ref, nil
	}
	// Refuse oversized files before decoding or storing anything.
	if int64(base64.StdEncoding.DecodedLen(len(content))) > s.cfg.MaxFileBytes+2 {
		return nil, &problem.Problem{Status: http.StatusRequestEntityTooLarge, Slug: "file-too-large", Detail: fmt.Sprintf("files may be at most %d bytes", s.cfg.MaxFileBytes)}
	}
	data, ok := decodeBase64(content)
	if !ok {
		ref.Invalid = true
		return ref, nil
	}
	if int64(len(data)) > s.cfg.MaxFileBytes {
		return nil, &problem.Problem{Status: http.StatusRequestEntityTooLarge, Slug: "file-too-large", Detail: fmt.Sprintf("files may be at most %d bytes", s.cfg.MaxFileBytes)}
	}
	if len(data) == 0 {
		ref.Empty = true
		return ref, nil
	}
	sum := sha256.Sum256(data)
	ref.Size, ref.Sha256 = int64(len(data)), hex.EncodeToString(sum[:])
	ref.Object = tenant + "/" + uuid.NewString()
	meta := jetstream.ObjectMeta{Name: ref.Object, Description: ref.FileName, Headers: map[string][]string{"Content-Type": {ref.ContentType}}}
	if _, err := s.res.Files.Put(ctx, meta, bytes.NewReader(data)); err != nil {
		s.log.Error("storing file", "err", err)
		return nil, &problem.Problem{Status: http.StatusServiceUnavailable, Slug: "bus-unavailable", Detail: "the file could not be stored; try again", RetryAfter: 1}
	}
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
		problem.Write(w, problem.Problem{Status: http.StatusInternalServerError, Slug: "internal", Detail: "internal error"})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
