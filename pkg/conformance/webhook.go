package conformance

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// largeEcho is the part of Echo's answer to a body that is not UTF-8 that the 32 MiB case checks.
type largeEcho struct {
	Size       int    `json:"size"`
	SHA256     string `json:"sha256"`
	BodyBase64 []byte `json:"bodyBase64"`
}

// bodyBase64Field is where the value of Echo's bodyBase64 begins, with the space a JSON encoder
// may put around the colon.
var bodyBase64Field = regexp.MustCompile(`"bodyBase64"\s*:\s*"`)

// decodeLargeEcho decodes Echo's answer to a large body. encoding/json reads a string byte by
// byte several times over, which costs seconds for 44 MiB of base64 in a test binary built with
// the race detector; so a bodyBase64 that is a plain JSON string (base64's alphabet needs no
// escape) is cut out and decoded as base64, and the rest of the answer, the string left empty,
// is decoded as JSON. Any other answer is decoded as JSON whole.
func decodeLargeEcho(answer []byte) (largeEcho, error) {
	var got largeEcho
	if loc := bodyBase64Field.FindIndex(answer); loc != nil {
		value := answer[loc[1]:]
		if end := bytes.IndexByte(value, '"'); end >= 0 && bytes.IndexByte(value[:end], '\\') < 0 {
			rest := append(append(bytes.Clone(answer[:loc[1]]), '"'), value[end+1:]...)
			decoded := make([]byte, base64.StdEncoding.DecodedLen(end))
			n, err := base64.StdEncoding.Decode(decoded, value[:end])
			// The rest holds no other bodyBase64 (a parameter of that name, say) with content.
			if err == nil && json.Unmarshal(rest, &got) == nil && len(got.BodyBase64) == 0 {
				got.BodyBase64 = decoded[:n]
				return got, nil
			}
			got = largeEcho{}
		}
	}
	// Decoded into fields rather than a map, so that the base64 is read once, into the bytes it
	// stands for.
	err := json.Unmarshal(answer, &got)
	return got, err
}

