package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/llm"
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
			return agent.Fail(fmt.Errorf("counting the greeting: %w", err)) // logged; the caller gets a 500 problem
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

// sumParams are the parameters of the sum method below. The JSON Schema the model sees is
// derived from them: {"type":"object","properties":{"values":{"type":"array","items":
// {"type":"number"},"description":"the numbers to add"}},"required":["values"]}.
type sumParams struct {
	Values []float64 `json:"values" jsonschema:"the numbers to add"`
}

// An agent whose chat lets a language model call its Data methods as tools. Here the model is
// the offline one, whose rule "call {tool} {arguments}" makes it call a tool; a real program
// passes llm.New(cfg)'s model. The call of sum and its result are stored in the thread with the
// chat and its answer.
func ExampleChatWithTools() {
	calc := agent.New("Calc")
	agent.Method(calc, "sum", func(ctx context.Context, in sumParams) (map[string]float64, error) {
		total := 0.0
		for _, v := range in.Values {
			total += v
		}
		return map[string]float64{"sum": total}, nil
	}, agent.Describe("Adds numbers."))
	calc.Chat(agent.ChatWithTools(llm.Offline(), agent.SystemPrompt("You are a calculator. Use the tools.")))

	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	st, err := stack.Start(ctx, stack.Config{DataDir: dir, HTTPAddr: "127.0.0.1:0", Agents: []*agent.Agent{calc}})
	if err != nil {
		panic(err)
	}
	defer st.Stop(ctx)
	_ = st.Keys.EnsureTenant(ctx, "acme")
	key, _, _ := st.Keys.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser, Name: "example"})
	_ = st.WaitKnown(ctx, key)

	q := url.Values{"workflow": {"Calc"}, "type": {"Chat"}, "text": {`call sum {"values":[2,3]}`}, "apikey": {key}}
	resp, err := http.Post(st.URL+"/api/user/rest/converse?"+q.Encode(), "", nil)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var answer struct {
		Response struct{ Text string } `json:"response"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&answer)
	fmt.Println(resp.StatusCode, answer.Response.Text)
	// Output:
	// 200 sum returned {"sum":5}
}
