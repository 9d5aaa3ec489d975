package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode"

	"github.com/agentbus/agentbus/pkg/deadletter"
)

// deadLettersPath is where the current tenant's dead letters are, or with id one of them.
func (c *cli) deadLettersPath(id string) string { return c.tenantItemPath("deadletters", id) }

// tenantItemPath is the current tenant's collection of that name, or with id one item of it.
func (c *cli) tenantItemPath(collection, id string) string {
	p := c.tenantPath() + "/" + collection
	if id != "" {
		p += "/" + url.PathEscape(id)
	}
	return p
}

func (c *cli) deadLetterList(ctx context.Context, args []string) error {
	fs := c.flags("deadletter list")
	agentName := fs.String("agent", "", "only the dead letters of this agent")
	after := fs.Uint64("after", 0, "continue after this dead letter id (the previous page's next)")
	limit := fs.Int("limit", 0, "at most this many dead letters (1-200; default the server's 50)")
	if _, err := parse(fs, args, 0, ""); err != nil {
		return err
	}
	query := url.Values{}
	if *agentName != "" {
		query.Set("agent", *agentName)
	}
	if *after != 0 {
		query.Set("after", strconv.FormatUint(*after, 10))
	}
	if *limit != 0 {
		query.Set("limit", strconv.Itoa(*limit))
	}
	var ans deadletter.Page
	if printed, err := c.fetch(ctx, http.MethodGet, c.deadLettersPath(""), query, nil, &ans); err != nil || printed {
		return err
	}
	tw := c.table()
	fmt.Fprintln(tw, "ID\tDEAD\tAGENT\tWORKFLOW\tPARTICIPANT\tTYPE\tATTEMPTS\tERROR")
	for _, l := range ans.DeadLetters {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", l.ID, shortTime(l.DeadAt.Time), cell(l.AgentName, 40), cell(l.WorkflowID, 80),
			cell(l.ParticipantID, 40), cell(kindOf(l.Type, l.Method), 40), l.Attempts, cell(l.Error, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if ans.Next != 0 {
		// On stderr, so that stdout stays the table alone.
		fmt.Fprintf(c.stderr, "more: agentbus deadletter list --after %d\n", ans.Next)
	}
	return nil
}

func (c *cli) deadLetterShow(ctx context.Context, args []string) error {
	pos, err := parse(c.flags("deadletter show"), args, 1, "ID")
	if err != nil {
		return err
	}
	var l deadletter.Letter
	if printed, err := c.fetch(ctx, http.MethodGet, c.deadLettersPath(pos[0]), nil, nil, &l); err != nil || printed {
		return err
	}
	tw := c.fields()
	row := tw.row
	row("id", strconv.FormatUint(l.ID, 10))
	row("tenant", l.TenantID)
	row("agent", l.AgentName)
	row("workflow", l.WorkflowID)
	row("participant", l.ParticipantID)
	row("request", l.RequestID)
	row("type", l.Type)
	row("method", l.Method)
	row("attempts", strconv.Itoa(l.Attempts))
	row("received", shortTime(l.ReceivedAt.Time))
	row("dead", shortTime(l.DeadAt.Time))
	row("error", l.Error)
	row("text", l.Text)
	if len(l.Params) > 0 {
		b, _ := json.Marshal(l.Params)
		row("params", string(b))
	}
	row("data", string(l.Data))
	if l.BodySize > 0 {
		row("body", fmt.Sprintf("%d bytes (not shown)", l.BodySize))
	}
	return tw.Flush()
}

func (c *cli) deadLetterReplay(ctx context.Context, args []string) error {
	pos, err := parse(c.flags("deadletter replay"), args, 1, "ID")
	if err != nil {
		return err
	}
	var ans deadletter.Replayed
	if printed, err := c.fetch(ctx, http.MethodPost, c.deadLettersPath(pos[0])+"/replay", nil, nil, &ans); err != nil || printed {
		return err
	}
	fmt.Fprintf(c.stdout, "dead letter %d replayed: request %s to %s\n", ans.Replayed, ans.RequestID, ans.WorkflowID)
	return nil
}

func (c *cli) deadLetterDiscard(ctx context.Context, args []string) error {
	pos, err := parse(c.flags("deadletter discard"), args, 1, "ID")
	if err != nil {
		return err
	}
	if _, err := c.call(ctx, http.MethodDelete, c.deadLettersPath(pos[0]), nil, nil, nil); err != nil {
		return err
	}
	if !c.json {
		fmt.Fprintf(c.stdout, "dead letter %s discarded\n", pos[0])
	}
	return nil
}

// kindOf is a message's type, with its method when it has one: "Data/sum".
func kindOf(typ, method string) string {
	if method == "" {
		return typ
	}
	return typ + "/" + method
}

// cell makes a value that a handler chose (an error, a panic's value, a name) fit one table
// cell: one line of at most n bytes, without control characters, which would otherwise reach
// the operator's terminal as escape sequences.
func cell(s string, n int) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, oneLine(s, n))
}
