package ingress

import (
	_ "embed"
	"net/http"
)

// openAPIDocument describes every route of api(). It is written by hand, and docs/openapi.json is
// a copy. The package's tests check it against the route table and check every answer their
// whole-stack traffic gets against it (openapitraffic_test.go), so that it cannot drift from the
// code unnoticed.
//
//go:embed openapi.json
var openAPIDocument []byte

// serveOpenAPI answers the OpenAPI document; it takes no key, like /healthz.
func (s *Server) serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIDocument)
}
