package ingress_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/problem"
)

// traffic checks the answers of every test of the package; TestMain installs it.
var traffic *trafficValidator

// trafficValidator is the http.DefaultTransport of this package's tests (TestMain installs it),
// so that http.DefaultClient, clients without a Transport and transports that hand requests to
// http.DefaultTransport all pass through it. It checks every answer against the OpenAPI
// document: status, headers, content type and body for the request's operation, and the
// document's NotFound or MethodNotAllowed answer for a request no operation takes. Requests are
// not checked, since many tests send invalid ones on purpose; TestOpenAPIContract checks its own.
// It notes the (operation, status) pairs it saw, for the coverage check at the end of the run.
//
// Every request through it is taken to be an ingress's: a fake server of another kind (a
// language model) is called with that server's own client (httptest.Server.Client).
type trafficValidator struct {
	doc    *openapi3.T
	router routers.Router
	bodies *bodySchemas
	base   *http.Transport

	mu         sync.Mutex
	violations map[string]*violation // by method, route, status and the message's first line
	seen       map[string]bool       // "operationId status", the status "default" when the default took it
}

// violation is an answer that does not fit the document, with the first request that got it.
type violation struct {
	method, route string
	status        int
	msg, url      string
	count         int
}

func newTrafficValidator(base *http.Transport) (*trafficValidator, error) {
	doc, err := loadDocument()
	if err != nil {
		return nil, err
	}
	router, err := pathRouter(doc)
	if err != nil {
		return nil, err
	}
	bodies, err := newBodySchemas()
	if err != nil {
		return nil, err
	}
	return &trafficValidator{doc: doc, router: router, bodies: bodies, base: base, violations: map[string]*violation{}, seen: map[string]bool{}}, nil
}

// pathRouter routes requests by the document's paths alone. The document's servers name where
// an ingress listens by default; the tests' ingresses listen on ports of their own.
func pathRouter(doc *openapi3.T) (routers.Router, error) {
	anyHost := *doc
	anyHost.Servers = nil
	router, err := gorillamux.NewRouter(&anyHost)
	if err != nil {
		return nil, fmt.Errorf("routing the OpenAPI document: %w", err)
	}
	return router, nil
}

// loadDocument loads the embedded OpenAPI document and validates it.
func loadDocument() (*openapi3.T, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(ingress.OpenAPIDocument())
	if err != nil {
		return nil, fmt.Errorf("loading the OpenAPI document: %w", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		return nil, errors.New("the document is not OpenAPI 3.1")
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("validating the OpenAPI document: %w", err)
	}
	return doc, nil
}

// The playground's files are text, and a webhook handler's answer may be of any type; the
// validator reads them as they are. (A "*/*" decoder is kin-openapi's fallback for media types
// it has no decoder of.)
func init() {
	for _, ct := range []string{"text/html", "text/javascript", "text/css", "image/svg+xml", "application/openmetrics-text", "*/*"} {
		openapi3filter.RegisterBodyDecoder(ct, openapi3filter.PlainBodyDecoder)
	}
}

func (v *trafficValidator) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, _, err := v.roundTrip(req)
	return resp, err
}

// roundTrip sends req and checks the answer; a violation is recorded and also returned, for a
// test that wants to report it itself.
func (v *trafficValidator) roundTrip(req *http.Request) (resp *http.Response, violation, err error) {
	resp, err = v.base.RoundTrip(req)
	if err != nil {
		return nil, nil, err
	}
	route, violation := v.check(req, resp)
	if violation != nil {
		v.record(req, route, resp.StatusCode, violation)
	}
	return resp, violation, nil
}

// check checks an answer; route is the request's path template, or what took its place.
func (v *trafficValidator) check(req *http.Request, resp *http.Response) (route string, _ error) {
	if resp.StatusCode == http.StatusRequestHeaderFieldsTooLarge {
		// Refused for its size before any route is looked at.
		return "(any path)", v.checkComponentAnswer(req, resp, "HeadersTooLarge")
	}
	if p := req.URL.EscapedPath(); ingress.CleanPath(p) != p {
		return "(unclean path)", v.checkComponentAnswer(req, resp, "InvalidPath")
	}
	rt, params, routeErr := v.router.FindRoute(req)
	if routeErr != nil {
		return "(no operation)", v.checkUnrouted(req, resp, routeErr)
	}
	return rt.Path, v.checkAnswer(req, resp, rt, params)
}

