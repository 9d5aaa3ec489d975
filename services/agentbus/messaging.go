package main

import (
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

	"github.com/agentbus/agentbus/pkg/history"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/sse"
)

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
	o, err := c.parseSend(args)
	if err != nil {
		return err
	}
	body, err := o.body()
	if err != nil {
		return err
	}
	var ans history.SyncAnswer
	if printed, err := c.fetch(ctx, http.MethodPost, c.tenantPath()+"/messaging/send", o.query(), body, &ans); err != nil || printed {
		return err
	}
	if !o.wait {
		fmt.Fprintf(c.stdout, "accepted: message %s (request %s) to %s\n", ans.MessageID, ans.RequestID, ans.WorkflowID)
		return nil
	}
	c.printReply(ans.Response)
	return nil
}

// sendOptions are the flags of send.
type sendOptions struct {
	agent, activation, workflowType, participant string
	typ, text                                    string
	data                                         jsonFlag
	file, topic, hint, requestID                 string
	wait                                         bool
	timeout                                      int
}

// parseSend parses the flags of send and checks them: an agent and a participant are required,
// the type defaults to Chat (File with --file), and --file goes with type File only.
func (c *cli) parseSend(args []string) (*sendOptions, error) {
	fs := c.flags("send")
	var o sendOptions
	fs.StringVar(&o.agent, "agent", "", "the agent (required)")
	fs.StringVar(&o.activation, "activation", "default", "the activation (workflow instance)")
	fs.StringVar(&o.workflowType, "workflow-type", "", `the workflow type (default "Supervisor Workflow")`)
	fs.StringVar(&o.participant, "participant", "", "the sending participant (required)")
	fs.StringVar(&o.typ, "type", "", "Chat, Data, File or Webhook (default Chat, or File with --file)")
	fs.StringVar(&o.text, "text", "", "Chat: the text; Data and Webhook: the method; File: the caption")
	fs.Var(&o.data, "data", "the JSON payload: Data parameters, Webhook body, Chat data")
	fs.StringVar(&o.file, "file", "", "a file to send (base64-encoded; its name is the file's)")
	fs.StringVar(&o.topic, "topic", "", "the message's topic (scope) in the thread")
	fs.StringVar(&o.hint, "hint", "", "a processing hint for the agent")
	fs.StringVar(&o.requestID, "request-id", "", "the request id (idempotency key)")
	fs.BoolVar(&o.wait, "wait", false, "wait for the agent's reply and print it")
	fs.IntVar(&o.timeout, "timeout", 0, "with --wait, seconds to wait (1-300; default the server's 60)")
	if _, err := parse(fs, args, 0, ""); err != nil {
		return nil, err
	}
	if o.agent == "" || o.participant == "" {
		return nil, usageError{"send needs --agent and --participant"}
	}
	if o.typ == "" {
		o.typ = "Chat"
		if o.file != "" {
			o.typ = "File"
		}
	}
	if o.file != "" && o.typ != "File" {
		return nil, usageError{"--file goes with --type File"}
	}
	return &o, nil
}

// body returns the request body of send: the message, with the file read and base64-encoded
// as its data when one is given.
func (o *sendOptions) body() (map[string]any, error) {
	body := map[string]any{
		"agentName": o.agent, "activationName": o.activation, "participantId": o.participant,
		"type": o.typ, "text": o.text,
	}
	for name, v := range map[string]string{"workflowType": o.workflowType, "topic": o.topic, "hint": o.hint, "requestId": o.requestID} {
		if v != "" {
			body[name] = v
		}
	}
	if o.data.raw != nil {
		body["data"] = o.data.raw
	}
	if o.file != "" {
		if o.data.raw != nil {
			return nil, usageError{"give --file or --data, not both"}
		}
		obj, err := fileData(o.file)
		if err != nil {
			return nil, err
		}
		body["data"] = obj
	}
	return body, nil
}

// fileData reads the file at path and returns it as a File message's data: its content
// base64-encoded, its name and size, and its content type when its extension tells it.
func fileData(path string) (map[string]any, error) {
	content, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	name := filepath.Base(path)
	obj := map[string]any{"content": base64.StdEncoding.EncodeToString(content), "fileName": name, "fileSize": len(content)}
	if ct := mime.TypeByExtension(filepath.Ext(name)); ct != "" {
		obj["contentType"] = ct
	}
	return obj, nil
}

// query returns the query of send: with --wait, wait and the timeout if one is given.
func (o *sendOptions) query() url.Values {
	query := url.Values{}
	if o.wait {
		query.Set("wait", "true")
		if o.timeout > 0 {
			query.Set("timeoutSeconds", strconv.Itoa(o.timeout))
		}
	}
	return query
}

// printReply prints a reply's text and data, each on its own line.
func (c *cli) printReply(r *history.Reply) {
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
	var ans history.SyncAnswer
	if err := json.Unmarshal(raw, &ans); err != nil {
		return fmt.Errorf("the answer is not the JSON expected: %w", err)
	}
	c.printReply(ans.Response)
	return nil
}

// printStream relays a streamed converse answer: the deltas as they come, then a newline; the
// final message event only when no delta came (or with -json); an error event as an error. A
// restart event after deltas (the handler runs again and streams its answer from the beginning)
// ends their line, with a note on stderr: the new attempt's deltas follow on a line of their own.
func (c *cli) printStream(r io.Reader) error {
	deltas := false
	var (
		final     []byte
		streamErr error
	)
	err := readEvents(r, func(ev sse.Event) bool {
		switch ev.Event {
		case "delta":
			var d history.StreamDelta
			if json.Unmarshal([]byte(ev.Data), &d) == nil && !c.json {
				fmt.Fprint(c.stdout, d.Delta)
				deltas = true
			}
		case "restart":
			if deltas {
				var rs history.StreamRestart
				_ = json.Unmarshal([]byte(ev.Data), &rs)
				fmt.Fprintln(c.stdout)
				fmt.Fprintf(c.stderr, "the handler runs again (attempt %d): its answer starts over\n", rs.Attempt)
				deltas = false
			}
		case "message":
			final = []byte(ev.Data)
			return false
		case "error":
			final = nil
			var p problem.Body
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

// readEvents reads Server-Sent Events from r and calls f with each, and with each comment
// (Event empty), until f returns false or r ends (nil at a clean end).
func readEvents(r io.Reader, f func(sse.Event) bool) error {
	rd := sse.NewReaderSize(r, maxAnswer)
	rd.KeepComments = true
	return rd.Each(f)
}
