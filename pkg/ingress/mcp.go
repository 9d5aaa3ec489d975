package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/jsonschema"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/registry"
	"github.com/agentbus/agentbus/pkg/subject"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// The MCP endpoint (POST /mcp) offers the Data methods of the agents a tenant may call as Model
// Context Protocol tools, over the Streamable HTTP transport of the official Go SDK. It is
// stateless: every POST carries its API key and is answered on its own, so any ingress instance
// can serve any request and nothing is kept between them.
//
// A tool is named {agent}.{method}. Its arguments are the method's parameters plus two reserved
// ones that address the conversation: workflow (as converse takes it; default the agent's first
// workflow type, activation "default") and participantId (default "user"). tools/call runs the
// method through the bus exactly as converse Data does: same ordering, state and history.

// Arguments of every MCP tool that address the conversation instead of going to the method.
const (
	mcpWorkflowArg    = "workflow"
	mcpParticipantArg = "participantId"
)

// mcpPath is the endpoint's path, as logs name it.
const mcpPath = "/mcp"

// mcpServerVersion is what initialize reports as the server's version.
const mcpServerVersion = "1.0.0"

// maxMCPBatch is the most messages one JSON-RPC batch may hold (the protocol versions before
// 2025-06-18 allow batches). A batch costs what its messages sent one by one cost: each request
// in it past the first takes its own token of the key's rate limit, and each tool call past the
// first its own place among the tenant's waiting calls. The length bounds what one HTTP request
// holds at once: at most this many calls in flight and answers kept until the last is done.
const maxMCPBatch = 16

// mcpCallKey carries the authenticated call (a *mcpRequest) from mcp into the SDK's handlers.
type mcpCallKey struct{}

// mcpRequest is one POST /mcp as the SDK's handlers see it: the authenticated call, and how many
// of its messages have been counted against the limits so far. The HTTP request itself took the
// first token and the first waiting place (startUserCall).
type mcpRequest struct {
	userCall
	requests  atomic.Int32 // JSON-RPC requests, notifications left out
	toolCalls atomic.Int32
}

// mcpFromContext is the request a handler of the SDK serves.
func mcpFromContext(ctx context.Context) *mcpRequest {
	mr, _ := ctx.Value(mcpCallKey{}).(*mcpRequest)
	return mr
}

// mcpRateLimit is the middleware that counts each request of a batch past the first against the
// key's rate limit; one over it is answered with a JSON-RPC error and not run.
func (s *Server) mcpRateLimit(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if mr := mcpFromContext(ctx); mr != nil && !strings.HasPrefix(method, "notifications/") && mr.requests.Add(1) > 1 {
			if p := s.limit(mr.key); p != nil {
				return nil, mcpError(*p)
			}
		}
		return next(ctx, method, req)
	}
}

// holdWaitingTool counts a tool call of a batch past the first among the tenant's waiting calls
// until release is called.
func (s *Server) holdWaitingTool(mr *mcpRequest) (release func(), _ *problem.Problem) {
	if mr.toolCalls.Add(1) == 1 {
		return func() {}, nil // the HTTP request's own place
	}
	if p := s.enterWaiting(mr.tenant); p != nil {
		return nil, p
	}
	return func() { s.leaveWaiting(mr.tenant) }, nil
}

// newMCPHandler returns the handler the MCP endpoint hands authenticated requests to.
func (s *Server) newMCPHandler() http.Handler {
	var warned sync.Map // the methods left out and why, each logged once: servers are built per request
	leftOut := func(agent, method, why string) {
		if _, seen := warned.LoadOrStore(agent+"\x00"+method+"\x00"+why, true); !seen {
			s.log.Warn("Data method not offered as an MCP tool: "+why, "agent", agent, "method", method)
		}
	}
	return mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		mr := mcpFromContext(r.Context())
		if mr == nil {
			return nil // not reached: mcp authenticates first
		}
		return s.mcpServer(mr.tenant, leftOut)
	}, &mcp.StreamableHTTPOptions{
		Stateless:           true,
		JSONResponse:        true,
		MaxRequestBodyBytes: maxConverseBody,
		Logger:              s.log,
	})
}

