package ingress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/problem"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// fuzzSecret is the credential the fuzz targets plant; it must never come out the other side.
const fuzzSecret = "ab_sk_FUZZSECRET0123456789"

// FuzzSendBody decodes arbitrary bytes as the send endpoint does, then runs the body through the
// pure helpers and storeFile (with an in-memory object store): nothing panics, errors are
// described without internals, base64 content decodes to the bytes it encodes, and a stored file
// is what its reference says.
func FuzzSendBody(f *testing.F) {
	for _, s := range []string{
		`{"agentName":"a","activationName":"default","participantId":"u","type":"Chat","text":"hi"}`,
		`{"type":"File","text":"f.txt","data":"aGVsbG8="}`,
		`{"type":"File","text":"f.txt","data":"aGVsbG8"}`,
		`{"type":"File","data":{"content":"aGV\nsbG8_-w==","fileName":"x.bin","contentType":"application/octet-stream","fileSize":5}}`,
		`{"type":"File","data":{"content":null}}`,
		`{"type":"File","data":"!!!"}`,
		`{"type":"File","data":12}`,
		`{"type":"File","data":{"fileSize":"big"}}`,
		`{"type":"Webhook","text":"m","data":"raw body"}`,
		`{"type":"Webhook","text":"m","data":{"a":[1,2,3]}}`,
		`{"type":"Data","text":"m","data":  {"x":1} }`,
		`{"agentName":1}`,
		`{"a":1}{"b":2}`,
		`{`,
		``,
		`null`,
		`[]`,
		`"\ud800"`,
	} {
		f.Add([]byte(s), []byte("hello"))
	}
	f.Add([]byte(`{"type":"File","data":""}`), []byte{0, 0xff, 0xfe})
	f.Add([]byte(`{}`), []byte{})

	store := &fuzzObjectStore{}
	s := &Server{
		cfg: Config{MaxFileBytes: 4096},
		log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		res: &bus.Resources{Files: store},
	}
	f.Fuzz(func(t *testing.T, raw, file []byte) {
		ctx := context.Background()

		// base64 of any bytes decodes back to them, with or without line breaks.
		enc := base64.StdEncoding.EncodeToString(file)
		for _, in := range []string{enc, wrapLines(enc, 76), base64.RawURLEncoding.EncodeToString(file)} {
			got, ok := decodeBase64(in)
			require.True(t, ok, "decodeBase64(%q) fails", in)
			require.Equal(t, file, got, "decodeBase64(%q)", in)
		}

		var body sendBody
		dec := json.NewDecoder(bytes.NewReader(raw))
		if err := dec.Decode(&body); err != nil || dec.More() {
			checkClientText(t, "jsonProblem", jsonProblem(err))
		} else {
			checkWebhookBody(t, body.Data)
			trimmed := bytes.TrimSpace(body.Data)
			require.Equal(t, len(trimmed) > 0 && trimmed[0] == '{', isJSONObject(body.Data), "isJSONObject(%q) is wrong", body.Data)
			if b, ok := decodeBase64(body.Text); ok {
				again, ok := decodeBase64(base64.StdEncoding.EncodeToString(b))
				require.True(t, ok && bytes.Equal(again, b), "decodeBase64(%q) = %x does not re-encode", body.Text, b)
			}
			checkStoreFile(t, ctx, s, store, body)
		}

		// The same bytes as a file's content, in both shapes the interface allows.
		content, _ := json.Marshal(enc)
		for _, data := range []json.RawMessage{content, json.RawMessage(`{"content":` + string(content) + `,"fileName":"f"}`)} {
			ref, p := checkStoreFile(t, ctx, s, store, sendBody{Text: "f.bin", Data: data})
			switch {
			case len(file) == 0:
				require.Nil(t, p, "empty file: ref %+v", ref)
				require.True(t, ref.Empty, "empty file: ref %+v", ref)
			case int64(len(file)) > s.cfg.MaxFileBytes:
				require.NotNil(t, p, "%d-byte file over the %d limit: ref %+v", len(file), s.cfg.MaxFileBytes, ref)
				require.Equal(t, http.StatusRequestEntityTooLarge, p.Status, "%d-byte file over the %d limit: problem %+v", len(file), s.cfg.MaxFileBytes, p)
			default:
				require.Nil(t, p, "file %x: ref %+v", file, ref)
				require.False(t, ref.Empty || ref.Invalid, "file %x: ref %+v", file, ref)
				require.Equal(t, file, store.last, "file %x: stored", file)
			}
		}
	})
}

