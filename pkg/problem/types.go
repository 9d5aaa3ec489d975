package problem

import (
	"net/http"
	"slices"
	"strings"
)

// Type is one kind of problem: its slug, its HTTP status and, for problems a client should
// retry, how many seconds to wait. Every problem agentbus answers is one of the types of this
// file; docs/errors.md describes each, and the OpenAPI document lists their slugs.
type Type struct {
	// Slug names the type, for example "unauthorized"; the problem's type URI is TypePrefix+Slug.
	Slug   string
	Status int
	// RetryAfter, when positive, is the Retry-After (seconds) of every problem of this type.
	RetryAfter int
}

// New returns a problem of type t with detail, a human-readable explanation safe to show the
// client.
func (t Type) New(detail string) *Problem {
	return &Problem{Status: t.Status, Slug: t.Slug, Detail: detail, RetryAfter: t.RetryAfter}
}

// Title is the title of problems of type t: the text of its status.
func (t Type) Title() string { return http.StatusText(t.Status) }

// URI is the type URI of problems of type t.
func (t Type) URI() string { return TypePrefix + t.Slug }

// types are the defined types, in the order of their definition.
var types []Type

// define adds a type to Types.
func define(slug string, status int, retryAfter int) Type {
	t := Type{Slug: slug, Status: status, RetryAfter: retryAfter}
	types = append(types, t)
	return t
}

// Types returns every problem type agentbus answers, sorted by slug.
func Types() []Type {
	out := slices.Clone(types)
	slices.SortFunc(out, func(a, b Type) int { return strings.Compare(a.Slug, b.Slug) })
	return out
}

// Lookup returns the type of slug.
func Lookup(slug string) (Type, bool) {
	i := slices.IndexFunc(types, func(t Type) bool { return t.Slug == slug })
	if i < 0 {
		return Type{}, false
	}
	return types[i], true
}

// Problems of the request itself: its path, query, headers, credentials and body.
var (
	InvalidPath           = define("invalid-path", http.StatusBadRequest, 0)
	InvalidQuery          = define("invalid-query", http.StatusBadRequest, 0)
	InvalidHeader         = define("invalid-header", http.StatusBadRequest, 0)
	InvalidIdempotencyKey = define("invalid-idempotency-key", http.StatusBadRequest, 0)
	InvalidText           = define("invalid-text", http.StatusBadRequest, 0)
	InvalidJSON           = define("invalid-json", http.StatusBadRequest, 0)
	MissingField          = define("missing-field", http.StatusBadRequest, 0)
	InvalidField          = define("invalid-field", http.StatusBadRequest, 0)
	MissingParameter      = define("missing-parameter", http.StatusBadRequest, 0)
	InvalidParameter      = define("invalid-parameter", http.StatusBadRequest, 0)
	InvalidWorkflow       = define("invalid-workflow", http.StatusBadRequest, 0)
	InvalidParticipant    = define("invalid-participant", http.StatusBadRequest, 0)
	InvalidCursor         = define("invalid-cursor", http.StatusBadRequest, 0)
	UnreadableBody        = define("unreadable-body", http.StatusBadRequest, 0)
	BodyTooLarge          = define("body-too-large", http.StatusRequestEntityTooLarge, 0)
	FileTooLarge          = define("file-too-large", http.StatusRequestEntityTooLarge, 0)
	HeadersTooLarge       = define("headers-too-large", http.StatusRequestHeaderFieldsTooLarge, 0)
	NotFound              = define("not-found", http.StatusNotFound, 0)
	MethodNotAllowed      = define("method-not-allowed", http.StatusMethodNotAllowed, 0)
)

// Problems of a Data call's parameters, answered by the ingress or the workflow host before the
// method's handler runs.
var (
	// InvalidMethodParameters: the parameters do not match the JSON Schema the method advertises
	// (registry.Method.InputSchema).
	InvalidMethodParameters = define("invalid-method-parameters", http.StatusBadRequest, 0)
)

// Problems of who is calling and for which tenant.
var (
	Unauthorized   = define("unauthorized", http.StatusUnauthorized, 0)
	Forbidden      = define("forbidden", http.StatusForbidden, 0)
	TenantMismatch = define("tenant-mismatch", http.StatusBadRequest, 0)
	MissingTenant  = define("missing-tenant", http.StatusBadRequest, 0)
	InvalidTenant  = define("invalid-tenant", http.StatusBadRequest, 0)
	UnknownTenant  = define("unknown-tenant", http.StatusNotFound, 0)
	RateLimited    = define("rate-limited", http.StatusTooManyRequests, 1)
)

