package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/inspect"
	"github.com/agentbus/agentbus/pkg/timefmt"
)

// hosts prints the live workflow hosts and each agent's backlog per partition: every host and
// agent for a system admin, those of the agents the tenant may use when a tenant is named
// (-tenant or AGENTBUS_TENANT).
func (c *cli) hosts(ctx context.Context, args []string) error {
	fs := c.flags("hosts")
	all := fs.Bool("all", false, "list every partition, also those with nothing waiting or in flight")
	if _, err := parse(fs, args, 0, ""); err != nil {
		return err
	}
	path := "/api/v1/admin/hosts"
	if c.tenantSet {
		path = c.tenantPath() + "/hosts"
	}
	var ans inspect.Hosts
	if printed, err := c.fetch(ctx, http.MethodGet, path, nil, nil, &ans); err != nil || printed {
		return err
	}
	tw := c.table()
	fmt.Fprintln(tw, "HOST\tIN FLIGHT\tHEARTBEAT\tAGENTS\tPARTITIONS")
	for _, h := range ans.Hosts {
		inFlight := "?"
		if h.InFlight != nil {
			inFlight = strconv.Itoa(*h.InFlight)
		}
		id := h.ID
		if h.Leaving {
			id += " (leaving)"
		}
		var parts []string
		for _, a := range slices.Sorted(maps.Keys(h.Partitions)) {
			parts = append(parts, a+":"+ranges(h.Partitions[a]))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s ago\t%s\t%s\n", cell(id, 80), inFlight, age(h.HeartbeatAgeMs), cell(strings.Join(h.Agents, ","), 120),
			cell(strings.Join(parts, " "), 200))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout)
	tw = c.table()
	fmt.Fprintln(tw, "AGENT\tPARTITION\tHOLDERS\tPENDING\tACK PENDING\tREDELIVERED")
	for _, a := range ans.Agents {
		for _, p := range a.Partitions {
			if !*all && p.Pending == 0 && p.AckPending == 0 {
				continue
			}
			holders := strings.Join(p.Holders, ",")
			if p.NoConsumer {
				holders = "(not consumed yet)"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\n", cell(a.Agent, 40), p.Partition, cell(holders, 120), p.Pending, p.AckPending, p.Redelivered)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return c.tenantQueues(ans)
}

// tenantQueues prints what the hosts hold of each tenant's requests of each agent, when they
// hold any.
func (c *cli) tenantQueues(ans inspect.Hosts) error {
	var rows []inspect.TenantQueue
	for _, a := range ans.Agents {
		rows = append(rows, a.Tenants...)
	}
	if len(rows) == 0 {
		return nil
	}
	fmt.Fprintln(c.stdout)
	tw := c.table()
	fmt.Fprintln(tw, "AGENT\tTENANT\tQUEUED\tRUNNING\tOLDEST\tMAX QUEUED\tMAX CONCURRENT\tCROWDING")
	for _, q := range rows {
		oldest := "-"
		if q.Queued > 0 {
			oldest = age(q.OldestWaitMs)
		}
		crowding := "-"
		if q.Crowding {
			crowding = "yes: new calls refused"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", cell(q.Agent, 40), q.Tenant, q.Queued, q.Running, oldest,
			orNone(int64(q.MaxQueued), itoa), orNone(int64(q.MaxConcurrent), itoa), crowding)
	}
	return tw.Flush()
}

// ranges writes sorted partitions as runs: 0-3,7.
func ranges(ps []int) string {
	ps = slices.Sorted(slices.Values(ps))
	var out []string
	for i := 0; i < len(ps); {
		j := i
		for j+1 < len(ps) && ps[j+1] == ps[j]+1 {
			j++
		}
		if j > i {
			out = append(out, fmt.Sprintf("%d-%d", ps[i], ps[j]))
		} else {
			out = append(out, strconv.Itoa(ps[i]))
		}
		i = j + 1
	}
	return strings.Join(out, ",")
}

// age shows milliseconds as a short duration: 850ms, 3.2s, 4m10s.
func age(ms int64) string {
	d := time.Duration(max(ms, 0)) * time.Millisecond
	switch {
	case d < time.Second:
		return d.String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// why says what a queued request does or waits for.
func why(r inspect.QueuedRequest, now time.Time) string {
	since := func(t *timefmt.Time) string {
		if t == nil {
			return ""
		}
		return " for " + age(now.Sub(t.Time).Milliseconds())
	}
	switch r.Reason {
	case "":
		return r.State + since(r.Since)
	case "retry-backoff":
		if r.Until == nil {
			return "held: retry backoff"
		}
		return "held: retry backoff, again in " + age(r.Until.Sub(now).Milliseconds())
	case "waiting-for-call":
		if r.Call == nil {
			return "held: waiting for a call" + since(r.Since)
		}
		return fmt.Sprintf("held: waiting for %s of %s%s", r.Call.Method, r.Call.WorkflowID, since(r.Since))
	case "earlier-request-elsewhere":
		return fmt.Sprintf("held: request #%d still held elsewhere", r.EarlierSequence)
	case "behind-earlier-request":
		return fmt.Sprintf("queued behind #%d", r.EarlierSequence)
	case "waiting-for-slot":
		return "queued: the host runs all the handlers it may"
	default:
		return r.State + ": " + r.Reason
	}
}

// instanceQueuePath is the queue of one of the current tenant's instances.
func (c *cli) instanceQueuePath(workflow string) string {
	return c.tenantItemPath("instances", workflow) + "/queue"
}

// instanceQueue prints the requests waiting for an instance, by conversation, and why each
// waits.
func (c *cli) instanceQueue(ctx context.Context, args []string) error {
	pos, err := parse(c.flags("instances queue"), args, 1, "WORKFLOW_ID")
	if err != nil {
		return err
	}
	var ans inspect.InstanceQueue
	if printed, err := c.fetch(ctx, http.MethodGet, c.instanceQueuePath(pos[0]), nil, nil, &ans); err != nil || printed {
		return err
	}
	owner := ans.Owner
	if owner == "" {
		owner = "none (no live host runs the agent)"
	}
	fmt.Fprintf(c.stdout, "%s: partition %d, owner %s\n", cell(ans.WorkflowID, 200), ans.Partition, cell(owner, 80))
	if len(ans.Unanswered) > 0 {
		fmt.Fprintf(c.stdout, "hosts that did not answer: %s\n", cell(strings.Join(ans.Unanswered, ", "), 200))
	}
	if len(ans.Conversations) == 0 {
		fmt.Fprintln(c.stdout, "nothing waits")
		return nil
	}
	now := time.Now()
	tw := c.table()
	fmt.Fprintln(tw, "PARTICIPANT\tSTORED\tOLDEST\tNOT HELD")
	for _, cv := range ans.Conversations {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\n", cell(cv.ParticipantID, 40), cv.Stored, age(cv.OldestAgeMs), cv.NotHeld)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout)
	tw = c.table()
	fmt.Fprintln(tw, "PARTICIPANT\tSEQ\tREQUEST\tTYPE\tAGE\tATTEMPT\tHOST\tSTATE")
	for _, cv := range ans.Conversations {
		for _, r := range cv.Requests {
			kind := kindOf(r.Type, r.Method)
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\n", cell(cv.ParticipantID, 40), r.Sequence, cell(r.RequestID, 60), cell(kind, 40),
				age(r.AgeMs), r.Attempt, cell(r.Host, 60), cell(why(r, now), 160))
		}
	}
	return tw.Flush()
}

// instanceRetry runs a request of an instance that waits in retry backoff now.
func (c *cli) instanceRetry(ctx context.Context, args []string) error {
	pos, err := parse(c.flags("instances retry"), args, 2, "WORKFLOW_ID REQUEST_ID")
	if err != nil {
		return err
	}
	path := c.instanceQueuePath(pos[0]) + "/" + url.PathEscape(pos[1]) + "/retry"
	if printed, err := c.fetch(ctx, http.MethodPost, path, nil, nil, nil); err != nil || printed {
		return err
	}
	fmt.Fprintf(c.stdout, "request %s retried now\n", cell(pos[1], 200))
	return nil
}