// checkAnswer checks the answer to a request the document has an operation for.
func (v *trafficValidator) checkAnswer(req *http.Request, resp *http.Response, rt *routers.Route, params map[string]string) error {
	op := rt.Operation
	documented := op.Responses.Status(resp.StatusCode)
	if documented == nil {
		documented = op.Responses.Default()
	}
	key := "default"
	for k, r := range op.Responses.Map() {
		if r == documented && k != "default" {
			key = k // the status, or its range ("4XX")
		}
	}
	if documented == nil {
		return fmt.Errorf("status %d is not documented", resp.StatusCode)
	}
	v.see(op.OperationID + " " + key)

	ct := resp.Header.Get("Content-Type")
	mt, _, _ := mime.ParseMediaType(ct)
	if mt == "application/problem+json" && documented.Value.Content["application/problem+json"] == nil {
		// A webhook's default takes the handler's own answers of any type; agentbus's own
		// problems must each be listed with their status, so that their shape is checked.
		return fmt.Errorf("a problem answer under %q, which lists no application/problem+json", key)
	}
	opts := &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: rt, Options: opts}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Options: opts}
	if streaming(resp) {
		// A stream ends only when the client leaves: its status, headers and content type are
		// checked, not its body.
		if len(documented.Value.Content) > 0 && documented.Value.Content.Get(ct) == nil {
			return fmt.Errorf("content type %q is not documented for %s", ct, key)
		}
		opts.ExcludeResponseBody = true
		return openapi3filter.ValidateResponse(req.Context(), out)
	}
	b, err := bufferBody(resp)
	if err != nil {
		return nil // the caller reads the error; there is no whole answer to check
	}
	out.SetBodyBytes(b)
	if isJSON(ct) && !skipsBody[resp.StatusCode] {
		// Status and headers here, the body against a schema compiled once (bodySchemas).
		opts.ExcludeResponseBody = true
		if err := openapi3filter.ValidateResponse(req.Context(), out); err != nil {
			return err
		}
		pointer, err := responsePointer(rt.Path, rt.Method, key, documented)
		if err != nil {
			return err
		}
		if err := v.bodies.check(pointer, documented.Value, ct, b); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	} else if err := openapi3filter.ValidateResponse(req.Context(), out); err != nil {
		return err
	}
	if mt == "application/problem+json" {
		return checkProblemStatus(b, resp.StatusCode)
	}
	return nil
}

// checkProblemStatus checks that a problem answer has its type's status (pkg/problem), which
// is fixed for every type but handler-error, whose status is the handler's.
func checkProblemStatus(body []byte, status int) error {
	var p struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return fmt.Errorf("decoding a problem: %w", err)
	}
	pt, ok := problem.Lookup(strings.TrimPrefix(p.Type, problem.TypePrefix))
	switch {
	case !ok:
		return fmt.Errorf("problem type %q is not defined in pkg/problem", p.Type)
	case pt.Status != status && pt != problem.HandlerError:
		return fmt.Errorf("problem %s answered with %d; its type's status is %d", pt.Slug, status, pt.Status)
	}
	return nil
}

// checkUnrouted checks the answer to a request no operation takes: the document's NotFound, or
// MethodNotAllowed when the path has operations for other methods.
func (v *trafficValidator) checkUnrouted(req *http.Request, resp *http.Response, routeErr error) error {
	name, status := "NotFound", http.StatusNotFound
	if errors.Is(routeErr, routers.ErrMethodNotAllowed) {
		name, status = "MethodNotAllowed", http.StatusMethodNotAllowed
	}
	if resp.StatusCode != status {
		return fmt.Errorf("no operation (%v): want the document's %s (%d)", routeErr, name, status)
	}
	return v.checkComponentAnswer(req, resp, name)
}

// checkComponentAnswer checks an answer against one of the document's components.responses.
func (v *trafficValidator) checkComponentAnswer(req *http.Request, resp *http.Response, name string) error {
	want := v.doc.Components.Responses[name].Value
	for h, ref := range want.Headers {
		if ref.Value.Required && resp.Header.Get(h) == "" {
			return fmt.Errorf("%s without its %s header", name, h)
		}
	}
	ct := resp.Header.Get("Content-Type")
	mt := want.Content.Get(ct)
	if mt == nil {
		return fmt.Errorf("content type %q is not documented for %s", ct, name)
	}
	if req.Method == http.MethodHead {
		return nil
	}
	b, err := bufferBody(resp)
	if err != nil {
		return nil
	}
	if err := v.bodies.check("/components/responses/"+pointerToken(name), want, ct, b); err != nil {
		return fmt.Errorf("the answer does not fit %s: %w", name, err)
	}
	return nil
}

// skipsBody are the statuses whose answers kin-openapi does not check at all: redirects that
// carry no body of their own.
var skipsBody = map[int]bool{http.StatusNotModified: true, http.StatusPermanentRedirect: true, http.StatusTemporaryRedirect: true, http.StatusMovedPermanently: true}

// streaming reports whether an answer is a stream of events, which is not read here.
func streaming(resp *http.Response) bool {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return mt == "text/event-stream"
}

// bufferBody reads the whole answer and puts it back for the caller, with the read error if
// there was one.
func bufferBody(resp *http.Response) ([]byte, error) {
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b), errReader{err}))
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return b, nil
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func (v *trafficValidator) see(pair string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.seen[pair] = true
}

func (v *trafficValidator) record(req *http.Request, route string, status int, err error) {
	// A schema error quotes the body on the lines after its first; answers that differ only
	// there are one kind.
	first, _, _ := strings.Cut(err.Error(), "\n")
	key := fmt.Sprintf("%s %s %d %s", req.Method, route, status, first)
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.violations[key] == nil {
		v.violations[key] = &violation{method: req.Method, route: route, status: status, msg: err.Error(), url: redactedURL(req)}
	}
	v.violations[key].count++
}