// mcp serves POST /mcp. Auth: Authorization: Bearer (a system key names the tenant in
// X-Tenant-Id). A tools/call waits for its reply like converse does and counts among the
// tenant's waiting requests.
func (s *Server) mcp(w http.ResponseWriter, r *http.Request) {
	c, ok := s.startUserCall(w, r, mcpAccess)
	if !ok {
		return
	}
	body, p := s.readBody(w, r, maxConverseBody)
	if p != nil {
		p.RequestID = c.requestID
		problem.Write(w, *p)
		return
	}
	call, rpcErr := readMCPMessage(r.Header.Get("Content-Type"), body)
	if rpcErr != nil {
		writeRPCError(w, http.StatusBadRequest, nil, rpcErr)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	pw := &mcpProblemWriter{ResponseWriter: w, requestID: c.requestID, call: call}
	s.mcpHandler.ServeHTTP(pw, r.WithContext(context.WithValue(r.Context(), mcpCallKey{}, &mcpRequest{userCall: c})))
	pw.finish()
}

// readMCPMessage reads a JSON body as the SDK will, to answer what JSON-RPC defines an answer
// for instead of the SDK's plain-text refusal: a body that is not JSON (parse error) or not a
// JSON-RPC message (invalid request). It returns the request the body holds, nil for a batch,
// a response or a body that is not JSON by its Content-Type (the SDK refuses those with 415).
func readMCPMessage(contentType string, body []byte) (*jsonrpc.Request, *jsonrpc.Error) {
	if mt, _, err := mime.ParseMediaType(contentType); err != nil || mt != "application/json" {
		return nil, nil
	}
	if !json.Valid(body) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeParseError, Message: "parse error: the body is not JSON"}
	}
	if trimmed := bytes.TrimSpace(body); trimmed[0] == '[' {
		// A batch: the SDK answers, or refuses it for the protocol version, once its length is
		// known to be within bounds.
		var batch []json.RawMessage
		if err := json.Unmarshal(trimmed, &batch); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "invalid request: the batch is not an array of JSON-RPC messages"}
		}
		if len(batch) > maxMCPBatch {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
				Message: fmt.Sprintf("invalid request: a batch may hold at most %d messages; this one holds %d", maxMCPBatch, len(batch))}
		}
		return nil, nil
	}
	msg, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "invalid request: the body is not a JSON-RPC 2.0 message"}
	}
	req, _ := msg.(*jsonrpc.Request)
	return req, nil
}

// rpcErrorResponse is a JSON-RPC error response whose id may be null, as JSON-RPC requires when
// the request's id could not be read (jsonrpc.Response leaves a missing id out).
type rpcErrorResponse struct {
	JSONRPC string         `json:"jsonrpc"`
	ID      any            `json:"id"`
	Error   *jsonrpc.Error `json:"error"`
}

