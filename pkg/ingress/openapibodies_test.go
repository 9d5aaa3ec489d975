package ingress_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	sjs "github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"

	"github.com/agentbus/agentbus/pkg/ingress"
)

// bodySchemas checks JSON answers against the OpenAPI document's schemas, compiling each schema
// once with the JSON Schema 2020-12 validator kin-openapi uses for OpenAPI 3.1
// (github.com/santhosh-tekuri/jsonschema/v6). kin-openapi compiles a response's schema again for
// every answer it checks, which took about a tenth of this package's test CPU.
type bodySchemas struct {
	mu       sync.Mutex
	compiler *sjs.Compiler
	compiled map[string]*sjs.Schema // by JSON pointer into the document
}

// documentURL names the OpenAPI document among the compiler's resources.
const documentURL = "https://agentbus.invalid/openapi.json"

func newBodySchemas() (*bodySchemas, error) {
	doc, err := sjs.UnmarshalJSON(bytes.NewReader(ingress.OpenAPIDocument()))
	if err != nil {
		return nil, fmt.Errorf("decoding the OpenAPI document: %w", err)
	}
	c := sjs.NewCompiler()
	c.DefaultDraft(sjs.Draft2020)
	c.AssertFormat() // as kin-openapi does for the formats its schemas name
	if err := c.AddResource(documentURL, doc); err != nil {
		return nil, fmt.Errorf("adding the OpenAPI document: %w", err)
	}
	return &bodySchemas{compiler: c, compiled: map[string]*sjs.Schema{}}, nil
}

// isJSON reports whether an answer's content type is JSON, whose bodies bodySchemas checks.
func isJSON(contentType string) bool {
	mt, _, _ := mime.ParseMediaType(contentType)
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// check checks a JSON body against the schema of the document's response at pointer (a
// response object, "/paths/…/responses/200" or "/components/responses/NotFound") for the
// answer's content type. A response without content, or a content type without a schema,
// takes any body.
func (s *bodySchemas) check(pointer string, response *openapi3.Response, contentType string, body []byte) error {
	if len(response.Content) == 0 {
		return nil
	}
	mt := response.Content.Get(contentType)
	if mt == nil {
		return fmt.Errorf("content type %q is not documented", contentType)
	}
	if mt.Schema == nil {
		return nil
	}
	key := ""
	for k, v := range response.Content {
		if v == mt {
			key = k
		}
	}
	schema, err := s.schema(pointer + "/content/" + pointerToken(key) + "/schema")
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var value any
	if err := dec.Decode(&value); err != nil {
		return fmt.Errorf("the body is not JSON: %w", err)
	}
	if err := schema.Validate(value); err != nil {
		return fmt.Errorf("the body does not fit its schema: %w", err)
	}
	return nil
}

// schema is the compiled schema at pointer (a JSON pointer, RFC 6901).
func (s *bodySchemas) schema(pointer string) (*sjs.Schema, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if schema, ok := s.compiled[pointer]; ok {
		return schema, nil
	}
	// In a URI's fragment the pointer's path templates' braces and any percent sign are escaped.
	fragment := (&url.URL{Fragment: pointer}).EscapedFragment()
	schema, err := s.compiler.Compile(documentURL + "#" + fragment)
	if err != nil {
		return nil, fmt.Errorf("compiling the schema at %s: %w", pointer, err)
	}
	s.compiled[pointer] = schema
	return schema, nil
}

// responsePointer is the JSON pointer of an operation's response: the component it refers to,
// or the response in the operation itself.
func responsePointer(path, method, status string, ref *openapi3.ResponseRef) (string, error) {
	if ref.Ref != "" {
		// A reference is a URI fragment.
		u, err := url.Parse(ref.Ref)
		if err != nil {
			return "", fmt.Errorf("reading the reference %q: %w", ref.Ref, err)
		}
		return u.Fragment, nil
	}
	return "/paths/" + pointerToken(path) + "/" + strings.ToLower(method) + "/responses/" + status, nil
}

// pointerToken escapes a JSON pointer's reference token (RFC 6901).
func pointerToken(token string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(token)
}

// TestTrafficValidatorChecksBodies: the check every test's answers go through refuses bodies
// that do not fit their schema, in an operation's own response and in a component response,
// through references.
func TestTrafficValidatorChecksBodies(t *testing.T) {
	t.Parallel()
	const tenants = `/api/v1/admin/tenants`
	problem := func(extra string) string {
		return `{"type":"urn:agentbus:problem:not-found","title":"Not found","status":404` + extra + `}`
	}
	for _, c := range []struct {
		name, path  string
		status      int
		contentType string
		body        string
		fits        bool
	}{
		{"a list that fits", tenants, 200, "application/json", `{"tenants":[{"id":"acme","createdAt":"2026-12-04T10:00:00.000Z"}]}`, true},
		{"a property the schema does not have", tenants, 200, "application/json", `{"tenants":[],"next":"x"}`, false},
		{"a required property missing behind a reference", tenants, 200, "application/json", `{"tenants":[{"id":"acme"}]}`, false},
		{"a timestamp that is not one", tenants, 200, "application/json", `{"tenants":[{"id":"acme","createdAt":"yesterday"}]}`, false},
		{"a body that is not JSON", tenants, 200, "application/json", `{"tenants":`, false},
		{"an undocumented content type", tenants, 200, "application/xml", `<tenants/>`, false},
		{"a problem that fits, no operation", "/nowhere", 404, "application/problem+json", problem(""), true},
		{"a problem without its title, no operation", "/nowhere", 404, "application/problem+json", `{"type":"urn:agentbus:problem:not-found","status":404}`, false},
		{"a problem with a property of its own, no operation", "/nowhere", 404, "application/problem+json", problem(`,"stack":"x"`), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1"+c.path, nil)
			resp := &http.Response{
				StatusCode: c.status, Request: req,
				Header: http.Header{"Content-Type": {c.contentType}},
				Body:   io.NopCloser(strings.NewReader(c.body)),
			}
			_, err := traffic.check(req, resp)
			if c.fits {
				assert.NoError(t, err)
			} else {
				assert.Error(t, err)
			}
		})
	}
}
