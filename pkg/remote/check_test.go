package remote_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/remote"
	"github.com/agentbus/agentbus/pkg/remote/remotetest"
)

// cases runs Check and returns its results by case, checking that no case is reported twice.
func cases(t *testing.T, reg remote.Registration) map[string]remote.CheckResult {
	t.Helper()
	out := map[string]remote.CheckResult{}
	for _, r := range remote.Check(t.Context(), reg) {
		require.NotContains(t, out, r.Case, "case %q reported twice", r.Case)
		out[r.Case] = r
	}
	return out
}

// failed is the cases that failed, with their details.
func failed(results map[string]remote.CheckResult) map[string]string {
	out := map[string]string{}
	for name, r := range results {
		if !r.OK {
			out[name] = r.Detail
		}
	}
	return out
}

// TestCheckConformingEndpoint: an endpoint that keeps every rule passes every case, none
// skipped, in the order Check documents.
func TestCheckConformingEndpoint(t *testing.T) {
	ep := remotetest.New(t, remotetest.Faults{})
	results := remote.Check(t.Context(), ep.Registration("Conformer"))
	var names []string
	for _, r := range results {
		names = append(names, r.Case)
		assert.True(t, r.OK, "%s: %s", r.Case, r.Detail)
		assert.False(t, r.Skipped, "%s: %s", r.Case, r.Detail)
	}
	assert.Equal(t, []string{
		remote.CaseUnsigned, remote.CaseWronglySigned, remote.CaseProtocol, remote.CaseChat, remote.CaseChatStreamed, remote.CaseFile,
		"Data count answered", "Data sum answered", "webhook echo answered", remote.CaseWebhookAnswers, remote.CaseJournal,
		remote.CaseState, remote.CaseOrder, remote.CaseStateConflict, remote.CaseRetry, remote.CaseKeepAlive,
	}, names)
	byCase := map[string]string{}
	for _, r := range results {
		byCase[r.Case] = r.Detail
	}
	assert.Equal(t, "answer; sent {} (no schema, no examples)", byCase["Data count answered"])
	assert.Equal(t, `answer; sent {"values":[2,3]} (its example)`, byCase["Data sum answered"])
	assert.Equal(t, "Data count: 3 requests answered; the state changed 3 times", byCase[remote.CaseOrder])
	assert.Equal(t, "Data count: answered from the fresher state", byCase[remote.CaseStateConflict])
	assert.Equal(t, "Data count: attempt 2 answered", byCase[remote.CaseRetry])
	assert.Equal(t, "1 responses", byCase[remote.CaseWebhookAnswers])
	assert.Equal(t, "Chat: answered when sent with a journal of one entry (no request made steps or waits)", byCase[remote.CaseJournal])
}

// TestCheckFollowsSteps: a method that makes steps and waits is followed as a host follows it,
// its journal growing with each, and sent again with its whole journal it must answer from it.
func TestCheckFollowsSteps(t *testing.T) {
	stepper := func(ep *remotetest.Endpoint) remote.Registration {
		reg := ep.Registration("Stepper")
		reg.Methods = append(reg.Methods, remotetest.Steps)
		return reg
	}
	results := cases(t, stepper(remotetest.New(t, remotetest.Faults{})))
	assert.Empty(t, failed(results))
	assert.Equal(t, `answer; sent {"n":2} (its example); 2 steps and 1 wait followed (each wait ended by its deadline)`, results["Data steps answered"].Detail)
	assert.Equal(t, "Data steps sent again with its journal of 3 entries: answered from it, without a new step or wait", results[remote.CaseJournal].Detail)

	for _, tc := range []struct {
		name   string
		faults remotetest.Faults
		want   map[string]string
	}{
		{"refuses a journal", remotetest.Faults{RefuseJournal: true},
			map[string]string{"Data steps answered": "answered 400, want 200", remote.CaseJournal: "answered 400, want 200"}},
		{"ignores its journal", remotetest.Faults{IgnoreJournal: true},
			map[string]string{"Data steps answered": "more than 1000 steps and waits, more than a host records"}},
		{"a step without a name", remotetest.Faults{StepWithoutName: true},
			map[string]string{"Data steps answered": `step 1: its name "" is not 1 to 256 bytes of text`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := failed(cases(t, stepper(remotetest.New(t, tc.faults))))
			require.Len(t, got, len(tc.want), "failed cases: %v", got)
			for name, detail := range tc.want {
				assert.Contains(t, got[name], detail, "case %q", name)
			}
		})
	}
}