// writeRPCError answers a JSON-RPC error response with id (nil: null).
func writeRPCError(w http.ResponseWriter, status int, id any, e *jsonrpc.Error) {
	b, _ := json.Marshal(rpcErrorResponse{JSONRPC: "2.0", ID: id, Error: e}) // cannot fail: strings and numbers
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// maxMCPErrorDetail bounds the detail taken from the SDK's plain-text error answers.
const maxMCPErrorDetail = 300

// sdkNotHandled begins the SDK's plain-text refusal of a message whose method it does not have:
// the text of its jsonrpc2.ErrNotHandled, which the SDK does not export. TestMCPWire fails if a
// new SDK words it otherwise (the answer would then be a problem again, not a wrong one).
const sdkNotHandled = "JSON RPC not handled"

// mcpProblemWriter turns the MCP SDK's plain-text error answers at the HTTP level into a
// JSON-RPC error for a method the server does not have (which the SDK refuses in plain text
// before protocol version 2026-07-28), and into problem+json, as every other endpoint answers,
// for the rest (a missing Accept header, a wrong Content-Type). JSON-RPC answers pass through
// untouched.
type mcpProblemWriter struct {
	http.ResponseWriter
	requestID string
	call      *jsonrpc.Request // the message, when it is one request or notification
	status    int              // an error answer being turned into a problem
	detail    []byte
}

func (w *mcpProblemWriter) WriteHeader(code int) {
	if code >= 400 && strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		w.status = code
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *mcpProblemWriter) Write(b []byte) (int, error) {
	if w.status != 0 {
		if room := maxMCPErrorDetail - len(w.detail); room > 0 {
			w.detail = append(w.detail, b[:min(len(b), room)]...)
		}
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flushes of streamed answers).
func (w *mcpProblemWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish writes what an error answer held back becomes.
func (w *mcpProblemWriter) finish() {
	if w.status == 0 {
		return
	}
	detail := strings.TrimSpace(string(w.detail))
	if w.status == http.StatusBadRequest && w.call != nil && strings.HasPrefix(detail, sdkNotHandled) {
		// The specification's answer to a request is a JSON-RPC response, its error included;
		// a notification gets none, so its refusal stays an HTTP error, with the error as body.
		e := &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found: " + subject.Quote(w.call.Method)}
		w.Header().Del("X-Content-Type-Options") // the SDK's, for its plain text
		if w.call.IsCall() {
			writeRPCError(w.ResponseWriter, http.StatusOK, w.call.ID.Raw(), e)
		} else {
			writeRPCError(w.ResponseWriter, http.StatusBadRequest, nil, e)
		}
		return
	}
	p := mcpTransportProblem(w.status).New(detail)
	p.Status, p.RequestID = w.status, w.requestID
	problem.Write(w.ResponseWriter, *p)
}

// mcpTransportProblem is the problem type of the MCP transport's refusal with status: the
// type of that status, or invalid-mcp-request (internal for a 5xx) for one without its own.
func mcpTransportProblem(status int) problem.Type {
	for _, t := range []problem.Type{problem.UnsupportedMediaType, problem.BodyTooLarge, problem.MethodNotAllowed, problem.NotFound, problem.Forbidden} {
		if t.Status == status {
			return t
		}
	}
	if status >= 500 {
		return problem.Internal
	}
	return problem.InvalidMCPRequest
}

// mcpServer returns an MCP server whose tools are the Data methods of the agents the tenant may
// call; leftOut hears of the methods it cannot offer. It is built per request: the registry may
// change between requests, and building it costs a few allocations per tool.
func (s *Server) mcpServer(tenant string, leftOut func(agent, method, why string)) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "agentbus", Version: mcpServerVersion}, &mcp.ServerOptions{Logger: s.log})
	srv.AddReceivingMiddleware(s.mcpRateLimit)
	for _, a := range s.dir.VisibleAgents(tenant) {
		for _, method := range a.DataMethods {
			if m, ok := a.Method(method); ok {
				method = m.Name // as the agent registered it, not lowercased
			}
			tool, why := mcpTool(a, method)
			if tool == nil {
				leftOut(a.Name, method, why)
				continue
			}
			srv.AddTool(tool, s.mcpCall(a.Name, method))
		}
	}
	return srv
}

// mcpTool describes an agent's Data method as a tool: its parameter schema with the addressing
// arguments added. It returns nil and the reason for a method that cannot be one: its parameters
// are not a JSON object (a tool's arguments are one, and so are a Data call's parameters on
// every endpoint), or they use a reserved name.
func mcpTool(a registry.Agent, method string) (*mcp.Tool, string) {
	schema := map[string]any{"type": "object"}
	description := fmt.Sprintf("Calls the Data method %q of the agent %s.", method, a.Name)
	if m, ok := a.Method(method); ok {
		if m.Description != "" {
			description = m.Description
		}
		if len(m.InputSchema) > 0 {
			params, ok := jsonschema.ToolParameters(m.InputSchema)
			if !ok {
				return nil, "its parameters are not a JSON object"
			}
			var own map[string]any
			if json.Unmarshal(params, &own) == nil {
				schema = own
			}
		}
	}
	props, _ := schema["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
	}
	for _, reserved := range []string{mcpWorkflowArg, mcpParticipantArg} {
		if _, taken := props[reserved]; taken {
			return nil, "its parameters use a reserved name"
		}
	}
	props[mcpWorkflowArg] = map[string]any{
		"type":        "string",
		"description": fmt.Sprintf("The workflow instance to call, as converse takes it: %s, %s:{workflowType} (activation \"default\") or a full workflow id {tenantId}:%s:{workflowType}:{activation}; default %s:%s.", a.Name, a.Name, a.Name, a.Name, defaultWorkflowType(a)),
	}
	props[mcpParticipantArg] = map[string]any{
		"type":        "string",
		"description": "The participant whose conversation the call belongs to; default " + converseParticipant + ".",
	}
	schema["properties"] = props
	return &mcp.Tool{Name: a.Name + "." + method, Description: description, InputSchema: schema}, ""
}

