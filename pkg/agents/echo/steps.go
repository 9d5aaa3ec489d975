package echo

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/agentbus/agentbus/pkg/agent"
)

// Bounds of the steps method: a caller cannot park a conversation for longer than with sleep.
const (
	maxStepsN     = 100
	maxStepSleep  = time.Minute
	maxStepsTotal = maxSleep
)

type stepsIn struct {
	N       int   `json:"n" jsonschema:"how many steps, 1-100"`
	SleepMs int64 `json:"sleepMs,omitempty" jsonschema:"milliseconds each step waits, 0-60000; n times sleepMs at most 5 minutes"`
}

// stepRun is a step's result: the attempt of the request and the host whose run of the step's
// function gave it. A later attempt gets it back as recorded.
type stepRun struct {
	Attempt int    `json:"attempt"`
	HostID  string `json:"hostId"`
}

// steps makes in.N durable steps, "step 1" … "step n", one after another. Each step's function
// counts its run in the state's Steps and waits in.SleepMs. A step recorded by an earlier attempt
// of the request (its host died, or it was retried) is not run again: its result comes back and
// its function counts nothing.
func steps(ctx context.Context, in stepsIn) (map[string]any, error) {
	sleep := time.Duration(in.SleepMs) * time.Millisecond
	if in.N < 1 || in.N > maxStepsN || sleep < 0 || sleep > maxStepSleep || time.Duration(in.N)*sleep > maxStepsTotal {
		return nil, agent.Errorf(http.StatusBadRequest, "steps needs n from 1 to %d and sleepMs from 0 to %d, n times sleepMs at most %d",
			maxStepsN, maxStepSleep.Milliseconds(), maxStepsTotal.Milliseconds())
	}
	m := agent.MessageFrom(ctx)
	inst := m.Instance()
	ran := make([]stepRun, 0, in.N)
	for i := 1; i <= in.N; i++ {
		r, err := agent.Step(ctx, fmt.Sprintf("step %d", i), func(ctx context.Context) (stepRun, error) {
			_, err := agent.UpdateState(ctx, inst, func(s *State) error {
				for len(s.Steps) < i {
					s.Steps = append(s.Steps, 0)
				}
				s.Steps[i-1]++
				return nil
			})
			if err != nil {
				// Not recorded: the step runs again with the request's retry.
				return stepRun{}, agent.Retryable(fmt.Errorf("counting step %d: %w", i, err))
			}
			t := time.NewTimer(sleep)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return stepRun{}, agent.Retryable(ctx.Err())
			}
			return stepRun{Attempt: m.Attempt, HostID: inst.HostID()}, nil
		})
		if err != nil {
			return nil, err
		}
		ran = append(ran, r)
	}
	return map[string]any{"steps": in.N, "attempt": m.Attempt, "ran": ran}, nil
}
