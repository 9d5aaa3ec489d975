package ingress

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/subject"
)

// The edge: every path parameter, query parameter and header a route takes is checked against
// its rule before the handler reads it, so that no caller value reaches a subject, a key, an
// object name or a header unbounded (docs/identifiers.md#limits). What a route takes is what
// the OpenAPI document says it takes; the rules below say how each is bounded, with the Check
// functions of package subject. The handlers then check what the values mean (a known agent, a
// cursor of this listing) as before.

// paramRule bounds one parameter: check refuses a value, and the answer is a problem of type
// refused (400) whose detail names the parameter and the rule.
type paramRule struct {
	check   func(field, v string) error
	refused problem.Type
}

// paramKey names a parameter by where it is given and its name.
type paramKey struct{ in, name string }

// paramRules are the rules of every parameter the OpenAPI document names, by where it is given
// and its name; TestEveryParameterHasARule keeps them complete. A path parameter "id" is a dead
// letter's or an undelivered event's (idRefused picks the problem).
var paramRules = map[paramKey]paramRule{
	{"path", "tenantId"}:       {subject.CheckTenant, problem.InvalidTenant},
	{"path", "workflow"}:       {checkWorkflowRef, problem.InvalidWorkflow},
	{"path", "workflowId"}:     {checkWorkflowRef, problem.InvalidWorkflow},
	{"path", "method"}:         {subject.CheckName, problem.InvalidPath},
	{"path", "agentName"}:      {subject.CheckName, problem.InvalidPath},
	{"path", "name"}:           {subject.CheckName, problem.InvalidPath},
	{"path", "keyId"}:          {subject.CheckID, problem.InvalidPath},
	{"path", "subscriptionId"}: {subject.CheckID, problem.InvalidPath},
	{"path", "requestId"}:      {subject.CheckRequestID, problem.InvalidPath},
	{"path", "id"}:             {subject.CheckNumber, problem.InvalidPath},
	{"path", "file"}:           {subject.CheckName, problem.InvalidPath},

	{"query", "tenantId"}:       {checkOptionalTenant, problem.InvalidTenant},
	{"query", "workflow"}:       {checkWorkflowRef, problem.InvalidWorkflow},
	{"query", "workflowId"}:     {checkWorkflowRef, problem.InvalidWorkflow},
	{"query", "agentName"}:      {checkOptionalName, problem.InvalidWorkflow},
	{"query", "workflowType"}:   {checkOptionalName, problem.InvalidWorkflow},
	{"query", "activationName"}: {checkOptionalName, problem.InvalidWorkflow},
	{"query", "participantId"}:  {checkParticipant, problem.InvalidParticipant},
	{"query", "agent"}:          {checkOptionalName, problem.InvalidQuery},
	{"query", "topic"}:          {checkTopic, problem.InvalidQuery},
	{"query", "prefix"}:         {checkTopic, problem.InvalidQuery},
	{"query", "text"}:           {checkMessageText, problem.InvalidText},
	{"query", "hint"}:           {checkHint, problem.InvalidQuery},
	{"query", "type"}:           {subject.CheckParam, problem.InvalidQuery},
	{"query", "timeoutSeconds"}: {subject.CheckParam, problem.InvalidQuery},
	{"query", "wait"}:           {subject.CheckParam, problem.InvalidQuery},
	{"query", "pageSize"}:       {subject.CheckParam, problem.InvalidQuery},
	{"query", "page"}:           {subject.CheckParam, problem.InvalidQuery},
	{"query", "before"}:         {subject.CheckParam, problem.InvalidQuery},
	{"query", "after"}:          {subject.CheckParam, problem.InvalidQuery},
	{"query", "limit"}:          {subject.CheckParam, problem.InvalidQuery},
	{"query", "cursor"}:         {subject.CheckParam, problem.InvalidQuery},
	{"query", "lastEventId"}:    {subject.CheckParam, problem.InvalidQuery},
	{"query", "window"}:         {subject.CheckParam, problem.InvalidQuery},
	{"query", "status"}:         {subject.CheckParam, problem.InvalidQuery},
	{"query", "activeBefore"}:   {subject.CheckParam, problem.InvalidQuery},
	{"query", "activeAfter"}:    {subject.CheckParam, problem.InvalidQuery},

	{"header", "X-Tenant-Id"}:          {subject.CheckTenant, problem.InvalidTenant},
	{"header", "Idempotency-Key"}:      {subject.CheckRequestID, problem.InvalidIdempotencyKey},
	{"header", "Last-Event-ID"}:        {subject.CheckParam, problem.InvalidHeader},
	{"header", "MCP-Protocol-Version"}: {subject.CheckParam, problem.InvalidHeader},
}

// idRefused is the problem of a path parameter "id" its rule refuses, by route.
func idRefused(template string) problem.Type {
	if strings.Contains(template, "/undelivered/") {
		return problem.InvalidEventID
	}
	return problem.InvalidDeadLetterID
}

