package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// syncAnswer is the answer of send and converse: the ids and, when waited for, the reply.
type syncAnswer struct {
	MessageID  string        `json:"messageId"`
	RequestID  string        `json:"requestId"`
	WorkflowID string        `json:"workflowId"`
	ThreadID   string        `json:"threadId"`
	Response   *replyMessage `json:"response"`
}

type replyMessage struct {
	ID   string          `json:"id"`
	Text *string         `json:"text"`
	Data json.RawMessage `json:"data"`
}

// jsonFlag is a flag holding one JSON value.
type jsonFlag struct{ raw json.RawMessage }

func (f *jsonFlag) String() string { return string(f.raw) }
func (f *jsonFlag) Set(v string) error {
	if !json.Valid([]byte(v)) {
		return errors.New("not valid JSON")
	}
	f.raw = json.RawMessage(v)
	return nil
}

func (c *cli) send(ctx context.Context, args []string) error {
	fs := c.flags("send")
	agentName := fs.String("agent", "", "the agent (required)")
	activation := fs.String("activation", "default", "the activation (workflow instance)")
	wfType := fs.String("workflow-type", "", `the workflow type (default "Supervisor Workflow")`)
	participant := fs.String("participant", "", "the sending participant (required)")
	typ := fs.String("type", "", "Chat, Data, File or Webhook (default Chat, or File with --file)")
	text := fs.String("text", "", "Chat: the text; Data and Webhook: the method; File: the caption")
	var data jsonFlag
	fs.Var(&data, "data", "the JSON payload: Data parameters, Webhook body, Chat data")
	file := fs.String("file", "", "a file to send (base64-encoded; its name is the file's)")
	topic := fs.String("topic", "", "the message's topic (scope) in the thread")
	hint := fs.String("hint", "", "a processing hint for the agent")
	requestID := fs.String("request-id", "", "the request id (idempotency key)")
	wait := fs.Bool("wait", false, "wait for the agent's reply and print it")
	timeout := fs.Int("timeout", 0, "with --wait, seconds to wait (1-300; default the server's 60)")
	if _, err := parse(fs, args, 0, ""); err != nil {
		return err
	}
	if *agentName == "" || *participant == "" {
		return usageError{"send needs --agent and --participant"}
	}
	if *typ == "" {
		*typ = "Chat"
		if *file != "" {
			*typ = "File"
		}
	}
	if *file != "" && *typ != "File" {
		return usageError{"--file goes with --type File"}
	}
	body := map[string]any{
		"agentName": *agentName, "activationName": *activation, "participantId": *participant,
		"type": *typ, "text": *text,
	}
	for name, v := range map[string]string{"workflowType": *wfType, "topic": *topic, "hint": *hint, "requestId": *requestID} {
		if v != "" {
			body[name] = v
		}
	}
	if data.raw != nil {
		body["data"] = data.raw
	}
	if *file != "" {
		if data.raw != nil {
			return usageError{"give --file or --data, not both"}
		}
		content, err := os.ReadFile(*file)
		if err != nil {
			return err
		}
		name := filepath.Base(*file)
		obj := map[string]any{"content": base64.StdEncoding.EncodeToString(content), "fileName": name, "fileSize": len(content)}
		if ct := mime.TypeByExtension(filepath.Ext(name)); ct != "" {
			obj["contentType"] = ct
		}
		body["data"] = obj
	}
	query := url.Values{}
	if *wait {
		query.Set("wait", "true")
		if *timeout > 0 {
			query.Set("timeoutSeconds", strconv.Itoa(*timeout))
		}
	}
	var ans syncAnswer
	raw, err := c.call(ctx, http.MethodPost, c.tenantPath()+"/messaging/send", query, body, &ans)
	if err != nil {
		return err
	}
	if c.json {
		c.printJSON(raw)
		return nil
	}
	if !*wait {
		fmt.Fprintf(c.stdout, "accepted: message %s (request %s) to %s\n", ans.MessageID, ans.RequestID, ans.WorkflowID)
		return nil
	}
	c.printReply(ans.Response)
	return nil
}

// printReply prints a reply's text and data, each on its own line.
func (c *cli) printReply(r *replyMessage) {
	if r == nil {
		fmt.Fprintln(c.stderr, "(the agent sent no reply)")
		return
	}
	if r.Text != nil {
		fmt.Fprintln(c.stdout, *r.Text)
	}
	if d := bytes.TrimSpace(r.Data); len(d) > 0 && string(d) != "null" {
		c.printJSON(d)
	}
}

