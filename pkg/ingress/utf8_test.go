package ingress_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/stacktest"
)

// TestInvalidUTF8IsAClientError: text that is not valid UTF-8, wherever a request carries it as
// text, is refused with 400 naming where it was, before anything is published; never reported
// as the bus failing.
func TestInvalidUTF8IsAClientError(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{})
	const bad = "%FF%FEx"
	webhook := "/api/user/webhooks/Echo/echo?apikey=" + s.Key
	converse := "/api/user/rest/converse?workflow=Echo&type=Chat&apikey=" + s.Key
	history := "/api/v1/admin/tenants/default/messaging/history?agentName=Echo&activationName=default&participantId=u&apikey=" + s.Key
	for _, tc := range []struct {
		name, path string
		hdr        []string
		slug, says string
	}{
		{"webhook query value", webhook + "&order=" + bad, nil, "invalid-query", `"order"`},
		{"webhook query name", webhook + "&" + bad + "=1", nil, "invalid-query", "name"},
		{"webhook Content-Type", webhook, []string{"Content-Type", "text/plain; charset=\xff"}, "invalid-header", "Content-Type"},
		{"webhook Idempotency-Key", webhook, []string{"Idempotency-Key", "k\xff\xfe"}, "invalid-idempotency-key", "Idempotency-Key"},
		{"converse text", converse + "&text=" + bad, nil, "invalid-query", `"text"`},
		{"converse topic", converse + "&text=hi&topic=" + bad, nil, "invalid-query", `"topic"`},
		{"converse hint", converse + "&text=hi&hint=" + bad, nil, "invalid-query", `"hint"`},
		{"converse Idempotency-Key", converse + "&text=hi", []string{"Idempotency-Key", "\xc3("}, "invalid-idempotency-key", "Idempotency-Key"},
		{"history topic", history + "&topic=" + bad, nil, "invalid-query", `"topic"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := http.MethodPost
			if strings.Contains(tc.path, "/history") {
				method = http.MethodGet
			}
			status, h, b := doRequest(t, method, s.URL+tc.path, strings.NewReader("{}"), tc.hdr...)
			p := problemOf(t, status, h.Get("Content-Type"), b, http.StatusBadRequest)
			assert.Equal(t, "urn:agentbus:problem:"+tc.slug, p["type"])
			assert.Contains(t, p["detail"], tc.says)
			assert.Contains(t, p["detail"], "UTF-8")
			assert.Empty(t, h.Get("Retry-After"), "a request that can never succeed is not to be retried")
		})
	}
}

// FuzzWebhookAndConverseText sends arbitrary bytes through the whole stack in every string a
// webhook or converse call carries as text: a query parameter's name and value, the Content-Type
// and Idempotency-Key headers, converse's text, topic and hint. Whatever they hold, the answer is
// the handler's 200 or a 4xx problem, and text that is not valid UTF-8 is a 400.
func FuzzWebhookAndConverseText(f *testing.F) {
	for _, seed := range [][5]string{
		{"order", "17", "application/json", "", "hi"},
		{"\xff", "1", "", "", "x"},
		{"a", "\xfe\xff", "text/plain", "k1", "\xc3("},
		{"a", "b", "text/plain; charset=\xff", "", "t"},
		{"a", "b", "", "\xed\xa0\x80", "t"},
		{"", "", "", "", ""},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3], seed[4])
	}
	s := stacktest.Start(f, stacktest.Options{})
	f.Fuzz(func(t *testing.T, name, value, contentType, idempotencyKey, text string) {
		if !validHeaderValue(contentType) || !validHeaderValue(idempotencyKey) {
			return // net/http refuses to send such a header, and a server refuses to read it
		}
		// Both read the query and Idempotency-Key; only the webhook reads Content-Type (converse
		// takes no body), and only converse the text.
		common := utf8.ValidString(name) && utf8.ValidString(value) && utf8.ValidString(idempotencyKey)
		webhookValid, converseValid := common && utf8.ValidString(contentType), common && utf8.ValidString(text)
		var hdr []string
		if contentType != "" {
			hdr = append(hdr, "Content-Type", contentType)
		}
		if idempotencyKey != "" {
			hdr = append(hdr, "Idempotency-Key", idempotencyKey)
		}
		query := url.Values{"apikey": {s.Key}}
		if name != "apikey" {
			query.Add(name, value)
		}
		check := func(what string, valid bool, status int, h http.Header, b []byte) {
			t.Helper()
			if status == http.StatusOK {
				require.True(t, valid, "%s: 200 for text that is not valid UTF-8", what)
				return
			}
			p := problemOf(t, status, h.Get("Content-Type"), b, status)
			require.True(t, status >= 400 && status < 500, "%s: %d %v", what, status, p)
			if !valid {
				require.Equal(t, http.StatusBadRequest, status, "%s: %v", what, p)
			}
		}
		status, h, b := doRequest(t, http.MethodPost, s.URL+"/api/user/webhooks/Echo/echo?"+query.Encode(), strings.NewReader("{}"), hdr...)
		check("webhook", webhookValid, status, h, b)

		query.Set("workflow", "Echo")
		query.Set("type", "Chat")
		query.Set("text", "t "+text)
		query.Set("topic", text)
		query.Set("hint", text)
		status, h, b = doRequest(t, http.MethodPost, s.URL+"/api/user/rest/converse?"+query.Encode(), nil, hdr...)
		check("converse", converseValid, status, h, b)
	})
}

// validHeaderValue reports whether net/http sends and accepts v as a header value.
func validHeaderValue(v string) bool {
	if strings.TrimSpace(v) != v {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
