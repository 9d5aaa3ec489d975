// Package echo is the reference agent Echo (DESIGN §8): small, deterministic handlers that tests
// and newcomers use to see every path through agentbus work.
//
// Webhook methods:
//   - echo: 200 JSON {params, body, size, sha256}; body is the raw body as a string when it is
//     valid UTF-8, else bodyBase64 holds it.
//   - verify: 200 text/plain echoing the challenge query parameter or the body's "challenge".
//   - ack: 202 at once, then finishes the work (ms query parameter, default 50) and counts it in
//     the state's "acks".
//   - status: answers with the status given by the code query parameter.
//   - sleep: sleeps ms milliseconds (at most 5 minutes), counts it in "sleeps", and answers
//     {"slept": ms}.
//   - count: increments the instance's counter: {"count": n, "runId": …}.
//   - complete: answers {"completed": true, "runId": …} and completes the instance.
//   - state: answers {"runId": …, "state": …} without changing anything.
package echo

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/agent"
)

// Name is the agent's name.
const Name = "Echo"

// State is what Echo keeps per instance.
type State struct {
	Count  int `json:"count"`
	Acks   int `json:"acks"`
	Sleeps int `json:"sleeps"`
}

// maxSleep bounds sleep and ack work so that a caller cannot park a conversation for long.
const maxSleep = 5 * time.Minute

// New returns the Echo agent with workflow types "Supervisor Workflow" and "Conversational".
func New() *agent.Agent {
	a := agent.New(Name, agent.WorkflowTypes("Supervisor Workflow", "Conversational"))
	a.WebhookFunc("echo", echo)
	a.WebhookFunc("verify", verify)
	a.WebhookFunc("ack", ack)
	a.WebhookFunc("status", status)
	a.WebhookFunc("sleep", sleep)
	a.WebhookFunc("count", count)
	a.WebhookFunc("complete", complete)
	a.WebhookFunc("state", state)
	return a
}

// echoReply is echo's answer. Body is set when the body is valid UTF-8 (an empty body too),
// BodyBase64 otherwise.
type echoReply struct {
	Params     map[string]string `json:"params"`
	Body       *string           `json:"body,omitempty"`
	BodyBase64 string            `json:"bodyBase64,omitempty"`
	Size       int               `json:"size"`
	SHA256     string            `json:"sha256"`
}

func echo(_ context.Context, r *agent.WebhookRequest) agent.Response {
	sum := sha256.Sum256(r.Body)
	out := echoReply{Params: r.Params, Size: len(r.Body), SHA256: hex.EncodeToString(sum[:])}
	if utf8.Valid(r.Body) {
		body := string(r.Body)
		out.Body = &body
	} else {
		out.BodyBase64 = base64.StdEncoding.EncodeToString(r.Body)
	}
	return agent.JSON(http.StatusOK, out)
}

func verify(_ context.Context, r *agent.WebhookRequest) agent.Response {
	challenge, ok := r.Params["challenge"]
	if !ok {
		var body struct {
			Challenge *string `json:"challenge"`
		}
		if json.Unmarshal(r.Body, &body) == nil && body.Challenge != nil {
			challenge, ok = *body.Challenge, true
		}
	}
	if !ok {
		return agent.Text(http.StatusBadRequest, "missing challenge")
	}
	return agent.Text(http.StatusOK, challenge)
}

func ack(ctx context.Context, r *agent.WebhookRequest) agent.Response {
	r.Respond(agent.JSON(http.StatusAccepted, map[string]any{"accepted": true, "requestId": r.RequestID}))
	if !pause(ctx, r, 50) {
		return agent.Status(http.StatusServiceUnavailable)
	}
	if _, err := agent.UpdateState(ctx, r.Instance(), func(s *State) error { s.Acks++; return nil }); err != nil {
		return agent.Status(http.StatusInternalServerError)
	}
	return agent.Status(http.StatusOK) // not sent: the caller already has its 202
}

func status(_ context.Context, r *agent.WebhookRequest) agent.Response {
	code, err := strconv.Atoi(r.Params["code"])
	if err != nil || code < 200 || code > 599 {
		return agent.JSON(http.StatusBadRequest, map[string]string{"error": "code must be a status from 200 to 599"})
	}
	return agent.JSON(code, map[string]int{"status": code})
}

func sleep(ctx context.Context, r *agent.WebhookRequest) agent.Response {
	if !pause(ctx, r, 0) {
		return agent.Status(http.StatusServiceUnavailable)
	}
	if _, err := agent.UpdateState(ctx, r.Instance(), func(s *State) error { s.Sleeps++; return nil }); err != nil {
		return agent.Status(http.StatusInternalServerError)
	}
	return agent.JSON(http.StatusOK, map[string]any{"slept": sleptMs(r)})
}

func count(ctx context.Context, r *agent.WebhookRequest) agent.Response {
	s, err := agent.UpdateState(ctx, r.Instance(), func(s *State) error { s.Count++; return nil })
	if err != nil {
		return agent.Status(http.StatusInternalServerError)
	}
	return agent.JSON(http.StatusOK, map[string]any{"count": s.Count, "runId": r.Instance().RunID()})
}

func complete(_ context.Context, r *agent.WebhookRequest) agent.Response {
	r.Instance().Complete()
	return agent.JSON(http.StatusOK, map[string]any{"completed": true, "runId": r.Instance().RunID()})
}

func state(_ context.Context, r *agent.WebhookRequest) agent.Response {
	var s State
	if err := r.Instance().State(&s); err != nil {
		return agent.Status(http.StatusInternalServerError)
	}
	return agent.JSON(http.StatusOK, map[string]any{"runId": r.Instance().RunID(), "state": s})
}

// sleptMs is the pause sleep asked for, in milliseconds.
func sleptMs(r *agent.WebhookRequest) int {
	ms, err := strconv.Atoi(r.Params["ms"])
	if err != nil || ms < 0 {
		return 0
	}
	return int(min(time.Duration(ms)*time.Millisecond, maxSleep) / time.Millisecond)
}

// pause sleeps for the ms query parameter (def when absent); false if ctx ended first.
func pause(ctx context.Context, r *agent.WebhookRequest, def int) bool {
	ms := def
	if v, err := strconv.Atoi(r.Params["ms"]); err == nil && v >= 0 {
		ms = v
	}
	d := min(time.Duration(ms)*time.Millisecond, maxSleep)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
