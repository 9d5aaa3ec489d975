package echo

import (
	"context"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/agent"
)

// maxQuestion bounds ask's question, in bytes.
const maxQuestion = 4 << 10

type askIn struct {
	Question string `json:"question" jsonschema:"the question to post to this conversation, 1-4096 bytes"`
	TimeoutS int    `json:"timeoutS,omitempty" jsonschema:"seconds to wait for the answer, 1-518400 (6 days, the default)"`
}

// ask posts in.Question to the conversation, once, and waits for the participant's next Chat
// message, an answer call or the signal "answer": the request parks (its caller gets 202) and resumes with what came,
// or with nothing at the deadline.
func ask(ctx context.Context, in askIn) (map[string]any, error) {
	if in.Question == "" || len(in.Question) > maxQuestion || !utf8.ValidString(in.Question) {
		return nil, agent.Errorf(http.StatusBadRequest, "ask needs a question of 1 to %d bytes of text", maxQuestion)
	}
	timeout := time.Duration(in.TimeoutS) * time.Second
	if in.TimeoutS < 0 || timeout > agent.MaxWait {
		return nil, agent.Errorf(http.StatusBadRequest, "ask's timeoutS is 1 to %d", int(agent.MaxWait/time.Second))
	}
	inst := agent.MessageFrom(ctx).Instance()
	// A step, so that the run that resumes does not post the question again.
	if _, err := agent.Step(ctx, "post the question", func(ctx context.Context) (bool, error) {
		return true, inst.Post(ctx, agent.Post{Text: in.Question})
	}); err != nil {
		return nil, err
	}
	ev, err := agent.Wait(ctx, "answer", agent.For{Chat: true, Methods: []string{"answer"}, Signals: []string{"answer"}, Timeout: timeout})
	if err != nil {
		return nil, err
	}
	out := map[string]any{"question": in.Question, "type": ev.Type}
	switch ev.Type {
	case agent.EventChat:
		out["answer"], out["by"] = ev.Text, ev.ParticipantID
	case agent.EventData, agent.EventSignal:
		out["answer"], out["by"] = ev.Data, ev.ParticipantID
	}
	return out, nil
}

// answer is what an answer call does when no ask waits for it.
func answer(context.Context, map[string]any) (map[string]any, error) {
	return nil, agent.Errorf(http.StatusConflict, "nothing was asked: answer ends the wait of an ask in the same conversation")
}
