package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/url"

	"github.com/agentbus/agentbus/pkg/schedule"
)

// instanceFlags are the flags that name a workflow instance, as tail names its thread.
type instanceFlags struct {
	workflow, agentName, activation, wfType *string
}

func newInstanceFlags(fs *flag.FlagSet) instanceFlags {
	return instanceFlags{
		workflow:   fs.String("workflow", "", "the workflow: Agent, Agent:WorkflowType or a full workflow id"),
		agentName:  fs.String("agent", "", "the agent (instead of --workflow)"),
		activation: fs.String("activation", "default", "with --agent: the activation"),
		wfType:     fs.String("workflow-type", "", `with --agent: the workflow type (default "Supervisor Workflow")`),
	}
}

// query is the instance as the API's query parameters name it.
func (f instanceFlags) query() (url.Values, error) {
	return threadQuery(*f.workflow, *f.agentName, *f.activation, *f.wfType)
}

// schedulesPath is where the current tenant's timers are, or with name one of them.
func (c *cli) schedulesPath(name string) string { return c.tenantItemPath("schedules", name) }

// scheduleList prints an instance's timers.
func (c *cli) scheduleList(ctx context.Context, args []string) error {
	fs := c.flags("schedule list")
	instance := newInstanceFlags(fs)
	if _, err := parse(fs, args, 0, ""); err != nil {
		return err
	}
	query, err := instance.query()
	if err != nil {
		return err
	}
	var ans schedule.Timers
	if printed, err := c.fetch(ctx, http.MethodGet, c.schedulesPath(""), query, nil, &ans); err != nil || printed {
		return err
	}
	tw := c.table()
	fmt.Fprintln(tw, "NAME\tSCHEDULE\tPARTICIPANT\tTYPE\tSET")
	for _, s := range ans.Schedules {
		kind := kindOf(s.Type, s.Method)
		when := s.Schedule
		if s.TimeZone != "" {
			when += " (" + s.TimeZone + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", cell(s.Name, 60), cell(when, 60), cell(s.ParticipantID, 40), cell(kind, 40), shortTime(s.CreatedAt.Time))
	}
	return tw.Flush()
}

// scheduleCancel cancels an instance's timer.
func (c *cli) scheduleCancel(ctx context.Context, args []string) error {
	fs := c.flags("schedule cancel")
	instance := newInstanceFlags(fs)
	pos, err := parse(fs, args, 1, "NAME (--workflow W | --agent A [--activation X])")
	if err != nil {
		return err
	}
	query, err := instance.query()
	if err != nil {
		return err
	}
	if _, err := c.call(ctx, http.MethodDelete, c.schedulesPath(pos[0]), query, nil, nil); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "cancelled timer %s\n", pos[0])
	return nil
}
