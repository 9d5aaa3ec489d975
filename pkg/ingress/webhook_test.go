package ingress_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/stacktest"
)

// call POSTs body to a webhook and returns status, content type and body.
func call(t *testing.T, base, workflow, method string, query url.Values, body []byte, hdr ...string) (int, string, []byte) {
	t.Helper()
	u := base + "/api/user/webhooks/" + url.PathEscape(workflow) + "/" + url.PathEscape(method) + "?" + query.Encode()
	req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

func q(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	return v
}

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("decoding %q: %v", b, err)
	}
	return m
}

func TestWebhookCountCompleteNewRun(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	wf := "default:Echo:Supervisor Workflow:counting"

	status, ct, b := call(t, s.URL, wf, "count", q("apikey", s.Key), nil)
	if status != 200 || ct != "application/json" {
		t.Fatalf("first count: %d %s %s", status, ct, b)
	}
	first := decode(t, b)
	if first["count"] != 1.0 {
		t.Fatalf("first count = %v, want 1", first["count"])
	}
	_, _, b = call(t, s.URL, wf, "count", q("apikey", s.Key), nil)
	second := decode(t, b)
	if second["count"] != 2.0 || second["runId"] != first["runId"] {
		t.Fatalf("second call = %v, want count 2 on run %v", second, first["runId"])
	}
	status, _, b = call(t, s.URL, wf, "complete", q("apikey", s.Key), nil)
	if status != 200 {
		t.Fatalf("complete: %d %s", status, b)
	}
	_, _, b = call(t, s.URL, wf, "count", q("apikey", s.Key), nil)
	third := decode(t, b)
	if third["count"] != 1.0 || third["runId"] == first["runId"] {
		t.Fatalf("after complete = %v, want count 1 on a new run", third)
	}
}

func TestWebhookEchoBodies(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	large := make([]byte, 5<<20)
	if _, err := rand.Read(large); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"empty", nil},
		{"json", []byte(`{"a":1}`)},
		{"non-utf8", []byte{0xff, 0xfe, 0x00, 'a', 0x80}},
		{"large binary", large},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, b := call(t, s.URL, "Echo", "echo", q("apikey", s.Key, "tenantId", "default", "x", "1", "y", "two words"), tc.body, "Content-Type", "application/octet-stream")
			if status != 200 {
				t.Fatalf("status %d: %.200s", status, b)
			}
			got := decode(t, b)
			sum := sha256.Sum256(tc.body)
			if got["sha256"] != hex.EncodeToString(sum[:]) || got["size"] != float64(len(tc.body)) {
				t.Fatalf("body changed in transit: size %v sha %v", got["size"], got["sha256"])
			}
			if body, ok := got["body"].(string); ok && body != string(tc.body) {
				t.Fatalf("body = %q", body)
			}
			if b64, ok := got["bodyBase64"].(string); ok {
				raw, _ := base64.StdEncoding.DecodeString(b64)
				if !bytes.Equal(raw, tc.body) {
					t.Fatal("base64 body differs")
				}
			}
			params := got["params"].(map[string]any)
			if len(params) != 2 || params["x"] != "1" || params["y"] != "two words" {
				t.Fatalf("params = %v, want exactly x and y", params)
			}
		})
	}
}

func TestWebhookVerifyStatusAck(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	status, ct, b := call(t, s.URL, "Echo", "verify", q("apikey", s.Key, "challenge", "abc123"), nil)
	if status != 200 || !strings.HasPrefix(ct, "text/plain") || string(b) != "abc123" {
		t.Fatalf("verify by query: %d %s %q", status, ct, b)
	}
	status, ct, b = call(t, s.URL, "Echo", "verify", q("apikey", s.Key), []byte(`{"challenge":"from-body"}`))
	if status != 200 || !strings.HasPrefix(ct, "text/plain") || string(b) != "from-body" {
		t.Fatalf("verify by body: %d %s %q", status, ct, b)
	}
	status, _, b = call(t, s.URL, "Echo", "status", q("apikey", s.Key, "code", "418"), nil)
	if status != 418 {
		t.Fatalf("status: %d %s", status, b)
	}

	wf := "Echo:Conversational"
	start := time.Now()
	status, _, b = call(t, s.URL, wf, "ack", q("apikey", s.Key, "ms", "1500"), nil)
	if status != 202 {
		t.Fatalf("ack: %d %s", status, b)
	}
	if time.Since(start) > 1200*time.Millisecond {
		t.Fatalf("ack waited for the work (%v)", time.Since(start))
	}
	// The async work shows in the state once done; the state call queues behind it.
	status, _, b = call(t, s.URL, wf, "state", q("apikey", s.Key), nil)
	st := decode(t, b)["state"].(map[string]any)
	if status != 200 || st["acks"] != 1.0 {
		t.Fatalf("state after ack = %d %s", status, b)
	}
}
