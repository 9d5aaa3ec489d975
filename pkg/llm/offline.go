package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"
)

// OfflineName is the Name of the offline model.
const OfflineName = "offline"

// Offline returns the offline model: it answers "You said: {content of the last user message}"
// without any server, so that tests can assert on its answers. Stream delivers the answer in
// word-sized pieces, each word with the spaces that follow it.
//
// Through Generate it also calls tools, by a fixed rule: a last user message
// "call {tool} {arguments}" (the arguments a JSON object, optional) naming one of the offered
// tools is answered with one call of that tool, id "call_{ID}" with the request's ID (so that
// the calls answering different messages differ), or "call_{n}" with the message's position
// when the request has none. Once the conversation holds the results after that message, the
// answer is "{tool} returned {result}" for each of them, joined by "; ". Any other message gets
// "You said: …".
func Offline() ToolModel { return offline{} }

type offline struct{}

func (offline) Name() string { return OfflineName }

func (offline) Complete(ctx context.Context, req Request) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", ctxError(ctx, OfflineName)
	}
	return offlineAnswer(req), nil
}

func (offline) Stream(ctx context.Context, req Request, onDelta func(string) error) (string, error) {
	var b strings.Builder
	for _, w := range words(offlineAnswer(req)) {
		if ctx.Err() != nil {
			return b.String(), ctxError(ctx, OfflineName)
		}
		b.WriteString(w)
		if onDelta != nil {
			if err := onDelta(w); err != nil {
				return b.String(), err
			}
		}
	}
	return b.String(), nil
}

func (offline) Generate(ctx context.Context, req Request, onDelta func(string) error) (Answer, error) {
	if err := ctx.Err(); err != nil {
		return Answer{}, ctxError(ctx, OfflineName)
	}
	if call, ok := offlineToolCall(req); ok {
		return Answer{ToolCalls: []ToolCall{call}}, nil
	}
	text := offlineAnswer(req)
	if onDelta == nil {
		return Answer{Text: text}, nil
	}
	var b strings.Builder
	for _, w := range words(text) {
		if ctx.Err() != nil {
			return Answer{Text: b.String()}, ctxError(ctx, OfflineName)
		}
		b.WriteString(w)
		if err := onDelta(w); err != nil {
			return Answer{Text: b.String()}, err
		}
	}
	return Answer{Text: b.String()}, nil
}

// lastUser is the index of the last user message, -1 when there is none.
func lastUser(req Request) int {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == RoleUser {
			return i
		}
	}
	return -1
}

// offlineToolCall is the tool call a last user message "call {tool} {arguments}" asks for, unless
// the call was made already.
func offlineToolCall(req Request) (ToolCall, bool) {
	u := lastUser(req)
	if u < 0 || u != len(req.Messages)-1 || len(req.Tools) == 0 {
		return ToolCall{}, false
	}
	rest, ok := strings.CutPrefix(strings.TrimSpace(req.Messages[u].Content), "call ")
	if !ok {
		return ToolCall{}, false
	}
	name, args, _ := strings.Cut(strings.TrimSpace(rest), " ")
	args = strings.TrimSpace(args)
	if args == "" {
		args = "{}"
	}
	if !strings.HasPrefix(args, "{") || !json.Valid([]byte(args)) {
		return ToolCall{}, false
	}
	if !slices.ContainsFunc(req.Tools, func(t Tool) bool { return t.Name == name }) {
		return ToolCall{}, false
	}
	return ToolCall{ID: offlineCallID(req.ID, u), Name: name, Arguments: args}, true
}

// offlineCallID names the call answering the message at index u. The index alone would repeat
// in one thread: a caller that sends the newest 20 messages sends the last one at the same index
// every turn.
func offlineCallID(requestID string, u int) string {
	if requestID == "" {
		return fmt.Sprintf("call_%d", u+1)
	}
	return "call_" + requestID
}

func offlineAnswer(req Request) string {
	if u := lastUser(req); u >= 0 {
		names := make(map[string]string)
		var results []string
		for _, m := range req.Messages[u+1:] {
			for _, c := range m.ToolCalls {
				names[c.ID] = c.Name
			}
			if m.Role == RoleTool {
				results = append(results, names[m.ToolCallID]+" returned "+m.Content)
			}
		}
		if len(results) > 0 {
			return strings.Join(results, "; ")
		}
	}
	return offlineEcho(req)
}

func offlineEcho(req Request) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == RoleUser {
			return "You said: " + req.Messages[i].Content
		}
	}
	return "You said: "
}

// words splits s after each run of white space, so that the pieces concatenate to s.
func words(s string) []string {
	var out []string
	start := 0
	prevSpace := false
	for i, r := range s {
		space := unicode.IsSpace(r)
		if prevSpace && !space {
			out = append(out, s[start:i])
			start = i
		}
		prevSpace = space
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}