// checkOptionalTenant checks a tenant id that may be given empty: a tenant key's call then names
// another tenant than its own (403), a system key's none (400), which the handler tells.
func checkOptionalTenant(field, id string) error {
	if id == "" {
		return nil
	}
	return subject.CheckTenant(field, id)
}

// checkWorkflowRef bounds a workflow reference ({agent}, {agent}:{workflowType} or a workflow
// id); ident.Resolve reads it afterwards.
func checkWorkflowRef(field, ref string) error {
	if ref == "" {
		return &subject.ValueError{Field: field, Reason: "is empty"}
	}
	return subject.CheckText(field, ref, subject.MaxWorkflowIDBytes)
}

// checkOptionalName bounds a name that may be left out (empty).
func checkOptionalName(field, name string) error {
	return subject.CheckText(field, name, subject.MaxNameBytes)
}

// checkParticipant bounds a participant id as ident.Participant does; blank means the route's
// default.
func checkParticipant(field, id string) error {
	if _, err := ident.Participant(id); err != nil {
		return &subject.ValueError{Field: field, Reason: strings.TrimPrefix(err.Error(), "participantId ")}
	}
	return nil
}

// checkTopic bounds a topic (a message's scope) and an activation name prefix.
func checkTopic(field, topic string) error { return subject.CheckText(field, topic, maxTopicLen) }

// checkMessageText bounds a message's text, which may hold newlines and tabs: it is stored in a
// message's body, never in a subject or header.
func checkMessageText(field, text string) error { return checkBodyText(field, text, maxTextLen) }

// checkHint bounds a model hint, free text like a message's.
func checkHint(field, hint string) error { return checkBodyText(field, hint, maxHintLen) }

// checkBodyText bounds free text that travels only in a message's body: at most max bytes of
// valid UTF-8.
func checkBodyText(field, s string, max int) error {
	if len(s) > max {
		return &subject.ValueError{Field: field, Reason: fmt.Sprintf("is longer than %d bytes", max)}
	}
	if !utf8.ValidString(s) {
		return &subject.ValueError{Field: field, Reason: "is not valid UTF-8"}
	}
	return nil
}

// routeParams are the parameters one route takes, by where, as the OpenAPI document lists them.
type routeParams struct {
	path, query, header []string
}

// routeKey names a route by its method and path template.
type routeKey struct{ method, template string }

// declaredParams reads, once, the parameters of every operation of the OpenAPI document, by
// method and path template.
var declaredParams = sync.OnceValue(func() map[routeKey]routeParams {
	var doc struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Parameters map[string]openAPIParam `json:"parameters"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		panic(fmt.Sprintf("the embedded OpenAPI document: %v", err))
	}
	out := make(map[routeKey]routeParams)
	for path, item := range doc.Paths {
		for method, raw := range item {
			var op struct {
				Parameters []openAPIParam `json:"parameters"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				continue // not an operation ("parameters", "summary" of the path item)
			}
			var rp routeParams
			for _, p := range op.Parameters {
				if ref, ok := strings.CutPrefix(p.Ref, "#/components/parameters/"); ok {
					p = doc.Components.Parameters[ref]
				}
				switch p.In {
				case "path":
					rp.path = append(rp.path, p.Name)
				case "query":
					rp.query = append(rp.query, p.Name)
				case "header":
					rp.header = append(rp.header, p.Name)
				}
			}
			out[routeKey{strings.ToUpper(method), path}] = rp
		}
	}
	return out
})

// openAPIParam is an OpenAPI parameter object, or a reference to one.
type openAPIParam struct {
	Ref  string `json:"$ref"`
	Name string `json:"name"`
	In   string `json:"in"`
}

// paramsOf returns the parameters of the route of method and template.
func paramsOf(method, template string) routeParams {
	return declaredParams()[routeKey{method, template}]
}

// checkParam checks one value of a parameter against its rule; nil when it passes or the
// parameter has no rule.
func checkParam(in, name, template, v string) *problem.Problem {
	rule, ok := paramRules[paramKey{in, name}]
	if !ok {
		return nil
	}
	// Checked without a field, whose name is only built for a refusal (checks run on every call).
	err := rule.check("", v)
	if err == nil {
		return nil
	}
	refused := rule.refused
	if in == "path" && name == "id" {
		refused = idRefused(template)
	}
	return refused.New(paramField(in, name) + " " + err.Error())
}

// paramField names a parameter in a problem's detail: `the query parameter "agentName"`.
func paramField(in, name string) string {
	if in == "header" {
		return "the header " + name
	}
	return "the " + in + " parameter " + `"` + name + `"`
}

// checkHeaders checks the headers the route takes that the request carries.
func checkHeaders(r *http.Request, template string, names []string) *problem.Problem {
	for _, name := range names {
		if v := r.Header.Get(name); v != "" {
			if p := checkParam("header", name, template, v); p != nil {
				return p
			}
		}
	}
	return nil
}