// webhookCases are the cases of the webhook endpoint (docs/webhooks.md, docs/interface.md#43-webhook)
// and Echo's webhook methods (docs/echo.md#webhook-methods).
func (s *suite) webhookCases() []testCase {
	return []testCase{
		{"echo answers params, body, size and sha256", func(t *testing.T) {
			body := []byte(`{"item":"tea","qty":2}`)
			q := url.Values{"order": {"17", "18"}, "participantId": {"Ada"}}
			r := s.webhook(t, "Echo", "echo", q, http.Header{"Content-Type": {"application/json"}}, body)
			require.Equal(t, http.StatusOK, r.Status, "%s", r)
			assert.Equal(t, "application/json", r.ContentType())
			assert.NotEmpty(t, r.Header.Get("X-Request-Id"))
			assert.Equal(t, map[string]any{
				// A parameter given twice passes its first value; apikey is left out.
				"params": map[string]any{"order": "17", "participantId": "Ada"},
				"body":   string(body), "size": float64(len(body)), "sha256": sha(body),
			}, r.object(t))
		}},
		{"echo leaves out a tenantId equal to the key's", func(t *testing.T) {
			r := s.webhook(t, "Echo", "echo", url.Values{"tenantId": {s.target.Tenant}, "x": {"1"}}, nil, nil)
			require.Equal(t, http.StatusOK, r.Status, "%s", r)
			assert.Equal(t, map[string]any{"x": "1"}, r.object(t)["params"])
		}},
		{"echo of a UTF-8 body", func(t *testing.T) {
			body := []byte("héllo ✓ 日本語\n\t\"quoted\" <tag> & done")
			r := s.webhook(t, "Echo", "echo", nil, http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, body)
			require.Equal(t, http.StatusOK, r.Status, "%s", r)
			m := r.object(t)
			assert.Equal(t, string(body), m["body"])
			assert.NotContains(t, m, "bodyBase64")
			assert.EqualValues(t, len(body), m["size"])
			assert.Equal(t, sha(body), m["sha256"])
			assert.Equal(t, map[string]any{}, m["params"])
		}},
		{"echo of a binary body", func(t *testing.T) {
			body := []byte{0xff, 0xfe, 0x00, 0x80, 'a', 0xc3}
			r := s.webhook(t, "Echo", "echo", nil, http.Header{"Content-Type": {"application/octet-stream"}}, body)
			require.Equal(t, http.StatusOK, r.Status, "%s", r)
			m := r.object(t)
			assert.Equal(t, base64.StdEncoding.EncodeToString(body), m["bodyBase64"])
			assert.NotContains(t, m, "body")
			assert.EqualValues(t, len(body), m["size"])
			assert.Equal(t, sha(body), m["sha256"])
		}},
		{"echo of an empty body", func(t *testing.T) {
			r := s.webhook(t, "Echo", "echo", nil, nil, nil)
			require.Equal(t, http.StatusOK, r.Status, "%s", r)
			assert.Equal(t, map[string]any{"params": map[string]any{}, "body": "", "size": float64(0), "sha256": sha(nil)}, r.object(t))
		}},
		{"echo of a large binary body", func(t *testing.T) {
			// Larger than one NATS message: it travels by claim check, and so does the answer.
			body := make([]byte, 3_000_000)
			for i := range body {
				body[i] = byte(i*7 + i>>8)
			}
			r := s.webhook(t, "Echo", "echo", nil, http.Header{"Content-Type": {"application/octet-stream"}}, body)
			require.Equal(t, http.StatusOK, r.Status, "%.300s", r)
			m := r.object(t)
			assert.EqualValues(t, len(body), m["size"])
			assert.Equal(t, sha(body), m["sha256"])
			got, err := base64.StdEncoding.DecodeString(m["bodyBase64"].(string))
			require.NoError(t, err)
			assert.True(t, bytes.Equal(body, got), "the body comes back byte for byte")
		}},
		{"echo of a body of the largest size, 32 MiB", func(t *testing.T) {
			body := bytes.Repeat([]byte("0123456789abcdef"), 2<<20)
			body[5] = 0xff // not UTF-8
			r := s.webhook(t, "Echo", "echo", nil, http.Header{"Content-Type": {"application/octet-stream"}}, body)
			require.Equal(t, http.StatusOK, r.Status, "%.300s", r)
			got, err := decodeLargeEcho(r.Body)
			require.NoError(t, err, "the body is a JSON object: %.300s", r)
			assert.Equal(t, 33_554_432, got.Size)
			assert.Equal(t, sha(body), got.SHA256)
			assert.True(t, bytes.Equal(body, got.BodyBase64), "bodyBase64 holds the body byte for byte")
		}},
		{"verify answers the challenge in plain text", func(t *testing.T) {
			r := s.webhook(t, "Echo", "verify", url.Values{"challenge": {"abc123"}}, nil, nil)
			require.Equal(t, http.StatusOK, r.Status, "%s", r)
			assert.Equal(t, "text/plain", r.ContentType())
			assert.Equal(t, "abc123", string(r.Body))

			r = s.webhook(t, "Echo", "verify", nil, http.Header{"Content-Type": {"application/json"}}, []byte(`{"challenge":"xyz"}`))
			require.Equal(t, http.StatusOK, r.Status, "%s", r)
			assert.Equal(t, "text/plain", r.ContentType())
			assert.Equal(t, "xyz", string(r.Body))

			r = s.webhook(t, "Echo", "verify", nil, nil, []byte(`{"other":1}`))
			require.Equal(t, http.StatusBadRequest, r.Status, "%s", r)
			assert.Equal(t, "text/plain", r.ContentType())
			assert.Equal(t, "missing challenge", string(r.Body))
		}},
		{"status answers the status asked for", func(t *testing.T) {
			for _, code := range []int{200, 201, 404, 418, 500, 503} {
				r := s.webhook(t, "Echo", "status", url.Values{"code": {strconv.Itoa(code)}}, nil, nil)
				require.Equal(t, code, r.Status, "%s", r)
				assert.Equal(t, "application/json", r.ContentType(), "a handler's own answer, not a problem: %s", r)
				assert.Equal(t, map[string]any{"status": float64(code)}, r.object(t))
			}
			for _, code := range []string{"99", "600", "abc", ""} {
				r := s.webhook(t, "Echo", "status", url.Values{"code": {code}}, nil, nil)
				assert.Equal(t, http.StatusBadRequest, r.Status, "code %q: %s", code, r)
				assert.Equal(t, "application/json", r.ContentType(), "code %q: %s", code, r)
			}
		}},
		{"count and state are kept per instance", func(t *testing.T) {
			a, b := s.act("count-a"), s.act("count-b")
			first := s.hook(t, a, "count")
			require.Equal(t, http.StatusOK, first.Status, "%s", first)
			assert.Equal(t, "application/json", first.ContentType())
			m := first.object(t)
			assert.EqualValues(t, 1, m["count"])
			runID, _ := m["runId"].(string)
			require.NotEmpty(t, runID, "%s", first)
			m = s.hook(t, a, "count").object(t)
			assert.Equal(t, map[string]any{"count": float64(2), "runId": runID}, m)
			assert.EqualValues(t, 1, s.hook(t, b, "count").object(t)["count"], "another instance has its own count")

			st := s.hook(t, a, "state")
			require.Equal(t, http.StatusOK, st.Status, "%s", st)
			assert.Equal(t, map[string]any{"runId": runID, "state": map[string]any{"count": float64(2), "acks": float64(0), "sleeps": float64(0)}}, st.object(t))
			assert.Equal(t, st.object(t), s.hook(t, a, "state").object(t), "state changes nothing")
		}},
		{"count of another workflow type is another instance", func(t *testing.T) {
			a := s.act("conv")
			sup := s.webhook(t, url.PathEscape(s.workflowID(a)), "count", nil, nil, nil).object(t)
			conv := s.webhook(t, url.PathEscape(s.target.Tenant+":Echo:Conversational:"+a), "count", nil, nil, nil).object(t)
			assert.EqualValues(t, 1, sup["count"])
			assert.EqualValues(t, 1, conv["count"])
			assert.NotEqual(t, sup["runId"], conv["runId"])
		}},
		{"sleep waits and counts", func(t *testing.T) {
			a := s.act("sleep")
			start := time.Now()
			r := s.webhook(t, s.pathID(a), "sleep", url.Values{"ms": {"150"}}, nil, nil)
			require.Equal(t, http.StatusOK, r.Status, "%s", r)
			assert.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)
			assert.Equal(t, "application/json", r.ContentType())
			assert.Equal(t, map[string]any{"slept": float64(150)}, r.object(t))
			r = s.webhook(t, s.pathID(a), "sleep", nil, nil, nil)
			assert.Equal(t, map[string]any{"slept": float64(0)}, r.object(t), "ms defaults to 0")
			st := s.hook(t, a, "state").object(t)["state"]
			assert.Equal(t, map[string]any{"count": float64(0), "acks": float64(0), "sleeps": float64(2)}, st)
		}},
		{"calls of one conversation run in order, of others at once", func(t *testing.T) {
			a := s.act("order")
			slow := make(chan *response, 1)
			start := time.Now()
			go func() {
				// Not through s.call: a goroutine may not end the test.
				r, err := http.Post(s.target.URL+"/api/user/webhooks/"+s.pathID(a)+"/sleep?ms=1500&apikey="+url.QueryEscape(s.target.Key), "", nil)
				if err != nil {
					slow <- nil
					return
				}
				defer r.Body.Close()
				slow <- &response{Status: r.StatusCode}
			}()
			time.Sleep(150 * time.Millisecond)
			// Another conversation of the instance is not held up by the sleep.
			other := s.webhook(t, s.pathID(a), "count", url.Values{"participantId": {"other"}}, nil, nil)
			require.Equal(t, http.StatusOK, other.Status, "%s", other)
			assert.Less(t, time.Since(start), 1500*time.Millisecond, "another conversation answers during the sleep")
			// The same conversation (participant webhook) waits for the sleep.
			st := s.hook(t, a, "state")
			assert.GreaterOrEqual(t, time.Since(start), 1500*time.Millisecond, "the same conversation waits")
			assert.EqualValues(t, 1, st.object(t)["state"].(map[string]any)["sleeps"])
			r := <-slow
			require.NotNil(t, r)
			assert.Equal(t, http.StatusOK, r.Status)
		}},
		{"the workflow segment's three forms", func(t *testing.T) {
			// Echo, Echo:Supervisor Workflow and the full id of activation default are one instance.
			forms := []string{"Echo", "Echo:Supervisor%20Workflow", url.PathEscape(s.workflowID("default"))}
			var counts []float64
			var runs []any
			for _, f := range forms {
				r := s.webhook(t, f, "count", nil, nil, nil)
				require.Equal(t, http.StatusOK, r.Status, "%s: %s", f, r)
				m := r.object(t)
				counts = append(counts, m["count"].(float64))
				runs = append(runs, m["runId"])
			}
			assert.Equal(t, []float64{counts[0], counts[0] + 1, counts[0] + 2}, counts)
			assert.Equal(t, []any{runs[0], runs[0], runs[0]}, runs)

			// An encoded slash is part of the activation's name.
			a := s.act("a/b c")
			r := s.webhook(t, url.PathEscape(s.workflowID(a)), "count", nil, nil, nil)
			require.Equal(t, http.StatusOK, r.Status, "%s", r)
			assert.EqualValues(t, 1, r.object(t)["count"])
		}},
		{"workflow segments that address nothing", func(t *testing.T) {
			assertProblem(t, s.webhook(t, "NoSuchAgent"+s.nonce, "echo", nil, nil, nil), http.StatusNotFound, "unknown-agent")
			assertProblem(t, s.webhook(t, "Echo:NoSuchType", "echo", nil, nil, nil), http.StatusNotFound, "unknown-workflow-type")
			assertProblem(t, s.webhook(t, "a:b:c", "echo", nil, nil, nil), http.StatusBadRequest, "invalid-workflow")
			other := "other" + s.nonce + ":Echo:Supervisor%20Workflow:default"
			assertProblem(t, s.webhook(t, other, "echo", nil, nil, nil), http.StatusForbidden, "forbidden")
		}},
		{"an unknown method is 404 unknown-method", func(t *testing.T) {
			r := s.webhook(t, "Echo", "nosuchmethod", nil, nil, nil)
			p := assertProblem(t, r, http.StatusNotFound, "unknown-method")
			assert.NotEmpty(t, p["requestId"])
			assert.Equal(t, p["requestId"], r.Header.Get("X-Request-Id"))
			// Webhook methods match exactly.
			assertProblem(t, s.webhook(t, "Echo", "ECHO", nil, nil, nil), http.StatusNotFound, "unknown-method")
		}},
		{"a missing or bad key is 401", func(t *testing.T) {
			for _, key := range []string{"abk_not-a-key", ""} {
				r := s.webhook(t, "Echo", "echo", url.Values{"apikey": {key}}, nil, nil)
				assertProblem(t, r, http.StatusUnauthorized, "unauthorized")
				assert.NotEmpty(t, r.Header.Get("WWW-Authenticate"))
			}
			r := s.call(t, http.MethodPost, s.target.URL+"/api/user/webhooks/Echo/echo", nil, nil)
			assertProblem(t, r, http.StatusUnauthorized, "unauthorized")
		}},
		{"a tenantId other than the key's is 403", func(t *testing.T) {
			for _, tenant := range []string{"other" + s.nonce, ""} {
				r := s.webhook(t, "Echo", "echo", url.Values{"tenantId": {tenant}}, nil, nil)
				assertProblem(t, r, http.StatusForbidden, "forbidden")
			}
		}},
		{"only POST is served", func(t *testing.T) {
			r := s.call(t, http.MethodGet, s.target.URL+"/api/user/webhooks/Echo/echo?apikey="+url.QueryEscape(s.target.Key), nil, nil)
			assertProblem(t, r, http.StatusMethodNotAllowed, "method-not-allowed")
			assert.Equal(t, "POST", r.Header.Get("Allow"))
		}},
		{"an Idempotency-Key replays the first answer", func(t *testing.T) {
			a, key := s.act("idem"), s.key("idem")
			h := http.Header{"Idempotency-Key": {key}}
			first := s.webhook(t, s.pathID(a), "count", nil, h, nil)
			require.Equal(t, http.StatusOK, first.Status, "%s", first)
			assert.Equal(t, key, first.Header.Get("X-Request-Id"))
			// Parameters and body are not compared.
			again := s.webhook(t, s.pathID(a), "count", url.Values{"x": {"1"}}, h, []byte("other"))
			assert.Equal(t, first.Status, again.Status)
			assert.Equal(t, first.Header.Get("Content-Type"), again.Header.Get("Content-Type"))
			assert.JSONEq(t, string(first.Body), string(again.Body))
			assert.Equal(t, key, again.Header.Get("X-Request-Id"))
			assert.EqualValues(t, 1, s.hook(t, a, "state").object(t)["state"].(map[string]any)["count"], "the retry did not run again")

			// The key reused for another method is refused, and nothing runs.
			p := assertProblem(t, s.webhook(t, s.pathID(a), "state", nil, h, nil), http.StatusUnprocessableEntity, "request-id-reused")
			assert.Equal(t, key, p["requestId"])
		}},
		{"an Idempotency-Key replays a status and content type of the handler's", func(t *testing.T) {
			h := http.Header{"Idempotency-Key": {s.key("idem-verify")}}
			first := s.webhook(t, "Echo", "verify", url.Values{"challenge": {"once"}}, h, nil)
			again := s.webhook(t, url.PathEscape(s.workflowID("default")), "verify", url.Values{"challenge": {"twice"}}, h, nil)
			for _, r := range []*response{first, again} {
				require.Equal(t, http.StatusOK, r.Status, "%s", r)
				assert.Equal(t, "text/plain", r.ContentType())
				assert.Equal(t, "once", string(r.Body))
			}
			h = http.Header{"Idempotency-Key": {s.key("idem-status")}}
			for range 2 {
				r := s.webhook(t, "Echo", "status", url.Values{"code": {"409"}}, h, nil)
				assert.Equal(t, http.StatusConflict, r.Status, "%s", r)
				assert.JSONEq(t, `{"status":409}`, string(r.Body))
			}
		}},
		{"a webhook call is stored in the conversation's thread", func(t *testing.T) {
			a := s.act("hook-history")
			r := s.webhook(t, s.pathID(a), "echo", url.Values{"participantId": {"Bob"}, "k": {"v"}}, nil, []byte("hi"))
			require.Equal(t, http.StatusOK, r.Status, "%s", r)
			// Both are stored in one write once the handler returns; the caller has its answer
			// before that.
			s.eventually(t, a, "bob", func(msgs []map[string]any) bool { return len(msgs) >= 2 }, "the call is stored")
			msgs := s.history(t, a, "bob", 10)
			require.Len(t, msgs, 2, "%v", msgs)
			out, in := msgs[0], msgs[1]
			assert.EqualValues(t, 0, in["direction"])
			assert.EqualValues(t, 4, in["messageType"])
			assert.Equal(t, "echo", in["text"])
			assert.Equal(t, map[string]any{"params": map[string]any{"participantId": "Bob", "k": "v"}, "body": "hi"}, in["data"])
			assert.EqualValues(t, 1, out["direction"])
			assert.EqualValues(t, 4, out["messageType"])
			d, _ := out["data"].(map[string]any)
			assert.EqualValues(t, 200, d["statusCode"], "%v", out)
			assert.Equal(t, "application/json", d["contentType"])
			assert.JSONEq(t, string(r.Body), d["content"].(string))
			assert.Equal(t, r.Header.Get("X-Request-Id"), in["requestId"])
		}},
		{"ack answers 202 before its work is done", func(t *testing.T) {
			a := s.act("ack")
			if !s.target.has(WebhookAck) {
				assertProblem(t, s.hook(t, a, "ack"), http.StatusNotFound, "unknown-method")
				return
			}
			key := s.key("ack")
			r := s.webhook(t, s.pathID(a), "ack", url.Values{"ms": {"300"}}, http.Header{"Idempotency-Key": {key}}, nil)
			require.Equal(t, http.StatusAccepted, r.Status, "%s", r)
			assert.Equal(t, map[string]any{"accepted": true, "requestId": key}, r.object(t))
			// The same conversation: state waits for the ack's work.
			st := s.hook(t, a, "state").object(t)["state"].(map[string]any)
			assert.EqualValues(t, 1, st["acks"])
		}},
		{"complete starts the next call on a new run with fresh state", func(t *testing.T) {
			a := s.act("complete")
			first := s.hook(t, a, "count").object(t)
			runID, _ := first["runId"].(string)
			require.NotEmpty(t, runID, "%v", first)
			s.hook(t, a, "count")
			done := s.hook(t, a, "complete")
			require.Equal(t, http.StatusOK, done.Status, "%s", done)
			assert.Equal(t, "application/json", done.ContentType())
			assert.Equal(t, map[string]any{"completed": true, "runId": runID}, done.object(t))
			// The next call starts a new run, whose state is fresh.
			st := s.hook(t, a, "state")
			require.Equal(t, http.StatusOK, st.Status, "%s", st)
			m := st.object(t)
			next, _ := m["runId"].(string)
			assert.NotEmpty(t, next, "%s", st)
			assert.NotEqual(t, runID, next, "a new run")
			assert.Equal(t, map[string]any{"count": float64(0), "acks": float64(0), "sleeps": float64(0)}, m["state"], "fresh state")
			assert.Equal(t, map[string]any{"count": float64(1), "runId": next}, s.hook(t, a, "count").object(t), "the new run counts from 1")
		}},
		{"host names the instance's host", func(t *testing.T) {
			a := s.act("host")
			runID := s.hook(t, a, "count").object(t)["runId"]
			r := s.hook(t, a, "host")
			require.Equal(t, http.StatusOK, r.Status, "%s", r)
			assert.Equal(t, "application/json", r.ContentType())
			m := r.object(t)
			hostID, _ := m["hostId"].(string)
			assert.NotEmpty(t, hostID, "%s", r)
			assert.Equal(t, map[string]any{"hostId": hostID, "runId": runID}, m)
			st := s.hook(t, a, "state").object(t)
			assert.EqualValues(t, 1, st["state"].(map[string]any)["count"], "host changes nothing")
		}},
	}
}
