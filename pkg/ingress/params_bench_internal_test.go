package ingress

import (
	"net/http/httptest"
	"testing"
)

// BenchmarkEdgeWebhook is what the edge costs a webhook call: its path variables, its header and
// its query parameters checked against their rules.
func BenchmarkEdgeWebhook(b *testing.B) {
	const template = "/api/user/webhooks/{workflow}/{method}"
	r := httptest.NewRequest("POST", "/api/user/webhooks/Echo/echo?apikey=abk_x&participantId=ada&order=17", nil)
	r.Header.Set("Idempotency-Key", "order-17")
	r.Pattern = template
	headers := paramsOf("POST", template).header
	b.ReportAllocs()
	for b.Loop() {
		if checkParam("path", "workflow", template, "Echo") != nil || checkParam("path", "method", template, "echo") != nil {
			b.Fatal("refused")
		}
		if checkHeaders(r, template, headers) != nil {
			b.Fatal("refused")
		}
		if _, p := readQuery(r); p != nil {
			b.Fatal(p.Detail)
		}
	}
}