// Problems of the call's target and its delivery.
var (
	UnknownAgent         = define("unknown-agent", http.StatusNotFound, 0)
	UnknownWorkflowType  = define("unknown-workflow-type", http.StatusNotFound, 0)
	UnknownMethod        = define("unknown-method", http.StatusNotFound, 0)
	NoHost               = define("no-host", http.StatusServiceUnavailable, 5)
	TooManyWaiting       = define("too-many-waiting", http.StatusServiceUnavailable, 1)
	TooManyBodyBytes     = define("too-many-body-bytes", http.StatusServiceUnavailable, 1)
	TooManyListeners     = define("too-many-listeners", http.StatusTooManyRequests, 5)
	TooManyQueued        = define("too-many-queued", http.StatusTooManyRequests, 1)
	NotWaiting           = define("not-waiting", http.StatusConflict, 0)
	ListenerOverflow     = define("listener-overflow", http.StatusServiceUnavailable, 0)
	BusUnavailable       = define("bus-unavailable", http.StatusServiceUnavailable, 1)
	HandlerTimeout       = define("handler-timeout", http.StatusGatewayTimeout, 0)
	RequestIDReused      = define("request-id-reused", http.StatusUnprocessableEntity, 0)
	ReplyUnavailable     = define("reply-unavailable", http.StatusBadGateway, 0)
	BadReply             = define("bad-reply", http.StatusBadGateway, 0)
	ClientGone           = define("client-gone", http.StatusServiceUnavailable, 0)
	InvalidHandlerStatus = define("invalid-handler-status", http.StatusBadGateway, 0)
	Internal             = define("internal", http.StatusInternalServerError, 0)
)

// Problems of storage (docs/limits.md#storage-quotas): a request that would store more than its
// tenant may keep, or anything large while the deployment's store is nearly full. 507
// Insufficient Storage: retrying does not help until stored data ages out, is removed, or the
// quota or the store grows.
var (
	StorageQuotaExceeded  = define("storage-quota-exceeded", http.StatusInsufficientStorage, 0)
	InstanceQuotaExceeded = define("instance-quota-exceeded", http.StatusInsufficientStorage, 0)
	StoreNearlyFull       = define("store-nearly-full", http.StatusInsufficientStorage, 0)
)

// Problems of the admin API: tenants, keys and dead letters.
var (
	TenantExists        = define("tenant-exists", http.StatusConflict, 0)
	UnknownKey          = define("unknown-key", http.StatusNotFound, 0)
	KeyRevoked          = define("key-revoked", http.StatusConflict, 0)
	KeyLimit            = define("key-limit", http.StatusConflict, 0)
	InvalidDeadLetterID = define("invalid-dead-letter-id", http.StatusBadRequest, 0)
	DeadLetterNotFound  = define("dead-letter-not-found", http.StatusNotFound, 0)
	DeadLetterExpired   = define("dead-letter-expired", http.StatusGone, 0)
	ScheduleNotFound    = define("schedule-not-found", http.StatusNotFound, 0)
	InstanceNotFound    = define("instance-not-found", http.StatusNotFound, 0)
	InstanceNotRunning  = define("instance-not-running", http.StatusConflict, 0)
)

// Problems of an instance's queue (docs/hosts-inspection.md).
var (
	RequestNotQueued    = define("request-not-queued", http.StatusNotFound, 0)
	RequestNotInBackoff = define("request-not-in-backoff", http.StatusConflict, 0)
)

// Problems of event subscriptions (docs/subscriptions.md).
var (
	SubscriptionNotFound = define("subscription-not-found", http.StatusNotFound, 0)
	SubscriptionLimit    = define("subscription-limit", http.StatusConflict, 0)
	URLNotAllowed        = define("url-not-allowed", http.StatusUnprocessableEntity, 0)
	InvalidEventID       = define("invalid-event-id", http.StatusBadRequest, 0)
	EventNotFound        = define("event-not-found", http.StatusNotFound, 0)
	ReceiverFailed       = define("receiver-failed", http.StatusBadGateway, 0)
)

// Problems of remote agents (docs/remote-agents.md).
var (
	AgentExists      = define("agent-exists", http.StatusConflict, 0)
	RemoteAgentLimit = define("remote-agent-limit", http.StatusConflict, 0)
)

// Problems of the MCP transport, before a JSON-RPC message is read.
var (
	InvalidMCPRequest    = define("invalid-mcp-request", http.StatusBadRequest, 0)
	UnsupportedMediaType = define("unsupported-media-type", http.StatusUnsupportedMediaType, 0)
)

// Problems a workflow host answers in place of a handler's reply. HandlerError's status is
// the handler's own when it chose one (400–599).
var (
	HandlerError      = define("handler-error", http.StatusInternalServerError, 0)
	DeadLettered      = define("dead-lettered", http.StatusInternalServerError, 0)
	ReplyTooLarge     = define("reply-too-large", http.StatusBadGateway, 0)
	CallCycle         = define("call-cycle", http.StatusConflict, 0)
	CallDepth         = define("call-depth", http.StatusConflict, 0)
	CallTimeout       = define("call-timeout", http.StatusGatewayTimeout, 0)
	OtherTenant       = define("other-tenant", http.StatusForbidden, 0)
	InvalidPeer       = define("invalid-peer", http.StatusBadRequest, 0)
	InvalidWorkflowID = define("invalid-workflow-id", http.StatusBadRequest, 0)
)

// Write sends a problem of type t with detail.
func (t Type) Write(w http.ResponseWriter, detail string) { Write(w, *t.New(detail)) }
