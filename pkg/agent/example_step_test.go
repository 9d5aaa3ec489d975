package agent_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/agentbus/agentbus/pkg/agent"
)

// A handler charges a card in a durable step, then fails on its first attempt, as a call to a
// service that did not answer would. The attempt after it gets the recorded charge back instead
// of charging again.
func ExampleStep() {
	var charges atomic.Int32
	shop := agent.New("Shop")
	type order struct {
		Amount int `json:"amount"`
	}
	agent.Method(shop, "order", func(ctx context.Context, in order) (map[string]any, error) {
		charge, err := agent.Step(ctx, "charge", func(ctx context.Context) (string, error) {
			return fmt.Sprintf("charge-%d", charges.Add(1)), nil
		})
		if err != nil {
			return nil, err
		}
		if agent.MessageFrom(ctx).Attempt == 1 {
			return nil, agent.Retryable(errors.New("the shipping service did not answer"))
		}
		return map[string]any{"charge": charge, "amount": in.Amount}, nil
	})
	ctx := context.Background()
	st, key, stop := exampleStack(ctx, shop)
	defer stop()

	fmt.Println(converseData(st, key, "Shop", "order", `{"amount":42}`))
	fmt.Println("charges made:", charges.Load())
	// Output:
	// {"amount":42,"charge":"charge-1"}
	// charges made: 1
}
