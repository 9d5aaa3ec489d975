package remote

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// An endpoint that dies after sending its answer's status line and headers, before the whole
// body (a process killed between the two writes, a connection reset), failed: the request is
// tried again. Only an answer read whole that is not a protocol answer fails the request (502).
func TestPostAnswerCutOff(t *testing.T) {
	cases := []struct {
		name string
		// raw is what the endpoint writes before it closes the connection.
		raw   string
		reset bool // close with a reset (RST) rather than a FIN
		retry bool
	}{
		{name: "JSON cut off", raw: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n{\"response\":{\"status\":200,", retry: true},
		{name: "JSON cut off by a reset", raw: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n{\"response\":", reset: true, retry: true},
		{name: "headers only", raw: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n", retry: true},
		{name: "stream cut off", raw: "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"e\r\n{\"delta\":\"a\"}\n\r\n", retry: true},
		{name: "not JSON", raw: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 8\r\n\r\nnot json"},
		{name: "stream without an answer", raw: "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"e\r\n{\"delta\":\"a\"}\n\r\n0\r\n\r\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				conn, buf, err := w.(http.Hijacker).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				defer conn.Close()
				writeRaw(t, buf, tc.raw)
				if tc.reset {
					_ = conn.(*net.TCPConn).SetLinger(0)
				}
			}))
			t.Cleanup(srv.Close)
			c := newCaller(Registration{Name: "Cut", URL: srv.URL, TimeoutSeconds: 5, MaxConcurrent: 4, Secret: webhooksig.NewStandardSecret()},
				nil, slog.New(slog.DiscardHandler))
			t.Cleanup(c.close)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var deltas []string
			_, err := c.post(ctx, &Request{Protocol: ProtocolVersion, Type: "Webhook", RequestID: "r1", Attempt: 1, Stream: true},
				func(d string) { deltas = append(deltas, d) })
			require.Error(t, err)
			assert.Equal(t, tc.retry, agent.IsRetryable(err), "retryable: %v", err)
			var failed *agent.Error
			if tc.retry {
				assert.ErrorIs(t, err, errEndpoint)
				assert.ErrorIs(t, err, errAnswerCut)
			} else if assert.True(t, errors.As(err, &failed), "%v", err) {
				assert.Equal(t, http.StatusBadGateway, failed.Status)
			}
		})
	}
}

func writeRaw(t *testing.T, w *bufio.ReadWriter, raw string) {
	t.Helper()
	if _, err := w.WriteString(raw); err != nil {
		t.Error(err)
	}
	if err := w.Flush(); err != nil {
		t.Error(err)
	}
}

// A streamed answer comes as NDJSON lines or as server-sent events: deltas, then the answer.
func TestParseStreamedAnswer(t *testing.T) {
	cases := []struct {
		name, ct, body string
		deltas         []string
		reply          string // the answer's reply.text; "" when parsing fails
	}{
		{name: "NDJSON", ct: "application/x-ndjson", body: "{\"delta\":\"a\"}\n\n{\"delta\":\"b\"}\r\n{\"reply\":{\"text\":\"ab\"}}\n",
			deltas: []string{"a", "b"}, reply: "ab"},
		{name: "NDJSON after the answer", ct: "application/x-ndjson", body: "{\"reply\":{\"text\":\"a\"}}\n{\"delta\":\"b\"}\n"},
		{name: "NDJSON without an answer", ct: "application/x-ndjson", body: "{\"delta\":\"a\"}\n", deltas: []string{"a"}},
		{name: "events", ct: "text/event-stream; charset=utf-8",
			body:   ": a comment\nevent: delta\nid: 1\ndata: {\"delta\":\"a\"}\n\ndata:{\"delta\":\"b\"}\r\n\r\nretry: 100\n\nevent: answer\ndata: {\"reply\":\n" + "data: {\"text\":\"ab\"}}\n\n",
			deltas: []string{"a", "b"}, reply: "ab"},
		{name: "events with CR line ends and a byte order mark", ct: "text/event-stream",
			body: "\ufeffdata: {\"delta\":\"a\"}\r\rdata: {\"reply\":{\"text\":\"a\"}}\r\r", deltas: []string{"a"}, reply: "a"},
		{name: "events in upper case", ct: "Text/Event-Stream", body: "data: {\"reply\":{\"text\":\"x\"}}\n\n", reply: "x"},
		{name: "event cut off before its blank line", ct: "text/event-stream", body: "data: {\"delta\":\"a\"}\n\ndata: {\"reply\":{\"text\":\"a\"}}\n",
			deltas: []string{"a"}},
		{name: "event after the answer", ct: "text/event-stream", body: "data: {\"reply\":{\"text\":\"a\"}}\n\ndata: {\"delta\":\"b\"}\n\n"},
		{name: "event that is not JSON", ct: "text/event-stream", body: "data: [DONE]\n\n"},
		{name: "another media type is one JSON answer", ct: "text/event-streamx", body: "data: {}\n\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var deltas []string
			ans, err := parseAnswer(strings.NewReader(tc.body), tc.ct, func(d string) { deltas = append(deltas, d) })
			assert.Equal(t, tc.deltas, deltas)
			if tc.reply == "" {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.NotNil(t, ans.Reply)
			require.NotNil(t, ans.Reply.Text)
			assert.Equal(t, tc.reply, *ans.Reply.Text)
		})
	}
}

// An endpoint's answer, of any content type, is read without a panic, and an answer read whole is
// an Answer.
func FuzzParseAnswer(f *testing.F) {
	f.Add("application/json", `{"reply":{"text":"a"},"state":{"n":1}}`)
	f.Add("application/x-ndjson", "{\"delta\":\"a\"}\n{\"reply\":{\"text\":\"a\"}}\n")
	f.Add("text/event-stream", "event: delta\ndata: {\"delta\":\"a\"}\n\n: c\ndata: {\"reply\":\ndata: {\"text\":\"a\"}}\n\n")
	f.Fuzz(func(t *testing.T, ct, body string) {
		ans, err := parseAnswer(strings.NewReader(body), ct, func(string) {})
		if err == nil && ans == nil {
			t.Fatal("no error and no answer")
		}
	})
}

// Each send of a request that steps streams again what the earlier sends streamed: the caller
// gets each piece once, however the sends split it, and what a send streams differently from
// where it differs.
func TestDeltasOfSends(t *testing.T) {
	cases := []struct {
		name  string
		sends [][]string
		want  []string
	}{
		{"the same pieces", [][]string{{"a ", "b "}, {"a ", "b ", "c "}, {"a ", "b ", "c ", "d"}}, []string{"a ", "b ", "c ", "d"}},
		{"split otherwise", [][]string{{"ab", "cd"}, {"a", "bcdef"}, {"abcdefgh"}}, []string{"ab", "cd", "ef", "gh"}},
		{"different text", [][]string{{"one "}, {"two ", "three"}}, []string{"one ", "two ", "three"}},
		{"a send streams less", [][]string{{"a ", "b "}, {"a "}, {"a ", "b ", "c"}}, []string{"a ", "b ", "c"}},
		{"no deltas", [][]string{{}, {}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			var streamed strings.Builder
			for _, send := range tc.sends {
				d := newDeltas(&streamed, func(s string) { got = append(got, s) })
				for _, piece := range send {
					d(piece)
				}
			}
			assert.Equal(t, tc.want, got)
		})
	}
	assert.Nil(t, newDeltas(&strings.Builder{}, nil), "no handler for a request that does not stream")
}