// TestCheckFollowsCallsAndReads: a method that asks for an Agent2Agent call and a read of its
// thread is followed as a host follows it: the call failed, the thread without messages.
func TestCheckFollowsCallsAndReads(t *testing.T) {
	ep := remotetest.New(t, remotetest.Faults{})
	reg := ep.Registration("Caller")
	reg.Methods = append(reg.Methods, remotetest.CallRead)
	results := cases(t, reg)
	assert.Empty(t, failed(results))
	assert.Equal(t, `answer; sent {} (its example); 1 call and 1 history read followed (each call failed with 503, `+
		`"agentbus agent check makes no Agent2Agent calls"; each history read found no messages)`, results["Data callread answered"].Detail)
}

// TestCheckReportsFaults: an endpoint that breaks one rule fails that rule's case, and only it.
func TestCheckReportsFaults(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults remotetest.Faults
		want   map[string]string // failed case: a part of its detail
	}{
		{"answers a requestId from a cache", remotetest.Faults{CacheByRequestID: true},
			map[string]string{remote.CaseStateConflict: "got the state answered to the stale one"}},
		{"refuses retries", remotetest.Faults{RefuseRetries: true},
			map[string]string{remote.CaseRetry: "attempt 2 was refused: 409 this request was answered already"}},
		{"webhook without a content type", remotetest.Faults{WebhookWithoutContentType: true},
			map[string]string{remote.CaseWebhookAnswers: "webhook echo: the response has a body but no contentType"}},
		{"webhook status 101", remotetest.Faults{WebhookStatus: http.StatusSwitchingProtocols},
			map[string]string{remote.CaseWebhookAnswers: "webhook echo: response.status 101 is not from 200 to 599"}},
		{"no signature check", remotetest.Faults{NoSignatureCheck: true},
			map[string]string{remote.CaseUnsigned: "answered 200, want 401", remote.CaseWronglySigned: "answered 200, want 401"}},
		{"any protocol", remotetest.Faults{AnyProtocol: true},
			map[string]string{remote.CaseProtocol: "answered 200, want 400"}},
		{"refuses a journal", remotetest.Faults{RefuseJournal: true},
			map[string]string{remote.CaseJournal: "Chat sent with a journal of one entry: answered 400, want 200"}},
		{"closes connections", remotetest.Faults{CloseConnections: true},
			map[string]string{remote.CaseKeepAlive: "opened a new connection"}},
		{"complete that is not a boolean", remotetest.Faults{CompleteNotBoolean: true},
			map[string]string{"webhook echo answered": "not a protocol answer: json: cannot unmarshal string into Go struct field Answer.complete of type bool",
				remote.CaseWebhookAnswers: "webhook echo: no protocol answer to check"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := remotetest.New(t, tc.faults)
			got := failed(cases(t, ep.Registration("Faulty")))
			require.Len(t, got, len(tc.want), "failed cases: %v", got)
			for name, detail := range tc.want {
				assert.Contains(t, got[name], detail, "case %q", name)
			}
		})
	}
}

// TestCheckSkipsWhatDoesNotApply: a registration of Data methods only skips the Chat, File and
// webhook cases, with OK true; the state cases use its counter.
func TestCheckSkipsWhatDoesNotApply(t *testing.T) {
	ep := remotetest.New(t, remotetest.Faults{})
	reg := ep.Registration("DataOnly")
	reg.Chat, reg.File, reg.Webhooks = false, false, nil
	results := cases(t, reg)
	for _, name := range []string{remote.CaseChat, remote.CaseChatStreamed, remote.CaseFile, remote.CaseWebhookAnswers} {
		r, ok := results[name]
		if assert.True(t, ok, "case %q is reported", name) {
			assert.True(t, r.OK && r.Skipped, "case %q: %+v", name, r)
			assert.True(t, strings.HasPrefix(r.Detail, "skipped: "), "case %q: %+v", name, r)
		}
	}
	assert.NotContains(t, results, "webhook echo answered")
	assert.Empty(t, failed(results))
	assert.Equal(t, "Data count: 3 requests answered; the state changed 3 times", results[remote.CaseOrder].Detail)
}

// TestCheckStatelessAgent: an agent whose answers carry no state passes the state cases, which
// say so.
func TestCheckStatelessAgent(t *testing.T) {
	ep := remotetest.New(t, remotetest.Faults{CacheByRequestID: true})
	reg := ep.Registration("Stateless")
	reg.Methods = reg.Methods[1:] // sum only: no answer carries a state
	results := cases(t, reg)
	assert.Empty(t, failed(results))
	assert.Equal(t, "Chat: 3 requests answered; the answers carry no state", results[remote.CaseOrder].Detail)
	assert.Equal(t, "Chat: answered; the agent's state does not visibly depend on the state sent", results[remote.CaseStateConflict].Detail)
}

// adder is the endpoint's registration with its Data method add only, whose schema is schema
// (none when nil).
func adder(ep *remotetest.Endpoint, schema string) remote.Registration {
	reg := ep.Registration("Adder")
	reg.Chat, reg.File, reg.Webhooks = false, false, nil
	add := remotetest.Add
	add.Schema = nil
	if schema != "" {
		add.Schema = json.RawMessage(schema)
	}
	reg.Methods = []remote.Method{add}
	return reg
}