// FuzzConverseParams runs converse's query parameter handling over arbitrary query strings:
// parsing, the wait parameters, the workflow reference and the participant.
func FuzzConverseParams(f *testing.F) {
	for _, q := range []string{
		"workflow=support&type=Chat&text=hi",
		"workflow=acme:support:Supervisor+Workflow:default&type=Data&text=m&participantId=Alice",
		"workflow=other:a:b:c&type=Chat&text=x&timeoutSeconds=300",
		"timeoutSeconds=0&wait=maybe",
		"timeoutSeconds=99999999999999999999&wait=1",
		"timeoutSeconds=-1",
		"workflow=%zz",
		"a=1;b=2",
		"participantId=%00&workflow=%E2%80%8B",
		"text=" + strings.Repeat("x", 300),
	} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, rawQuery string) {
		query, err := url.ParseQuery(rawQuery)
		if err != nil {
			return
		}
		wait, timeout, perr := waitParams(query)
		if perr != "" {
			checkClientText(t, "waitParams", perr)
			require.False(t, wait || timeout != 0, "waitParams(%q) failed but gave %v, %v", rawQuery, wait, timeout)
		} else {
			require.True(t, timeout >= time.Second && timeout <= maxWaitSecs*time.Second, "waitParams(%q) timeout %v out of range", rawQuery, timeout)
		}
		const tenant = "acme"
		if wf, err := ident.Resolve(query.Get("workflow"), tenant); err == nil {
			_, err := ident.ParseWorkflowID(wf.ID())
			require.NoError(t, err, "workflow %q resolved to %q, which does not parse", query.Get("workflow"), wf.ID())
		}
		if p, err := ident.Participant(query.Get("participantId")); err == nil {
			require.Equal(t, strings.ToLower(p), p, "participant not lowercased")
		}
	})
}

// FuzzWebhookQuery feeds a raw HTTP request with an arbitrary path, query and header through Go's
// request parser and the webhook route pattern, then through the query and header handling the
// webhook endpoint does: credentials (the apikey parameter, Authorization, Cookie,
// Proxy-Authorization) never reach the handler's parameters or metadata.
func FuzzWebhookQuery(f *testing.F) {
	for _, s := range [][5]string{
		{"support", "order", "x=1&y=2", "X-Trace", "abc"},
		{"acme:support:Supervisor Workflow:default", "order", "apikey=other&apikey=" + fuzzSecret, "Content-Type", "application/json"},
		{"a/b", "m?x", "tenantId=acme&participantId=Bob", "authorization", "Bearer x"},
		{"..", ".", "%zz", "cookie", "a=b"},
		{"ünï", "m%2F", "a=1;b=2", "Proxy-Authorization", "Basic Zm9vOmJhcg=="},
		{"x", "y", "APIKEY=z&ApiKey=z", "X-Api-Key", "k"},
		{"x", "y", "", "Authorization ", "v"},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4])
	}
	f.Fuzz(func(t *testing.T, workflow, method, rawQuery, hname, hval string) {
		for _, in := range []string{workflow, method, rawQuery, hname, hval} {
			if strings.Contains(in, "FUZZSECRET") {
				return
			}
		}
		target := "/api/user/webhooks/" + url.PathEscape(workflow) + "/" + url.PathEscape(method) + "?apikey=" + fuzzSecret
		if rawQuery != "" {
			target += "&" + rawQuery
		}
		raw := "POST " + target + " HTTP/1.1\r\nHost: agentbus\r\n" +
			hname + ": " + hval + "\r\n" +
			"Authorization: Bearer " + fuzzSecret + "\r\n" +
			"Cookie: s=" + fuzzSecret + "\r\n" +
			"Proxy-Authorization: Basic " + fuzzSecret + "\r\n" +
			"Content-Length: 0\r\n\r\n"
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil || !serverAccepts(r.Header) {
			return // the server refuses it before any handler runs
		}

		var gotWorkflow, gotMethod string
		called := false
		mux := http.NewServeMux()
		mux.HandleFunc("/api/user/webhooks/{workflow}/{method}", func(w http.ResponseWriter, r *http.Request) {
			called = true
			gotWorkflow, gotMethod = r.PathValue("workflow"), r.PathValue("method")
		})
		mux.ServeHTTP(httptest.NewRecorder(), r)
		if !called {
			return // not found or redirected (e.g. "." and ".." segments)
		}
		require.Equal(t, workflow, gotWorkflow, "path segment workflow")
		require.Equal(t, method, gotMethod, "path segment method")
		if wf, err := ident.Resolve(gotWorkflow, "acme"); err == nil {
			require.False(t, strings.ContainsAny(wf.ID(), "\x00\r\n"), "workflow %q resolved to unsafe id %q", gotWorkflow, wf.ID())
		}

		query, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			return // startUserCall answers 400 invalid-query
		}
		require.True(t, contains(query["apikey"], fuzzSecret), "query %q lost the apikey parameter: %v", r.URL.RawQuery, query)
		for name, value := range webhookParams(query) {
			require.False(t, name == "apikey" || strings.Contains(value, fuzzSecret), "webhook params leak the API key: %q=%q", name, value)
		}
		md := bus.ParseHeaders(headerBlock(r.Header))
		for name, value := range md {
			require.NotContains(t, []string{"Authorization", "Cookie", "Proxy-Authorization"}, canonicalHeader(name),
				"metadata carries credential header %q=%q", name, value)
			require.False(t, strings.Contains(value, fuzzSecret) || strings.Contains(name, fuzzSecret),
				"metadata leaks the API key in %q=%q (request header %q: %q)", name, value, hname, hval)
		}
	})
}

