package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/stack"
)

// exampleStack serves agents on an in-process stack and returns a user key of tenant acme.
func exampleStack(ctx context.Context, agents ...*agent.Agent) (st *stack.Stack, key string, stop func()) {
	dir, _ := os.MkdirTemp("", "example")
	st, err := stack.Start(ctx, stack.Config{DataDir: dir, HTTPAddr: "127.0.0.1:0", Agents: agents})
	if err != nil {
		panic(err)
	}
	_ = st.Keys.EnsureTenant(ctx, "acme")
	key, _, _ = st.Keys.Create(ctx, keys.NewKey{Tenant: "acme", Role: keys.RoleUser, Name: "example"})
	_ = st.WaitKnown(ctx, key)
	return st, key, func() { _ = st.Stop(ctx); _ = os.RemoveAll(dir) }
}

// converseData calls a Data method as a client does, as participant ada, and returns the reply's
// data.
func converseData(st *stack.Stack, key, agentName, method, params string) string {
	q := url.Values{"workflow": {agentName}, "type": {"Data"}, "text": {method}, "participantId": {"ada"}, "apikey": {key}}
	resp, err := http.Post(st.URL+"/api/user/rest/converse?"+q.Encode(), "application/json", strings.NewReader(params))
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var answer struct {
		Response struct {
			Data json.RawMessage `json:"data"`
		} `json:"response"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&answer)
	return string(answer.Response.Data)
}

// postedTo waits up to five seconds for an outgoing message whose text starts with prefix in
// ada's thread, and returns its text.
func postedTo(st *stack.Stack, key, agentName, prefix string) string {
	q := url.Values{"agentName": {agentName}, "activationName": {"default"}, "participantId": {"ada"}, "apikey": {key}}
	for range 100 {
		resp, err := http.Get(st.URL + "/api/v1/admin/tenants/acme/messaging/history?" + q.Encode())
		if err != nil {
			panic(err)
		}
		var page struct {
			Messages []struct {
				Direction int     `json:"direction"`
				Text      *string `json:"text"`
			} `json:"messages"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		for _, m := range page.Messages {
			if m.Direction == 1 && m.Text != nil && strings.HasPrefix(*m.Text, prefix) {
				return *m.Text
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "(nothing posted)"
}

// A handler posts to the caller's thread on its own (Agent2User), besides its reply: here right
// away, in practice when slow work is done. The thread's followers see the post at once.
func ExampleInstance_Post() {
	reports := agent.New("Reports")
	agent.Method(reports, "start", func(ctx context.Context, _ struct{}) (map[string]string, error) {
		inst := agent.MessageFrom(ctx).Instance()
		if err := inst.Post(ctx, agent.Post{Text: "Your report is ready."}); err != nil {
			return nil, err
		}
		return map[string]string{"status": "started"}, nil
	})
	ctx := context.Background()
	st, key, stop := exampleStack(ctx, reports)
	defer stop()

	fmt.Println(converseData(st, key, "Reports", "start", `{}`))
	fmt.Println(postedTo(st, key, "Reports", "Your report"))
	// Output:
	// {"status":"started"}
	// Your report is ready.
}

// A handler sets a timer; when it is due, its message comes back to the instance like any other
// request of the conversation, and the handler, seeing Message.Timer, posts the reminder.
func ExampleInstance_Schedule() {
	alarm := agent.New("Alarm")
	agent.Method(alarm, "remind", func(ctx context.Context, in struct{ Text string }) (map[string]string, error) {
		m := agent.MessageFrom(ctx)
		if m.Timer != "" {
			return nil, m.Instance().Post(ctx, agent.Post{Text: "Reminder: " + in.Text})
		}
		err := m.Instance().Schedule(ctx, agent.Timer{Name: "remind", After: 200 * time.Millisecond, Method: "remind", Data: in})
		return map[string]string{"scheduled": in.Text}, err
	})
	ctx := context.Background()
	st, key, stop := exampleStack(ctx, alarm)
	defer stop()

	fmt.Println(converseData(st, key, "Alarm", "remind", `{"Text":"stretch"}`))
	fmt.Println(postedTo(st, key, "Alarm", "Reminder"))
	// Output:
	// {"scheduled":"stretch"}
	// Reminder: stretch
}

// A handler calls a Data method of another agent's instance of the same tenant (Agent2Agent) and
// waits for its reply. The callee sees the caller as participant "agent:front".
func ExampleInstance_Call() {
	back := agent.New("Back")
	agent.Method(back, "double", func(ctx context.Context, in struct{ N int }) (map[string]any, error) {
		return map[string]any{"n": 2 * in.N, "caller": agent.MessageFrom(ctx).ParticipantID}, nil
	})
	front := agent.New("Front")
	agent.Method(front, "quadruple", func(ctx context.Context, in struct{ N int }) (map[string]int, error) {
		var out struct{ N int }
		inst := agent.MessageFrom(ctx).Instance()
		if err := inst.Call(ctx, agent.Peer{Agent: "Back"}, "double", in, &out); err != nil {
			return nil, err
		}
		if err := inst.Call(ctx, agent.Peer{Agent: "Back"}, "double", out, &out); err != nil {
			return nil, err
		}
		return map[string]int{"n": out.N}, nil
	})
	ctx := context.Background()
	st, key, stop := exampleStack(ctx, front, back)
	defer stop()

	fmt.Println(converseData(st, key, "Front", "quadruple", `{"N":5}`))
	fmt.Println(converseData(st, key, "Back", "double", `{"N":1}`))
	// Output:
	// {"n":20}
	// {"caller":"ada","n":2}
}
