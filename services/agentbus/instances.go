package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/agentbus/agentbus/pkg/inspect"
	"github.com/agentbus/agentbus/pkg/instance"
)

// instancePath is where one of the current tenant's instances is: a workflow id, or Agent or
// Agent:WorkflowType for the default activation.
func (c *cli) instancePath(workflow string) string { return c.tenantItemPath("instances", workflow) }

// instanceList prints a page of an agent's instances, newest run first.
func (c *cli) instanceList(ctx context.Context, args []string) error {
	fs := c.flags("instances list")
	status := fs.String("status", "", "only instances of this status: running, idle or completed")
	prefix := fs.String("prefix", "", "only instances whose activation name starts with this")
	before := fs.String("active-before", "", "only instances last active before this RFC 3339 time")
	after := fs.String("active-after", "", "only instances last active after this RFC 3339 time")
	limit := fs.Int("limit", 0, "at most this many instances (1-200; default the server's 50)")
	cursor := fs.String("cursor", "", "continue with older runs (the previous page's next)")
	pos, err := parse(fs, args, 1, "AGENT [--status running|idle|completed] [--prefix P] [--limit N] [--cursor C]")
	if err != nil {
		return err
	}
	query := url.Values{}
	for name, v := range map[string]string{"status": *status, "prefix": *prefix, "activeBefore": *before, "activeAfter": *after, "cursor": *cursor} {
		if v != "" {
			query.Set(name, v)
		}
	}
	if *limit != 0 {
		query.Set("limit", strconv.Itoa(*limit))
	}
	var ans instance.Page
	path := c.tenantPath() + "/agents/" + url.PathEscape(pos[0]) + "/instances"
	if printed, err := c.fetch(ctx, http.MethodGet, path, query, nil, &ans); err != nil || printed {
		return err
	}
	tw := c.table()
	fmt.Fprintln(tw, "ACTIVATION\tWORKFLOW TYPE\tSTATUS\tEVENTS\tLAST ACTIVE\tSTARTED\tRUN")
	for _, it := range ans.Instances {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", cell(it.Activation, 60), cell(it.WorkflowType, 40), it.Status, it.Events,
			shortTime(it.LastActiveAt.Time), shortTime(it.StartedAt.Time), it.RunID)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if ans.Next != "" {
		// On stderr, so that stdout stays the table alone.
		fmt.Fprintf(c.stderr, "more: agentbus instances list %s --cursor %s\n", pos[0], ans.Next)
	}
	return nil
}

