package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/msgkind"
	"github.com/agentbus/agentbus/pkg/retry"
	"github.com/agentbus/agentbus/pkg/sse"
)

// Reconnection delays of tail.
const (
	tailFirstRetry = time.Second
	tailMaxRetry   = 30 * time.Second
)

// tailPolicy paces tail's reconnections: 1 s doubling up to 30 s, for as long as tail runs.
var tailPolicy = retry.Policy{First: tailFirstRetry, Max: tailMaxRetry}

// tail follows a thread's listen stream and prints one line per message until ctx ends; when
// the stream breaks it reconnects with Last-Event-ID, so that no message is missed.
func (c *cli) tail(ctx context.Context, args []string) error {
	fs := c.flags("tail")
	instance := newInstanceFlags(fs)
	participant := fs.String("participant", "", "the participant of the thread (required)")
	if _, err := parse(fs, args, 0, ""); err != nil {
		return err
	}
	query, err := instance.query()
	if err != nil {
		return err
	}
	if *participant == "" {
		return usageError{"tail needs --participant"}
	}
	query.Set("participantId", *participant)
	if _, err := c.request(ctx, http.MethodGet, "/", nil, nil); err != nil {
		return err // no key or a bad URL: retrying cannot help
	}

	t := &tailer{cli: c, query: query}
	tries := tailPolicy.Start()
	for {
		connected, err := t.listen(ctx)
		if ctx.Err() != nil {
			return nil // Ctrl-C: the normal way out
		}
		var ae *apiError
		if errors.As(err, &ae) && ae.Status < 500 && ae.Status != http.StatusTooManyRequests {
			return err // retrying cannot help
		}
		if connected {
			tries.Reset()
		}
		why := "the stream ended"
		if err != nil {
			why = err.Error()
		}
		wait, _ := tries.Failed()
		fmt.Fprintf(c.stderr, "tail: %s; reconnecting in %s\n", why, wait)
		if retry.Sleep(ctx, wait) != nil {
			return nil
		}
	}
}

// threadQuery names the workflow of a history call.
func threadQuery(workflow, agentName, activation, wfType string) (url.Values, error) {
	q := url.Values{}
	switch {
	case workflow != "" && agentName != "":
		return nil, usageError{"give --workflow or --agent, not both"}
	case workflow != "":
		parts := strings.Split(workflow, ":")
		switch len(parts) {
		case 4:
			q.Set("workflowId", workflow)
		case 2:
			q.Set("agentName", parts[0])
			q.Set("workflowType", parts[1])
			q.Set("activationName", "default")
		case 1:
			q.Set("agentName", workflow)
			q.Set("activationName", "default")
		default:
			return nil, usageError{"--workflow is Agent, Agent:WorkflowType or tenant:agent:workflowType:activation"}
		}
	case agentName != "":
		q.Set("agentName", agentName)
		q.Set("activationName", activation)
		if wfType != "" {
			q.Set("workflowType", wfType)
		}
	default:
		return nil, usageError{"give --workflow or --agent"}
	}
	return q, nil
}

// tailer is one tail: the thread and the last message it printed.
type tailer struct {
	*cli
	query     url.Values
	lastID    string
	listening bool
}

// listen reads the stream once; connected reports whether it got as far as the stream.
func (t *tailer) listen(ctx context.Context) (connected bool, err error) {
	req, err := t.request(ctx, http.MethodGet, t.tenantPath()+"/messaging/listen", t.query, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if t.lastID != "" {
		req.Header.Set("Last-Event-ID", t.lastID)
	}
	resp, err := t.do(req)
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return false, err
		}
		var ae *apiError
		if errors.As(err, &ae) {
			return false, err
		}
		return false, fmt.Errorf("connecting: %w", err)
	}
	defer resp.Body.Close()
	if !t.listening {
		fmt.Fprintf(t.stderr, "tail: listening to %s (Ctrl-C to stop)\n", t.describe())
		t.listening = true
	} else {
		fmt.Fprintln(t.stderr, "tail: reconnected")
	}
	err = readEvents(resp.Body, func(ev sse.Event) bool {
		if strings.HasPrefix(ev.Comment, "last-event-id not found") {
			fmt.Fprintln(t.stderr, "tail: warning: the last message seen is no longer in the thread; messages may have been missed")
		}
		if ev.Event != "message" || ev.Data == "" {
			return true
		}
		if ev.ID != "" {
			t.lastID = ev.ID
		}
		t.print([]byte(ev.Data))
		return true
	})
	return true, err
}

// describe names the thread for people.
func (t *tailer) describe() string {
	wf := t.query.Get("workflowId")
	if wf == "" {
		wf = t.query.Get("agentName") + " / " + t.query.Get("activationName")
		if ty := t.query.Get("workflowType"); ty != "" {
			wf += " (" + ty + ")"
		}
	}
	return fmt.Sprintf("%s, participant %s, tenant %s", wf, t.query.Get("participantId"), t.tenant)
}

// print prints one message: with -json as it came, else as
// "time arrow type text data", the arrow → for messages to the agent and ← for its replies.
func (t *tailer) print(raw []byte) {
	if t.json {
		t.printJSON(raw)
		return
	}
	var m history.Message
	if err := json.Unmarshal(raw, &m); err != nil {
		fmt.Fprintf(t.stderr, "tail: a message could not be read: %v\n", err)
		return
	}
	arrow := "→"
	if m.Direction == history.Out {
		arrow = "←"
	}
	typ := msgkind.OfHistory(m.MessageType).Name
	when := m.CreatedAt.Local().Format("2006-01-02 15:04:05.000")
	var parts []string
	if m.Scope != "" {
		parts = append(parts, "["+m.Scope+"]")
	}
	if m.Text != nil {
		parts = append(parts, strings.NewReplacer("\r", `\r`, "\n", `\n`).Replace(*m.Text))
	}
	if d := bytes.TrimSpace(m.Data); len(d) > 0 && string(d) != "null" {
		var buf bytes.Buffer
		if json.Compact(&buf, d) == nil {
			d = buf.Bytes()
		}
		parts = append(parts, string(d))
	}
	fmt.Fprintf(t.stdout, "%s %s %-7s %s\n", when, arrow, typ, strings.Join(parts, " "))
}
