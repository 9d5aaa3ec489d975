// Package msgkind is the one table of message kinds: for each kind, its value on the bus
// (agentbusv1.Kind), its type in stored history (history.MessageType), its name as the API
// spells it, its label in metrics and spans, whether it names a method, and how its content is
// carried and shown. Code that treats kinds alike looks a kind up here instead of switching on
// the enums; adding a kind is one row here and its handler.
package msgkind

import (
	"strings"

	"github.com/agentbus/agentbus/pkg/history"
	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// Payload is how a kind's content is carried on the bus and shown in history.
type Payload int

// Payloads.
const (
	// JSONData is text and optional JSON data (Chat, Data, Post).
	JSONData Payload = iota
	// StoredFile is a file kept in the files object store, with a caption as text (File).
	StoredFile
	// HTTPBody is an HTTP request's body and parameters, answered with an HTTP response
	// (Webhook).
	HTTPBody
)

// Kind is one row of the table.
type Kind struct {
	// Wire is the kind on the bus.
	Wire agentbusv1.Kind
	// History is the type a message of the kind is stored with (docs/messaging.md: 0 Chat,
	// 1 Data, 2 File, 4 Webhook). A Post is stored as the Chat message it is.
	History history.MessageType
	// Name is the kind as the API spells it: send's and a dead letter's type, a queued or a
	// recent request's type.
	Name string
	// Label names the kind in metric labels and span names (docs/metrics.md).
	Label string
	// Method says that a request of the kind names a method (its text on send and converse),
	// which picks its handler.
	Method bool
	// FoldMethod says that the kind's method names match whatever their case: handlers and
	// metrics key them lowercased.
	FoldMethod bool
	// Sent says that clients send the kind (send's type); a Post only an agent sends.
	Sent bool
	// Payload is how the kind's content is carried and shown.
	Payload Payload
	// Event is the type of the event a request of the kind raises for a handler that waits
	// (agent.Event's Type, docs/agents.md): a kind with methods raises its method and data, one
	// without its text. Empty for a kind that ends no wait.
	Event string
}

// The kinds.
var (
	Chat    = Kind{Wire: agentbusv1.Kind_KIND_CHAT, History: history.Chat, Name: "Chat", Label: "chat", Sent: true, Payload: JSONData, Event: "chat"}
	Data    = Kind{Wire: agentbusv1.Kind_KIND_DATA, History: history.Data, Name: "Data", Label: "data", Method: true, FoldMethod: true, Sent: true, Payload: JSONData, Event: "data"}
	File    = Kind{Wire: agentbusv1.Kind_KIND_FILE, History: history.File, Name: "File", Label: "file", Sent: true, Payload: StoredFile}
	Webhook = Kind{Wire: agentbusv1.Kind_KIND_WEBHOOK, History: history.Webhook, Name: "Webhook", Label: "webhook", Method: true, Sent: true, Payload: HTTPBody}
	Post    = Kind{Wire: agentbusv1.Kind_KIND_POST, History: history.Chat, Name: "Post", Label: "post", Payload: JSONData}
)

// All is the table, in the order the API lists the kinds.
var All = []Kind{Chat, Data, File, Webhook, Post}

// byWire is All indexed by wire value; a zero Name marks a value that is no kind.
var byWire = func() []Kind {
	var t []Kind
	for _, k := range All {
		for len(t) <= int(k.Wire) {
			t = append(t, Kind{})
		}
		t[k.Wire] = k
	}
	return t
}()

// Of returns the kind of a wire value. A value that is no kind (KIND_UNSPECIFIED, or one a
// newer sender wrote) is treated as Chat, the type every API answer already names it as and
// history stores it as: the API documents no other name for it.
func Of(w agentbusv1.Kind) Kind {
	if w >= 0 && int(w) < len(byWire) && byWire[w].Name != "" {
		return byWire[w]
	}
	return Chat
}

// Lookup returns the kind of a wire value, and whether it is one.
func Lookup(w agentbusv1.Kind) (Kind, bool) {
	if w >= 0 && int(w) < len(byWire) && byWire[w].Name != "" {
		return byWire[w], true
	}
	return Kind{}, false
}

// OfHistory returns the kind of a stored message type: the one that is stored with it and is
// not a Post (a Post is stored as a Chat message). A type outside the table (3, reserved) is
// read as Chat, as Of reads an unknown wire value.
func OfHistory(t history.MessageType) Kind {
	for _, k := range All {
		if k.History == t && k.Wire != agentbusv1.Kind_KIND_POST {
			return k
		}
	}
	return Chat
}

// Named returns the kind the API names so, exactly (case matters).
func Named(name string) (Kind, bool) {
	for _, k := range All {
		if k.Name == name {
			return k, true
		}
	}
	return Kind{}, false
}

// MethodKey is the key a handler of the kind is registered under for method: empty for a kind
// without methods (one handler each), lowercased where the kind's method names ignore case.
func (k Kind) MethodKey(method string) string {
	switch {
	case !k.Method:
		return ""
	case k.FoldMethod:
		return strings.ToLower(method)
	}
	return method
}