// instanceShow prints what the inspector shows of an instance.
func (c *cli) instanceShow(ctx context.Context, args []string) error {
	pos, err := parse(c.flags("instances show"), args, 1, "WORKFLOW_ID")
	if err != nil {
		return err
	}
	var in inspect.InstanceView
	if printed, err := c.fetch(ctx, http.MethodGet, c.instancePath(pos[0]), nil, nil, &in); err != nil || printed {
		return err
	}
	if err := c.instanceFields(in); err != nil {
		return err
	}
	c.earlierRuns(in.EarlierRuns)
	c.recentRequests(in.RecentRequests)
	if c.section("timers", len(in.Schedules)) {
		for _, s := range in.Schedules {
			fmt.Fprintf(c.stdout, "  %s\t%s\n", cell(s.Name, 60), cell(s.Schedule, 60))
		}
	}
	if c.section("dead letters", len(in.DeadLetters)) {
		tw := c.table()
		fmt.Fprintln(tw, "  ID\tDEAD\tPARTICIPANT\tTYPE\tERROR")
		for _, l := range in.DeadLetters {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\n", l.ID, shortTime(l.DeadAt.Time), cell(l.ParticipantID, 40), cell(kindOf(l.Type, l.Method), 40), cell(l.Error, 80))
		}
		_ = tw.Flush()
	}
	if c.section("queued", len(in.Queued)) {
		for _, q := range in.Queued {
			fmt.Fprintf(c.stdout, "  %s\t%s\n", cell(q.RequestID, 80), cell(q.Reason, 120))
		}
	}
	if c.section("waiting", len(in.Waits)) {
		tw := c.table()
		fmt.Fprintln(tw, "  PARTICIPANT\tREQUEST\tWAIT\tFOR\tDEADLINE\tQUEUED")
		for _, w := range in.Waits {
			deadline := "-"
			if w.Deadline != nil {
				deadline = shortTime(w.Deadline.Time)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%d\n", cell(w.ParticipantID, 40), cell(w.RequestID, 80), cell(w.Name, 40), cell(waitsFor(w), 80), deadline, w.Held)
		}
		_ = tw.Flush()
	}
	return nil
}

// waitsFor says what ends a wait besides its deadline.
func waitsFor(w inspect.Wait) string {
	var what []string
	if w.Chat {
		what = append(what, "chat")
	}
	for _, m := range w.Methods {
		what = append(what, "data "+m)
	}
	for _, sig := range w.Signals {
		what = append(what, "signal "+sig)
	}
	if len(what) == 0 {
		return "its deadline"
	}
	return strings.Join(what, ", ")
}

// instanceFields prints an instance's own fields: its run, its times, its host and its state.
func (c *cli) instanceFields(in inspect.InstanceView) error {
	tw := c.fields()
	row := tw.row
	row("workflow", in.WorkflowID)
	row("status", in.Status)
	row("run", in.RunID)
	row("started", shortTime(in.StartedAt.Time))
	row("last active", shortTime(in.LastActiveAt.Time))
	if in.CompletedAt != nil {
		row("completed", shortTime(in.CompletedAt.Time))
	}
	row("events", strconv.FormatInt(in.Events, 10))
	host := in.Host
	if host == "" {
		host = "(no live host runs the agent)"
	}
	row("partition", strconv.Itoa(in.Partition))
	row("host", host)
	if len(in.State) > 0 && string(in.State) != "null" {
		row("state", string(in.State))
	}
	return tw.Flush()
}

// section prints a section's title when it has any of its n rows, and reports whether it has.
func (c *cli) section(title string, n int) bool {
	if n == 0 {
		return false
	}
	fmt.Fprintf(c.stdout, "\n%s:\n", title)
	return true
}

// earlierRuns prints an instance's completed runs, if any.
func (c *cli) earlierRuns(runs []instance.RunSummary) {
	if !c.section("earlier runs", len(runs)) {
		return
	}
	tw := c.table()
	fmt.Fprintln(tw, "  RUN\tSTARTED\tENDED\tEVENTS")
	for _, r := range runs {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\n", r.RunID, shortTime(r.StartedAt.Time), shortTime(r.CompletedAt.Time), r.Events)
	}
	_ = tw.Flush()
}

// recentRequests prints an instance's recent requests, if any.
func (c *cli) recentRequests(reqs []inspect.RecentRequest) {
	if !c.section("recent requests", len(reqs)) {
		return
	}
	tw := c.table()
	fmt.Fprintln(tw, "  RECEIVED\tPARTICIPANT\tTYPE\tSTATUS\tMS\tREQUEST")
	for _, r := range reqs {
		status, ms := "-", "-"
		if r.Status != 0 {
			status = strconv.Itoa(r.Status)
		}
		if r.DurationMs != nil {
			ms = strconv.FormatInt(*r.DurationMs, 10)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", shortTime(r.ReceivedAt.Time), cell(r.ParticipantID, 40), cell(kindOf(r.Type, r.Method), 40), status, ms, cell(r.RequestID, 80))
	}
	_ = tw.Flush()
}

// instanceComplete completes an instance's run; its next message starts a new one.
func (c *cli) instanceComplete(ctx context.Context, args []string) error {
	pos, err := parse(c.flags("instances complete"), args, 1, "WORKFLOW_ID")
	if err != nil {
		return err
	}
	var ans instance.CompletedRun
	if printed, err := c.fetch(ctx, http.MethodPost, c.instancePath(pos[0])+"/complete", nil, nil, &ans); err != nil || printed {
		return err
	}
	fmt.Fprintf(c.stdout, "run %s of %s completed; the next message starts a new run\n", ans.RunID, ans.WorkflowID)
	return nil
}

// instanceBackfill indexes the instance records written before the run index existed, calling
// the API until nothing remains (system admins).
func (c *cli) instanceBackfill(ctx context.Context, args []string) error {
	if _, err := parse(c.flags("instances backfill"), args, 0, ""); err != nil {
		return err
	}
	total := 0
	for {
		var ans instance.BackfillResult
		raw, err := c.call(ctx, http.MethodPost, "/api/v1/admin/instances/backfill", nil, nil, &ans)
		if err != nil {
			return err
		}
		total += ans.Indexed
		if c.json {
			c.printJSON(raw)
		} else {
			fmt.Fprintf(c.stdout, "scanned %d instance records, indexed %d, %d remaining\n", ans.Scanned, ans.Indexed, ans.Remaining)
		}
		if ans.Remaining == 0 {
			return nil
		}
	}
}
