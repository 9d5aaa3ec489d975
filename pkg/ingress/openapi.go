package ingress

import (
	_ "embed"
	"net/http"
)

// openAPIDocument describes every route of api(). It is written by hand; openapi_test.go checks it
// against the route table and against whole-stack traffic, so that it cannot drift from the code.
//
//go:embed openapi.json
var openAPIDocument []byte

// serveOpenAPI answers the OpenAPI document; it takes no key, like /healthz.
func (s *Server) serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIDocument)
}