// serverAccepts repeats net/http's server check on header names and values (httpguts'
// ValidHeaderFieldName and ValidHeaderFieldValue), which http.ReadRequest alone does not make:
// the server answers 400 to a request that fails it.
func serverAccepts(h http.Header) bool {
	for name, values := range h {
		if name == "" {
			return false
		}
		for i := 0; i < len(name); i++ {
			c := name[i]
			if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
				return false
			}
		}
		for _, v := range values {
			for i := 0; i < len(v); i++ {
				if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
					return false
				}
			}
		}
	}
	return true
}

func canonicalHeader(name string) string { return http.CanonicalHeaderKey(strings.TrimSpace(name)) }

func contains(list []string, v string) bool {
	for _, s := range list {
		if s == v {
			return true
		}
	}
	return false
}

// checkStoreFile runs storeFile and checks what it returns against what it stored.
func checkStoreFile(t *testing.T, ctx context.Context, s *Server, store *fuzzObjectStore, body sendBody) (*agentbusv1.FileRef, *problem.Problem) {
	t.Helper()
	store.last, store.puts = nil, 0
	ref, prob := s.storeFile(ctx, &agentbusv1.Request{TenantId: "acme"}, body)
	if prob != nil {
		require.Nil(t, ref, "storeFile gave both a reference and %+v", prob)
		require.Contains(t, []int{http.StatusBadRequest, http.StatusRequestEntityTooLarge}, prob.Status, "storeFile status for data %q", body.Data)
		checkClientText(t, "storeFile", prob.Detail)
		require.Zero(t, store.puts, "storeFile stored an object and failed: %+v", prob)
		return nil, prob
	}
	require.NotNil(t, ref, "storeFile(%q) gave neither a reference nor a problem", body.Data)
	if ref.Empty || ref.Invalid {
		require.True(t, store.puts == 0 && ref.Object == "" && ref.Size == 0,
			"storeFile(%q): empty/invalid ref %+v but stored %d objects", body.Data, ref, store.puts)
	} else {
		sum := sha256.Sum256(store.last)
		require.Equal(t, 1, store.puts, "storeFile(%q) puts", body.Data)
		require.True(t, ref.Size == int64(len(store.last)) && ref.Size != 0 && ref.Size <= s.cfg.MaxFileBytes,
			"storeFile(%q) ref size %d, stored %d bytes", body.Data, ref.Size, len(store.last))
		require.Equal(t, hex.EncodeToString(sum[:]), ref.Sha256, "storeFile(%q) sha256 mismatch", body.Data)
		require.True(t, strings.HasPrefix(ref.Object, "acme/"), "storeFile(%q) object %q", body.Data, ref.Object)
		require.Equal(t, store.name, ref.Object, "storeFile(%q) object stored under another name", body.Data)
	}
	return ref, nil
}

// checkWebhookBody checks webhookBody against its definition: nothing for no data, a JSON
// string's text, else the JSON itself.
func checkWebhookBody(t *testing.T, data json.RawMessage) {
	t.Helper()
	got := webhookBody(data)
	var str string
	switch {
	case len(data) == 0 || string(data) == "null":
		require.Nil(t, got, "webhookBody(%q)", data)
	case json.Unmarshal(data, &str) == nil:
		require.Equal(t, str, string(got), "webhookBody(%q): the JSON string's text", data)
	default:
		require.True(t, bytes.Equal(got, data), "webhookBody(%q) = %q, want the JSON itself", data, got)
	}
}

// checkClientText fails when a client-facing message shows Go internals.
func checkClientText(t *testing.T, what, s string) {
	t.Helper()
	for _, bad := range []string{"json:", "ingress.", "sendBody", "fileObject", "agentbusv1", "runtime", "goroutine", "%!"} {
		require.NotContains(t, s, bad, "%s: client text shows internals", what)
	}
}

// wrapLines breaks s into lines of n characters, as MIME base64 does.
func wrapLines(s string, n int) string {
	var b strings.Builder
	for len(s) > n {
		b.WriteString(s[:n])
		b.WriteString("\r\n")
		s = s[n:]
	}
	b.WriteString(s)
	return b.String()
}

// fuzzObjectStore is an in-memory stand-in for AGENTBUS_FILES: it keeps the last object put.
type fuzzObjectStore struct {
	jetstream.ObjectStore
	name string
	last []byte
	puts int
}

func (o *fuzzObjectStore) Put(_ context.Context, meta jetstream.ObjectMeta, r io.Reader) (*jetstream.ObjectInfo, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	o.name, o.last = meta.Name, b
	o.puts++
	return &jetstream.ObjectInfo{ObjectMeta: meta, Size: uint64(len(b))}, nil
}
