package llm

import (
	"context"
	"strings"
	"unicode"
)

// OfflineName is the Name of the offline model.
const OfflineName = "offline"

// Offline returns the offline model: it answers "You said: {content of the last user message}"
// without any server, so that tests can assert on its answers. Stream delivers the answer in
// word-sized pieces, each word with the spaces that follow it.
func Offline() Model { return offline{} }

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

func offlineAnswer(req Request) string {
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
