package echo

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/timefmt"
)

// maxRemind bounds how far ahead remind schedules.
const maxRemind = 7 * 24 * time.Hour

type remindIn struct {
	Text string `json:"text" jsonschema:"what to say when the reminder is due"`
	MS   int64  `json:"ms" jsonschema:"milliseconds from now (at most 7 days)"`
}

// remind schedules a timer that, when due, posts text to the caller's thread (Agent2User). The
// timer's message comes back to remind itself, which then posts.
func remind(ctx context.Context, in remindIn) (map[string]any, error) {
	m := agent.MessageFrom(ctx)
	inst := m.Instance()
	if m.Timer != "" {
		return nil, inst.Post(ctx, agent.Post{Text: in.Text, Scope: m.Scope})
	}
	after := time.Duration(in.MS) * time.Millisecond
	if in.Text == "" || after < 0 || after > maxRemind {
		return nil, agent.Errorf(http.StatusBadRequest, "remind needs a text and ms between 0 and %d", maxRemind.Milliseconds())
	}
	name := "remind:" + m.ID
	due := time.Now().Add(after)
	if err := inst.Schedule(ctx, agent.Timer{Name: name, At: due, Method: "remind", Data: in, Scope: m.Scope}); err != nil {
		return nil, err
	}
	return map[string]any{"timer": name, "dueAt": timefmt.Format(due)}, nil
}

type tickIn struct {
	Seconds int  `json:"seconds,omitempty" jsonschema:"interval in seconds, at least 1 (default 60)"`
	Stop    bool `json:"stop,omitempty" jsonschema:"true cancels the ticking"`
}

// tickTimer names tick's timer: one per instance.
const tickTimer = "tick"

// tick starts a recurring timer that posts "tick N" to the caller's thread every interval, or
// stops it. The timer's messages come back to tick itself, which counts and posts.
func tick(ctx context.Context, in tickIn) (map[string]any, error) {
	m := agent.MessageFrom(ctx)
	inst := m.Instance()
	switch {
	case m.Timer != "":
		s, err := agent.UpdateState(ctx, inst, func(s *State) error { s.Ticks++; return nil })
		if err != nil {
			return nil, err
		}
		return nil, inst.Post(ctx, agent.Post{Text: "tick " + strconv.Itoa(s.Ticks), Data: map[string]int{"tick": s.Ticks}})
	case in.Stop:
		stopped, err := inst.CancelTimer(ctx, tickTimer)
		if err != nil {
			return nil, err
		}
		return map[string]any{"ticking": false, "stopped": stopped}, nil
	}
	if in.Seconds == 0 {
		in.Seconds = 60
	}
	if in.Seconds < 1 {
		return nil, agent.Errorf(http.StatusBadRequest, "seconds is at least 1")
	}
	every := time.Duration(in.Seconds) * time.Second
	if err := inst.Schedule(ctx, agent.Timer{Name: tickTimer, Every: every, Method: "tick"}); err != nil {
		return nil, fmt.Errorf("starting the tick: %w", err)
	}
	return map[string]any{"ticking": true, "every": every.String()}, nil
}

type relayIn struct {
	Agent        string          `json:"agent,omitempty" jsonschema:"the agent to call (default Echo)"`
	WorkflowType string          `json:"workflowType,omitempty" jsonschema:"its workflow type (default Supervisor Workflow)"`
	Activation   string          `json:"activation,omitempty" jsonschema:"the activation name of the instance to call"`
	WorkflowID   string          `json:"workflowId,omitempty" jsonschema:"or the instance's workflow id (of this tenant)"`
	Method       string          `json:"method" jsonschema:"the Data method to call"`
	Params       json.RawMessage `json:"params,omitempty" jsonschema:"the method's parameters"`
}

// relay calls a Data method of another instance of the tenant (Agent2Agent) and answers with its
// result.
func relay(ctx context.Context, in relayIn) (map[string]any, error) {
	if in.Agent == "" {
		in.Agent = Name
	}
	if in.Method == "" {
		return nil, agent.Errorf(http.StatusBadRequest, "relay needs a method")
	}
	var params any
	if len(in.Params) > 0 {
		params = in.Params
	}
	var result json.RawMessage
	inst := agent.MessageFrom(ctx).Instance()
	if err := inst.Call(ctx, agent.Peer{Agent: in.Agent, WorkflowType: in.WorkflowType, Activation: in.Activation, WorkflowID: in.WorkflowID}, in.Method, params, &result); err != nil {
		return nil, err
	}
	return map[string]any{"result": result}, nil
}
