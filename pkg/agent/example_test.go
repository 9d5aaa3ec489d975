package agent_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/stack"
)

// Greeter's state: kept per workflow instance, across calls and restarts.
type greeterState struct {
	Greeted int `json:"greeted"`
}

// An agent with one webhook method that counts its greetings in the instance's state. A real
// program runs it with agent.NewHost(agent.HostConfig{Conn: nc, Agents: agents}).Run(ctx)
// against a NATS cluster; here a whole in-process stack serves it, and an HTTP client calls it
// the way an external system would.
func Example() {
	greeter := agent.New("Greeter")
	greeter.WebhookFunc("hello", func(ctx context.Context, r *agent.WebhookRequest) agent.Response {
		s, err := agent.UpdateState(ctx, r.Instance(), func(s *greeterState) error {
			s.Greeted++
			return nil
		})
		if err != nil {
			return agent.Status(http.StatusInternalServerError)
		}
		return agent.Text(http.StatusOK, fmt.Sprintf("hello %s (#%d)", r.Params["name"], s.Greeted))
	})

	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	st, err := stack.Start(ctx, stack.Config{DataDir: dir, HTTPAddr: "127.0.0.1:0", Agents: []*agent.Agent{greeter}})
	if err != nil {
		panic(err)
	}
	defer st.Stop(ctx)
	_ = st.Keys.EnsureTenant(ctx, "acme")
	key, _, _ := st.Keys.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser, Name: "example"})
	_ = st.WaitKnown(ctx, key)

	for range 2 {
		resp, err := http.Post(st.URL+"/api/user/webhooks/Greeter/hello?name=world&apikey="+key, "text/plain", nil)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body))
	}
	// Output:
	// 200 hello world (#1)
	// 200 hello world (#2)
}