func (c *cli) converse(ctx context.Context, args []string) error {
	fs := c.flags("converse")
	workflow := fs.String("workflow", "", "the workflow: Agent, Agent:WorkflowType or a full workflow id (required)")
	typ := fs.String("type", "Chat", "Chat or Data")
	text := fs.String("text", "", "Chat: the text; Data: the method (required)")
	participant := fs.String("participant", "", `the participant (default "user")`)
	var data jsonFlag
	fs.Var(&data, "data", "Data: the method's parameters, a JSON object")
	topic := fs.String("topic", "", "the message's topic (scope) in the thread")
	hint := fs.String("hint", "", "a processing hint for the agent")
	timeout := fs.Int("timeout", 0, "seconds to wait for the reply (1-300; default the server's 60)")
	stream := fs.Bool("stream", false, "stream the reply as the agent produces it")
	if _, err := parse(fs, args, 0, ""); err != nil {
		return err
	}
	if *workflow == "" || *text == "" {
		return usageError{"converse needs --workflow and --text"}
	}
	query := url.Values{"workflow": {*workflow}, "type": {*typ}, "text": {*text}}
	for name, v := range map[string]string{"participantId": *participant, "topic": *topic, "hint": *hint} {
		if v != "" {
			query.Set(name, v)
		}
	}
	if *timeout > 0 {
		query.Set("timeoutSeconds", strconv.Itoa(*timeout))
	}
	if c.tenantSet {
		query.Set("tenantId", c.tenant)
	}
	var body io.Reader
	if data.raw != nil {
		body = bytes.NewReader(data.raw)
	}
	req, err := c.request(ctx, http.MethodPost, "/api/user/rest/converse", query, body)
	if err != nil {
		return err
	}
	if *stream {
		req.Header.Set("Accept", "text/event-stream")
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "text/event-stream" {
		return c.printStream(resp.Body)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	return c.printAnswer(raw)
}

// printAnswer prints a synchronous answer: raw with -json, else the reply.
func (c *cli) printAnswer(raw []byte) error {
	if c.json {
		c.printJSON(raw)
		return nil
	}
	var ans syncAnswer
	if err := json.Unmarshal(raw, &ans); err != nil {
		return fmt.Errorf("the answer is not the JSON expected: %w", err)
	}
	c.printReply(ans.Response)
	return nil
}

// printStream relays a streamed converse answer: the deltas as they come, then a newline; the
// final message event only when no delta came (or with -json); an error event as an error.
func (c *cli) printStream(r io.Reader) error {
	deltas := false
	var (
		final     []byte
		streamErr error
	)
	err := readEvents(r, func(ev sseEvent) bool {
		switch ev.Event {
		case "delta":
			var d struct {
				Delta string `json:"delta"`
			}
			if json.Unmarshal([]byte(ev.Data), &d) == nil && !c.json {
				fmt.Fprint(c.stdout, d.Delta)
				deltas = true
			}
		case "message":
			final = []byte(ev.Data)
			return false
		case "error":
			final = nil
			var p struct {
				Title  string `json:"title"`
				Status int    `json:"status"`
				Detail string `json:"detail"`
			}
			_ = json.Unmarshal([]byte(ev.Data), &p)
			if p.Title == "" {
				p.Title = http.StatusText(p.Status)
			}
			streamErr = &apiError{Status: p.Status, Title: p.Title, Detail: p.Detail}
			return false
		}
		return true
	})
	if deltas {
		fmt.Fprintln(c.stdout)
	}
	if streamErr != nil {
		return streamErr
	}
	if err != nil {
		return fmt.Errorf("the stream broke off: %w", err)
	}
	if final == nil {
		return errors.New("the stream ended without an answer")
	}
	if deltas && !c.json {
		return nil
	}
	return c.printAnswer(final)
}

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	ID, Event, Data string
	// Comment is the text of a comment line (": …"), delivered as an event of its own.
	Comment string
}

// readEvents reads Server-Sent Events from r and calls f with each, and with each comment,
// until f returns false or r ends (nil at a clean end).
func readEvents(r io.Reader, f func(sseEvent) bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxAnswer)
	var (
		ev   sseEvent
		data []string
		has  bool
	)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if has {
				if ev.Event == "" {
					ev.Event = "message"
				}
				ev.Data = strings.Join(data, "\n")
				if !f(ev) {
					return nil
				}
			}
			ev, data, has = sseEvent{}, nil, false
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "":
			if !f(sseEvent{Comment: value}) {
				return nil
			}
		case "event":
			ev.Event, has = value, true
		case "data":
			data, has = append(data, value), true
		case "id":
			ev.ID, has = value, true
		}
	}
	return sc.Err()
}
