package ingress_test

import (
	"encoding/json"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOpenAPISendRequestData checks what the document lets a send body's data be, per message
// type. The refusals are the server's too: contractSend sends them, and the contract transport
// fails a request the document refuses and the server accepts.
func TestOpenAPISendRequestData(t *testing.T) {
	t.Parallel()
	schema := loadOpenAPI(t).Components.Schemas["SendRequest"].Value
	for _, tc := range []struct {
		name, typ, data string
		ok              bool
	}{
		{name: "Chat object", typ: "Chat", data: `{"a":[1,"x",null]}`, ok: true},
		{name: "Chat array", typ: "Chat", data: `[1]`, ok: true},
		{name: "Chat string", typ: "Chat", data: `"x"`, ok: true},
		{name: "Chat null", typ: "Chat", data: `null`, ok: true},
		{name: "Data object", typ: "Data", data: `{"values":[2,3]}`, ok: true},
		{name: "Data null", typ: "Data", data: `null`, ok: true},
		{name: "Data array", typ: "Data", data: `[2,3]`},
		{name: "Data string", typ: "Data", data: `"x"`},
		{name: "File base64", typ: "File", data: `"aGVsbG8="`, ok: true},
		{name: "File object", typ: "File", data: `{"content":"aGVsbG8=","fileName":"a.txt","contentType":"text/plain"}`, ok: true},
		{name: "File null", typ: "File", data: `null`, ok: true},
		{name: "File number", typ: "File", data: `42`},
		{name: "File array", typ: "File", data: `["aGVsbG8="]`},
		{name: "File object with a number as content", typ: "File", data: `{"content":42}`},
		{name: "Webhook string", typ: "Webhook", data: `"raw text"`, ok: true},
		{name: "Webhook array", typ: "Webhook", data: `[1,2]`, ok: true},
		{name: "Webhook number", typ: "Webhook", data: `3`, ok: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body any
			require.NoError(t, json.Unmarshal([]byte(`{"agentName":"Echo","activationName":"a","participantId":"p","type":"`+tc.typ+`","text":"m","data":`+tc.data+`}`), &body))
			err := schema.VisitJSON(body, openapi3.EnableJSONSchema2020())
			if tc.ok {
				assert.NoError(t, err)
			} else {
				assert.Error(t, err)
			}
		})
	}
}