// TestCheckSendsExamples: a method whose parameters need a property is called with its schema's
// first example, and the state cases run on it: its total changes with each request, and the
// request sent again with a fresher state is answered from that state. Called with {}, the
// same agent fails the cases.
func TestCheckSendsExamples(t *testing.T) {
	ep := remotetest.New(t, remotetest.Faults{})
	results := cases(t, adder(ep, string(remotetest.Add.Schema)))
	assert.Empty(t, failed(results))
	assert.Equal(t, `answer; sent {"n":2} (its example)`, results["Data add answered"].Detail)
	assert.Equal(t, "Data add: 3 requests answered; the state changed 3 times", results[remote.CaseOrder].Detail)
	assert.Equal(t, "Data add: answered from the fresher state", results[remote.CaseStateConflict].Detail)
	assert.Equal(t, "Data add: attempt 2 answered", results[remote.CaseRetry].Detail)

	results = cases(t, adder(ep, `{"type":"object","properties":{"n":{"type":"number"}},"required":["n"],"examples":[{"n":5},{"n":1}]}`))
	assert.Empty(t, failed(results))
	assert.Equal(t, `answer; sent {"n":5} (the first of its 2 examples)`, results["Data add answered"].Detail)

	// The cache fault answers the request sent again from the stale state: with real
	// parameters, the conflict case sees it.
	cached := remotetest.New(t, remotetest.Faults{CacheByRequestID: true})
	got := failed(cases(t, adder(cached, string(remotetest.Add.Schema))))
	assert.Len(t, got, 1, "%v", got)
	assert.Contains(t, got[remote.CaseStateConflict], "got the state answered to the stale one")

	// Without a schema or examples, add is sent {}, which it refuses.
	got = failed(cases(t, adder(ep, "")))
	assert.Equal(t, "answered 422, want 200; sent {} (no schema, no examples)", got["Data add answered"])
	assert.Contains(t, got[remote.CaseOrder], "request 1 of 3: answered 422, want 200")
	assert.Contains(t, got, remote.CaseRetry)
}

// TestCheckMakesParams: a method without examples is sent the smallest object its schema takes,
// made from its required properties, and the case says so; when none can be made, {}, and the
// case says whether {} matches the schema.
func TestCheckMakesParams(t *testing.T) {
	ep := remotetest.New(t, remotetest.Faults{})
	for _, tc := range []struct {
		name, schema, detail string
	}{
		{"a required number", `{"type":"object","properties":{"n":{"type":"number"}},"required":["n"]}`,
			`answer; sent {"n":0} (no examples; made from the schema's required properties)`},
		{"a minimum, a default and objects", `{"properties":{"n":{"type":"integer","minimum":3},"by":{"type":"string"},` +
			`"opts":{"type":"object","properties":{"mode":{"enum":["fast","slow"]},"on":{"type":"boolean","default":true}},"required":["mode","on"]}},"required":["n","opts"]}`,
			`answer; sent {"n":3,"opts":{"mode":"fast","on":true}} (no examples; made from the schema's required properties)`},
		{"nothing required", `{"type":"object","properties":{"n":{"type":"number"}}}`,
			"answered 422, want 200; sent {} (no examples; the schema requires no property)"},
		{"a required property the made value does not satisfy", `{"type":"object","properties":{"n":{"type":"number","exclusiveMinimum":0}},"required":["n"]}`,
			"answered 422, want 200; sent {} (no examples, and the schema's required properties could not be given values; " +
				"{} does not match the schema, so no host would send it: give the method examples)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cases(t, adder(ep, tc.schema))["Data add answered"]
			assert.Equal(t, tc.detail, r.Detail)
		})
	}
}

// TestCheckRefusedExamples: a method that a registration would refuse, its examples not
// matching its schema, fails its case without a call.
func TestCheckRefusedExamples(t *testing.T) {
	ep := remotetest.New(t, remotetest.Faults{})
	for _, tc := range []struct {
		name, schema, detail string
	}{
		{"of another type", `{"type":"object","properties":{"n":{"type":"number"}},"required":["n"],"examples":[{"n":1},{"n":"two"}]}`,
			`a registration with this method is refused: method "add": examples[1] does not match the schema: at /n: got string, want number`},
		{"not an object", `{"type":"object","examples":[[1]]}`,
			`a registration with this method is refused: method "add": examples[0] is not a JSON object, which a method's parameters are`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cases(t, adder(ep, tc.schema))["Data add answered"]
			assert.False(t, r.OK)
			assert.Equal(t, tc.detail, r.Detail)
		})
	}
}