// defaultWorkflowType is the workflow type a tool call addresses when it names no workflow.
func defaultWorkflowType(a registry.Agent) string {
	if len(a.WorkflowTypes) == 0 {
		return ident.DefaultWorkflowType
	}
	return a.WorkflowTypes[0]
}

// mcpCall returns the handler of the tool of agent's Data method.
func (s *Server) mcpCall(agent, method string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (_ *mcp.CallToolResult, err error) {
		mr := mcpFromContext(ctx)
		// The call counts in the stats window once its agent is known to the tenant (st.agent),
		// with the status of the problem it met (a failed method's too), or 200.
		var st requestState
		status, start := http.StatusOK, time.Now()
		defer func() {
			if err != nil && status == http.StatusOK {
				status = http.StatusInternalServerError
			}
			end := time.Now()
			s.metrics.observeCall(&st, status, end, end.Sub(start))
		}()
		args := map[string]json.RawMessage{}
		if raw := req.Params.Arguments; len(raw) > 0 && string(raw) != "null" {
			if err := json.Unmarshal(raw, &args); err != nil {
				return nil, invalidParams("the arguments must be a JSON object")
			}
		}
		wf, participant, err := mcpAddress(args, agent, mr.tenant, s.dir)
		if err != nil {
			return nil, invalidParams(err.Error())
		}
		delete(args, mcpWorkflowArg)
		delete(args, mcpParticipantArg)
		params, err := json.Marshal(args)
		if err != nil {
			return nil, fmt.Errorf("encoding arguments: %w", err)
		}
		p := s.checkTarget(ctx, wf, agentbusv1.Kind_KIND_DATA, method, mr.keep)
		if countsUnderAgent(p) {
			st.tenant, st.agent = wf.Tenant, wf.Agent
		}
		if p != nil {
			status = p.Status
			return nil, mcpError(*p)
		}
		if p := s.checkParams(agent, method, params); p != nil {
			// Arguments that do not match the tool's inputSchema are a tool execution error, not a
			// protocol error, so that a model can read why and call again (MCP 2025-11-25,
			// server/tools, "Error Handling").
			status = p.Status
			return mcpToolError(p), nil
		}
		release, p := s.holdWaitingTool(mr)
		if p != nil {
			status = p.Status
			return nil, mcpError(*p)
		}
		defer release()
		requestID, keep := mr.requestID, mr.keep
		if !keep {
			requestID = uuid.NewString() // one HTTP request may call several tools
		}
		call := newMessageRequest(wf, participant, agentbusv1.Kind_KIND_DATA, method, requestID, keep)
		call.Data = params
		rep, err := s.call(ctx, mr.caller, call, defaultWait)
		if err != nil {
			p := s.callProblem(mcpPath, call, err)
			status = p.Status
			return nil, mcpError(p)
		}
		ans, p := s.messageAnswer(call, idsOf(call), rep)
		if p != nil {
			status = p.Status
			// The method failed: a tool error the model can read, not a protocol error.
			return mcpToolError(p), nil
		}
		return mcpResult(ans), nil
	}
}

// mcpToolError is a tool result that reports p, for a model to read.
func mcpToolError(p *problem.Problem) *mcp.CallToolResult {
	detail := fmt.Sprintf("%s (%d %s)", p.Detail, p.Status, p.Slug)
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: detail}}}
}

