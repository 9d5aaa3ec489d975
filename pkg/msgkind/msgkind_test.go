package msgkind

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/history"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

func TestTable(t *testing.T) {
	for _, c := range []struct {
		wire       agentbusv1.Kind
		history    history.MessageType
		name       string
		label      string
		method     bool
		foldMethod bool
		sent       bool
		payload    Payload
		event      string
	}{
		{agentbusv1.Kind_KIND_CHAT, history.Chat, "Chat", "chat", false, false, true, JSONData, "chat"},
		{agentbusv1.Kind_KIND_DATA, history.Data, "Data", "data", true, true, true, JSONData, "data"},
		{agentbusv1.Kind_KIND_FILE, history.File, "File", "file", false, false, true, StoredFile, ""},
		{agentbusv1.Kind_KIND_WEBHOOK, history.Webhook, "Webhook", "webhook", true, false, true, HTTPBody, ""},
		{agentbusv1.Kind_KIND_POST, history.Chat, "Post", "post", false, false, false, JSONData, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			k := Of(c.wire)
			assert.Equal(t, Kind{Wire: c.wire, History: c.history, Name: c.name, Label: c.label, Method: c.method,
				FoldMethod: c.foldMethod, Sent: c.sent, Payload: c.payload, Event: c.event}, k)
			l, ok := Lookup(c.wire)
			assert.True(t, ok)
			assert.Equal(t, k, l)
			n, ok := Named(c.name)
			assert.True(t, ok)
			assert.Equal(t, k, n)
			if c.wire != agentbusv1.Kind_KIND_POST {
				assert.Equal(t, k, OfHistory(c.history), "OfHistory")
			}
		})
	}
}

// TestEveryWireKindHasARow: a kind added to bus.proto needs its row.
func TestEveryWireKindHasARow(t *testing.T) {
	for v := range agentbusv1.Kind_name {
		w := agentbusv1.Kind(v)
		_, ok := Lookup(w)
		assert.Equal(t, w != agentbusv1.Kind_KIND_UNSPECIFIED, ok, "%s", w)
	}
	assert.Len(t, All, len(agentbusv1.Kind_name)-1)
}

func TestOneSpelling(t *testing.T) {
	names, labels, wires := map[string]bool{}, map[string]bool{}, map[agentbusv1.Kind]bool{}
	for _, k := range All {
		assert.False(t, names[k.Name] || labels[k.Label] || wires[k.Wire], "%s repeats a name, label or wire value", k.Name)
		names[k.Name], labels[k.Label], wires[k.Wire] = true, true, true
	}
}

func TestOutsideTheTable(t *testing.T) {
	for _, w := range []agentbusv1.Kind{agentbusv1.Kind_KIND_UNSPECIFIED, -1, 99} {
		assert.Equal(t, Chat, Of(w), "%d", w)
		_, ok := Lookup(w)
		assert.False(t, ok, "%d", w)
	}
	assert.Equal(t, Chat, OfHistory(3), "3 is reserved")
	assert.Equal(t, Chat, OfHistory(-1))
	for _, name := range []string{"", "chat", "CHAT", "Unknown", "type 3"} {
		_, ok := Named(name)
		assert.False(t, ok, "%q", name)
	}
}

func TestMethodKey(t *testing.T) {
	assert.Equal(t, "sum", Data.MethodKey("SuM"))
	assert.Equal(t, "Echo", Webhook.MethodKey("Echo"))
	assert.Empty(t, Chat.MethodKey("hello"))
	assert.Empty(t, File.MethodKey("x.txt"))
	assert.Empty(t, Post.MethodKey("hi"))
}

// TestNamesAsTheAPIDocumentsThem: the names clients send are send's type enum, and the history
// types are the MessageType enum, of the OpenAPI document.
func TestNamesAsTheAPIDocumentsThem(t *testing.T) {
	raw, err := os.ReadFile("../ingress/openapi.json")
	require.NoError(t, err)
	var doc struct {
		Components struct {
			Schemas struct {
				SendRequest struct {
					Properties struct {
						Type struct {
							Enum []string `json:"enum"`
						} `json:"type"`
					} `json:"properties"`
				} `json:"SendRequest"`
				MessageType struct {
					Enum []int `json:"enum"`
				} `json:"MessageType"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	var sent []string
	for _, k := range All {
		if k.Sent {
			sent = append(sent, k.Name)
		}
		assert.Contains(t, doc.Components.Schemas.MessageType.Enum, int(k.History), k.Name)
	}
	assert.Equal(t, doc.Components.Schemas.SendRequest.Properties.Type.Enum, sent)
}
