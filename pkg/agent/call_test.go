package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

func relay(t *testing.T, s *stacktest.Stack, activation string, params map[string]any) (int, string) {
	t.Helper()
	status, body := sendData(t, s, echo.Name, activation, "ada", "relay", params)
	return status, string(body)
}

// relay calls another instance's Data method and answers with its result; the callee's thread
// with the caller ("agent:echo") records the exchange.
func TestRelayCallsAnotherInstance(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	for want := 1; want <= 2; want++ {
		status, body := relay(t, s, "a", map[string]any{"activation": "b", "method": "count"})
		require.Equal(t, http.StatusOK, status, body)
		var rep struct {
			Response struct {
				Data struct {
					Result struct {
						Count int `json:"count"`
					} `json:"result"`
				} `json:"data"`
			} `json:"response"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &rep))
		assert.Equal(t, want, rep.Response.Data.Result.Count, body)
	}
	calls := threadAt(t, s, echo.Name, "b", "agent:echo")
	require.Len(t, calls, 4, "two calls and two replies in the callee's thread")
	assert.Equal(t, history.Out, calls[0].Direction)
	assert.Equal(t, "count", *calls[1].Text)
}

// Calls that could never be answered, or may not be made, fail at once with a clear error.
func TestRelayRefusals(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{})
	cases := []struct {
		name   string
		params map[string]any
		status int
		detail string
	}{
		{"a cycle a→b→a", map[string]any{"activation": "b", "method": "relay", "params": map[string]any{"activation": "a", "method": "count"}},
			http.StatusConflict, "already waiting in this chain of calls"},
		{"a call to itself", map[string]any{"activation": "a", "method": "count"}, http.StatusConflict, "already waiting in this chain of calls"},
		{"another tenant", map[string]any{"workflowId": "other:Echo:Supervisor Workflow:x", "method": "count"}, http.StatusForbidden, "own tenant only"},
		{"an unknown agent", map[string]any{"agent": "Nope", "activation": "b", "method": "count"}, http.StatusNotFound, "no agent"},
		{"an unknown method", map[string]any{"activation": "b", "method": "nope"}, http.StatusNotFound, "no Data method"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body := relay(t, s, "a", c.params)
			assert.Equal(t, c.status, status, body)
			assert.Contains(t, body, c.detail)
		})
	}
}

// A handler that calls and then fails runs again; its call reaches the callee with the same
// request id, so the callee runs once and the second attempt gets the first result.
func TestCallRunsOnceAcrossRetries(t *testing.T) {
	var attempts atomic.Int32
	a := agent.New("Caller")
	agent.Method(a, "twice", func(ctx context.Context, _ struct{}) (map[string]int, error) {
		var got struct {
			Count int `json:"count"`
		}
		err := agent.MessageFrom(ctx).Instance().Call(ctx, agent.Peer{Agent: echo.Name, Activation: "callee"}, "count", nil, &got)
		if err != nil {
			return nil, err
		}
		if attempts.Add(1) == 1 {
			return nil, agent.Retryable(errors.New("fails after calling"))
		}
		return map[string]int{"count": got.Count}, nil
	})
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{a, echo.New()}})
	status, body := sendData(t, s, "Caller", "c", "ada", "twice", nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	assert.Contains(t, string(body), `"count":1`)
	assert.EqualValues(t, 2, attempts.Load())
	_, _, b := post(t, s, "default:Echo:Supervisor Workflow:callee", "state", "")
	assert.Contains(t, string(b), `"count":1`, "the callee ran once")
}

// Hosts of one process that share their watches (agent.ShareWatches) share one subscription to
// the replies of their Agent2Agent calls: each host's calls get their own replies, made at once.
func TestHostsSharingRepliesGetTheirOwn(t *testing.T) {
	caller := func(name string) *agent.Agent {
		a := agent.New(name)
		agent.Method(a, "count", func(ctx context.Context, p struct {
			Callee string `json:"callee"`
		}) (map[string]int, error) {
			var got struct {
				Count int `json:"count"`
			}
			callee := agent.Peer{Agent: echo.Name, Activation: p.Callee}
			if err := agent.MessageFrom(ctx).Instance().Call(ctx, callee, "count", nil, &got); err != nil {
				return nil, err
			}
			return map[string]int{"count": got.Count}, nil
		})
		return a
	}
	s := stacktest.Start(t, stacktest.Options{NoAgents: true})
	shared := sharedConfig(t, s)
	require.NotNil(t, shared.Replies)

	one, two := shared, shared
	one.ID, one.Agents = "one", []*agent.Agent{caller("CallerOne")}
	two.ID, two.Agents = "two", []*agent.Agent{caller("CallerTwo"), echo.New()}
	startHost(t, s, one)
	startHost(t, s, two)

	var wg sync.WaitGroup
	for _, name := range []string{"CallerOne", "CallerTwo"} {
		for i := range 3 {
			wg.Go(func() {
				activation := fmt.Sprintf("%s-%d", name, i)
				for want := 1; want <= 2; want++ {
					status, body := sendData(t, s, name, activation, "ada", "count", map[string]any{"callee": "of-" + activation})
					if assert.Equal(t, http.StatusOK, status, "%s", body) {
						assert.Contains(t, string(body), fmt.Sprintf(`"count":%d`, want), "%s call %d", activation, want)
					}
				}
			})
		}
	}
	wg.Wait()
}