// mcpAddress reads the conversation a tool call addresses from its reserved arguments.
func mcpAddress(args map[string]json.RawMessage, agent, tenant string, dir *registry.Directory) (ident.Workflow, string, error) {
	str := func(name string) (string, error) {
		raw, ok := args[name]
		if !ok || string(raw) == "null" {
			return "", nil
		}
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			return "", fmt.Errorf("%s must be a string", name)
		}
		return v, nil
	}
	ref, err := str(mcpWorkflowArg)
	if err != nil {
		return ident.Workflow{}, "", err
	}
	if strings.TrimSpace(ref) == "" {
		a, _ := dir.Agent(agent)
		ref = agent + ":" + defaultWorkflowType(a)
	}
	wf, err := ident.Resolve(ref, tenant)
	if err != nil {
		return ident.Workflow{}, "", fmt.Errorf("workflow: %w", err)
	}
	if wf.Tenant != tenant {
		return ident.Workflow{}, "", errors.New("workflow: the workflow belongs to another tenant")
	}
	if wf.Agent != agent {
		return ident.Workflow{}, "", fmt.Errorf("workflow: the tool belongs to agent %s, the workflow to %s", agent, wf.Agent)
	}
	pid, err := str(mcpParticipantArg)
	if err != nil {
		return ident.Workflow{}, "", err
	}
	participant, err := ident.SenderParticipant(pid)
	if err != nil {
		return ident.Workflow{}, "", fmt.Errorf("participantId: %w", err)
	}
	if participant == "" {
		participant = converseParticipant
	}
	return wf, participant, nil
}

// mcpResult is a Data method's answer as a tool result: its data as structured content (and as
// JSON text, for clients that read only text), and its text, if any.
func mcpResult(ans *history.SyncAnswer) *mcp.CallToolResult {
	res := &mcp.CallToolResult{Content: []mcp.Content{}}
	if ans.Response == nil {
		return res
	}
	if len(ans.Response.Data) > 0 && string(ans.Response.Data) != "null" {
		res.StructuredContent = json.RawMessage(ans.Response.Data)
		res.Content = append(res.Content, &mcp.TextContent{Text: string(ans.Response.Data)})
	}
	if t := ans.Response.Text; t != nil && *t != "" {
		res.Content = append(res.Content, &mcp.TextContent{Text: *t})
	}
	return res
}

// JSON-RPC error codes of the MCP endpoint beyond the standard ones: the implementation-defined
// server error range (-32000 to -32099).
const (
	mcpCodeNotFound    = -32004 // the agent, workflow type or method is unknown
	mcpCodeUnavailable = -32003 // no live host, too many calls waiting, or the bus could not take the call; retry
	mcpCodeTimeout     = -32001 // accepted, but no answer in time; it is still processed
	mcpCodeRateLimited = -32005 // the key's rate limit: not run; retry after data.retryAfter seconds
)

// mcpRetryData is the data of an error whose call may be tried again after a while.
type mcpRetryData struct {
	RetryAfter int `json:"retryAfter"`
}

// mcpError is the JSON-RPC error of a problem a tool call ran into before or while it was on the
// bus (checkTarget, callProblem): the same wording as the HTTP endpoints' problems.
func mcpError(p problem.Problem) error {
	code := int64(mcpCodeUnavailable)
	switch p.Status {
	case http.StatusNotFound:
		code = mcpCodeNotFound
	case http.StatusGatewayTimeout:
		code = mcpCodeTimeout
	case http.StatusUnprocessableEntity, http.StatusBadRequest:
		code = jsonrpc.CodeInvalidParams
	case http.StatusTooManyRequests:
		code = mcpCodeRateLimited
	}
	e := &jsonrpc.Error{Code: code, Message: p.Detail}
	if p.Slug == "rate-limited" {
		e.Message = "rate limited: " + p.Detail
	}
	if p.RetryAfter > 0 {
		e.Data, _ = json.Marshal(mcpRetryData{RetryAfter: p.RetryAfter}) // cannot fail: an int
	}
	return e
}

// invalidParams is the JSON-RPC error of bad tool arguments.
func invalidParams(msg string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: msg}
}
