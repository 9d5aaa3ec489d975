package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/agentbus/agentbus/pkg/subscription"
)

// listFlag is a flag that may be repeated, each value a comma-separated list.
type listFlag []string

func (f *listFlag) String() string { return strings.Join(*f, ",") }
func (f *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*f = append(*f, s)
		}
	}
	return nil
}

// subscriptionsPath is where the current tenant's subscriptions are, or with id one of them.
func (c *cli) subscriptionsPath(id string) string { return c.tenantItemPath("subscriptions", id) }

// undeliveredPath is where a subscription's undelivered events are, or with event one of them.
func (c *cli) undeliveredPath(id, event string) string {
	p := c.subscriptionsPath(id) + "/undelivered"
	if event != "" {
		p += "/" + url.PathEscape(event)
	}
	return p
}

// subscriptionCreate subscribes the receiver URL to the tenant's events.
func (c *cli) subscriptionCreate(ctx context.Context, args []string) error {
	fs := c.flags("subscription create")
	var events, agents listFlag
	fs.Var(&events, "events", "the event types, comma-separated: message.incoming, message.outgoing, deadletter.created (required)")
	fs.Var(&agents, "agent", "only the events of this agent; repeat it, or separate by commas (default every agent)")
	description := fs.String("description", "", "a description, to recognise the subscription in lists")
	secret := fs.String("secret", "", "the signing secret, whsec_ and a base64 key of 24 to 64 bytes (default a new one)")
	// The receiver is an argument: -url is the global flag naming the ingress.
	pos, err := parse(fs, args, 1, "URL --events E[,E...] [--agent A]... [--description D] [--secret whsec_...]")
	if err != nil {
		return err
	}
	if len(events) == 0 {
		return usageError{"subscription create needs --events"}
	}
	in := map[string]any{"url": pos[0], "events": events}
	if len(agents) > 0 {
		in["agents"] = agents
	}
	if *description != "" {
		in["description"] = *description
	}
	if *secret != "" {
		in["secret"] = *secret
	}
	var s subscription.Subscription
	raw, err := c.call(ctx, http.MethodPost, c.subscriptionsPath(""), nil, in, &s)
	if err != nil {
		return err
	}
	// As a new key: the secret alone on stdout, so that it can be captured, and what it signs on
	// stderr.
	fmt.Fprintf(c.stderr, "subscription %s created: %s to %s.\n"+
		"warning: the signing secret is shown only this once; store it now, it cannot be read again.\n",
		s.ID, strings.Join(s.Events, ", "), cell(s.URL, 4096))
	if c.json {
		c.printJSON(raw)
		return nil
	}
	fmt.Fprintln(c.stdout, s.Secret)
	return nil
}

func (c *cli) subscriptionList(ctx context.Context, args []string) error {
	if _, err := parse(c.flags("subscription list"), args, 0, ""); err != nil {
		return err
	}
	var ans subscription.List
	if printed, err := c.fetch(ctx, http.MethodGet, c.subscriptionsPath(""), nil, nil, &ans); err != nil || printed {
		return err
	}
	tw := c.table()
	fmt.Fprintln(tw, "ID\tURL\tEVENTS\tAGENTS\tCREATED\tDESCRIPTION")
	for _, s := range ans.Subscriptions {
		agents := "*"
		if len(s.Agents) > 0 {
			agents = strings.Join(s.Agents, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, cell(s.URL, 80), strings.Join(s.Events, ","), cell(agents, 60),
			shortTime(s.CreatedAt.Time), cell(s.Description, 60))
	}
	return tw.Flush()
}

func (c *cli) subscriptionGet(ctx context.Context, args []string) error {
	pos, err := parse(c.flags("subscription get"), args, 1, "ID")
	if err != nil {
		return err
	}
	var s subscription.Subscription
	if printed, err := c.fetch(ctx, http.MethodGet, c.subscriptionsPath(pos[0]), nil, nil, &s); err != nil || printed {
		return err
	}
	tw := c.fields()
	row := tw.row
	row("id", s.ID)
	row("tenant", s.TenantID)
	row("url", s.URL)
	row("events", strings.Join(s.Events, ", "))
	agents := "every agent"
	if len(s.Agents) > 0 {
		agents = strings.Join(s.Agents, ", ")
	}
	row("agents", agents)
	row("description", s.Description)
	row("created", shortTime(s.CreatedAt.Time))
	return tw.Flush()
}

func (c *cli) subscriptionDelete(ctx context.Context, args []string) error {
	pos, err := parse(c.flags("subscription delete"), args, 1, "ID")
	if err != nil {
		return err
	}
	if _, err := c.call(ctx, http.MethodDelete, c.subscriptionsPath(pos[0]), nil, nil, nil); err != nil {
		return err
	}
	if !c.json {
		fmt.Fprintf(c.stdout, "subscription %s deleted, with its undelivered events\n", pos[0])
	}
	return nil
}

func (c *cli) subscriptionUndelivered(ctx context.Context, args []string) error {
	fs := c.flags("subscription undelivered")
	after := fs.Uint64("after", 0, "continue after this event id (the previous page's next)")
	limit := fs.Int("limit", 0, "at most this many events (1-200; default the server's 50)")
	pos, err := parse(fs, args, 1, "ID [--after N] [--limit N]")
	if err != nil {
		return err
	}
	query := url.Values{}
	if *after != 0 {
		query.Set("after", strconv.FormatUint(*after, 10))
	}
	if *limit != 0 {
		query.Set("limit", strconv.Itoa(*limit))
	}
	var ans subscription.UndeliveredPage
	if printed, err := c.fetch(ctx, http.MethodGet, c.undeliveredPath(pos[0], ""), query, nil, &ans); err != nil || printed {
		return err
	}
	tw := c.table()
	fmt.Fprintln(tw, "ID\tFAILED\tEVENT\tTYPE\tATTEMPTS\tERROR")
	for _, e := range ans.Events {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\n", e.ID, shortTime(e.FailedAt.Time), cell(e.EventID, 80), cell(e.Type, 40), e.Attempts, cell(e.Error, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if ans.Next != 0 {
		// On stderr, so that stdout stays the table alone.
		fmt.Fprintf(c.stderr, "more: agentbus subscription undelivered %s --after %d\n", pos[0], ans.Next)
	}
	return nil
}

func (c *cli) subscriptionReplay(ctx context.Context, args []string) error {
	pos, err := parse(c.flags("subscription replay"), args, 2, "ID EVENT_ID")
	if err != nil {
		return err
	}
	var ans subscription.Replayed
	if printed, err := c.fetch(ctx, http.MethodPost, c.undeliveredPath(pos[0], pos[1])+"/replay", nil, nil, &ans); err != nil || printed {
		return err
	}
	fmt.Fprintf(c.stdout, "event %d (%s, %s) delivered and removed\n", ans.Event.ID, cell(ans.Event.EventID, 80), cell(ans.Event.Type, 40))
	return nil
}

func (c *cli) subscriptionDiscard(ctx context.Context, args []string) error {
	pos, err := parse(c.flags("subscription discard"), args, 2, "ID EVENT_ID")
	if err != nil {
		return err
	}
	if _, err := c.call(ctx, http.MethodDelete, c.undeliveredPath(pos[0], pos[1]), nil, nil, nil); err != nil {
		return err
	}
	if !c.json {
		fmt.Fprintf(c.stdout, "event %s discarded\n", pos[1])
	}
	return nil
}