// apikeyValue is the value of an apikey query parameter, which must not show in a report.
var apikeyValue = regexp.MustCompile(`(^|&)apikey=[^&]*`)

// redactedURL is the request's URL without the value of its apikey query parameter.
func redactedURL(req *http.Request) string {
	u := *req.URL
	u.RawQuery = apikeyValue.ReplaceAllString(u.RawQuery, "${1}apikey=REDACTED")
	return u.String()
}

// report writes the violations and, when the whole package ran, the coverage of the document's
// (operation, status) pairs; it reports whether both are clean.
func (v *trafficValidator) report(w io.Writer, wholePackage bool) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	ok := true
	if len(v.violations) > 0 {
		ok = false
		fmt.Fprintf(w, "openapi: %d kinds of answer do not fit pkg/ingress/openapi.json:\n", len(v.violations))
		for _, key := range slices.Sorted(maps.Keys(v.violations)) {
			x := v.violations[key]
			msg := strings.ReplaceAll(strings.TrimSpace(x.msg), "\n", "\n      ")
			fmt.Fprintf(w, "  %s %s -> %d (%d times): %s\n      first request: %s %s\n", x.method, x.route, x.status, x.count, msg, x.method, x.url)
		}
	}
	if !wholePackage {
		return ok
	}
	c := v.coverage()
	fmt.Fprintf(w, "openapi: the tests produced %d of the document's %d (operation, status) pairs; %d more are allow-listed as out of their reach\n",
		c.produced, c.documented, c.allowed)
	missing, stale := c.missing, c.stale
	if len(missing) > 0 {
		ok = false
		fmt.Fprintf(w, "openapi: no test produced these documented (operation, status) pairs; make a test produce each, or allow-list it with its reason in unreachablePairs:\n")
		for _, pair := range missing {
			fmt.Fprintf(w, "  %s (%s)\n", pair, v.operationPath(pair))
		}
	}
	if len(stale) > 0 {
		ok = false
		fmt.Fprintf(w, "openapi: these allow-listed pairs are produced by the tests or no longer documented; remove them from unreachablePairs:\n")
		for _, pair := range stale {
			fmt.Fprintf(w, "  %s\n", pair)
		}
	}
	return ok
}

// coverage is how the tests' answers cover the document's (operation, status) pairs.
type coverage struct {
	documented, produced, allowed int
	// missing: documented pairs no test produced and that are not allow-listed; stale:
	// allow-listed pairs that were produced or are not documented.
	missing, stale []string
}

func (v *trafficValidator) coverage() coverage {
	pairs := documentedPairs(v.doc)
	c := coverage{documented: len(pairs)}
	for _, pair := range pairs {
		_, allowed := unreachablePairs[pair]
		switch {
		case v.seen[pair]:
			c.produced++
		case allowed:
			c.allowed++
		default:
			c.missing = append(c.missing, pair)
		}
	}
	for pair := range unreachablePairs {
		if v.seen[pair] || !slices.Contains(pairs, pair) {
			c.stale = append(c.stale, pair)
		}
	}
	slices.Sort(c.stale)
	return c
}

// documentedPairs lists every "operationId status" of the document, "default" included, sorted.
func documentedPairs(doc *openapi3.T) []string {
	var pairs []string
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for status := range op.Responses.Map() {
				pairs = append(pairs, op.OperationID+" "+status)
			}
		}
	}
	slices.Sort(pairs)
	return pairs
}

// operationPath is the method and path of a pair's operation.
func (v *trafficValidator) operationPath(pair string) string {
	id, _, _ := strings.Cut(pair, " ")
	for p, item := range v.doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.OperationID == id {
				return method + " " + p
			}
		}
	}
	return "?"
}

// wholePackageRan reports whether every test of the package ran, so that a pair no test
// produced is worth reporting.
func wholePackageRan() bool {
	for _, name := range []string{"test.run", "test.skip", "test.list"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			return false
		}
	}
	return !testing.Short()
}

// unreachablePairs are the documented (operation, status) pairs no test of this package can
// produce cheaply, as "operationId status" with the reason. The coverage check at the end of the
// run fails on a documented pair that is neither produced nor listed here, and on a pair listed
// here that a test does produce or the document no longer has.
//
// It is empty: the statuses that need a broken or specially configured ingress (429 on every
// operation, 503 and the dead letters' 500 without NATS, /metrics' 404) are produced by
// openapi_statuses_test.go, the handler's failures by Echo's fail method and a model that fails.
// Before adding a pair, look for a cheap way to produce it.
var unreachablePairs = map[string]string{
	"signal 202":             "a signal whose resumed request waits again: Echo's ask waits once",
	"signalByHeader 202":     "as signal 202",
	"signal default":         "a signal whose resumed request's handler fails: Echo's ask does not",
	"signalByHeader default": "as signal default",
}
