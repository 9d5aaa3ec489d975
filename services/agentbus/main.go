// Command agentbus is the command-line client of the agentbus HTTP API: it manages tenants and
// API keys, sets a tenant's limits, shows what a tenant stores against its quotas, sends messages, converses with agents (optionally streamed), tails a thread, lists,
// replays and discards dead letters, lists and cancels timers, lists, inspects and completes
// workflow instances, shows the workflow hosts and what waits for an instance (and retries a
// held request now), manages event subscriptions and their undelivered events, registers remote
// agents, and checks a remote agent's endpoint against the protocol.
//
//	agentbus [global flags] <command> <subcommand> [flags] [args]
//
// Global flags, each with an environment variable:
//
//	-url     AGENTBUS_URL     the ingress (default http://127.0.0.1:8080)
//	-key     AGENTBUS_KEY     the API key, sent as Authorization: Bearer (prefer the variable:
//	                          a flag is visible to other users in the process list)
//	-tenant  AGENTBUS_TENANT  the tenant of admin and history calls (default "default")
//	-json                     print the API's JSON answers as they are (also: -o json)
//
// The key is never printed and never put in a URL. Errors the API answers (problem+json) are
// printed as "error: <title> (<status>): <detail>" on stderr, and the exit code is 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.As(err, new(usageError)):
		os.Exit(2)
	default:
		os.Exit(1)
	}
}

// usageError is a command line that makes no sense; the usage was printed with it.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// cli is one invocation: the global settings and where output goes.
type cli struct {
	url    string
	key    string
	tenant string
	// tenantSet: -tenant or AGENTBUS_TENANT was given, so converse names it (tenantId) too.
	tenantSet bool
	json      bool

	stdin          io.Reader
	stdout, stderr io.Writer
	http           *http.Client
}

const usage = `usage: agentbus [-url URL] [-key KEY] [-tenant ID] [-json | -o json] <command> [flags] [args]

commands:
  tenant create ID | tenant list | tenant delete ID
  tenant usage [ID]       (the bytes the tenant stores, its instances, its quotas; default -tenant)
  tenant limits get [ID]  (its weight, caps, rates and quotas: what holds, and what was set)
  tenant limits set [ID] [--agent NAME] [--weight N] [--max-concurrent N] [--max-queued N]
       [--rate R[:B]] [--key-rate R[:B]] [--write-rate R[:B]] [--listen-rate R[:B]] [--max-bytes N]
       [--max-instances N] [--replace] | -f FILE
       (system admins; a value "default" takes what was set away)
  key create [--name N] [--role user|tenant-admin|system-admin]
  key list | key revoke KEYID | key rotate KEYID          (--system: the tenant-less system keys)
  send --agent A [--activation X] --participant P [--type Chat|Data|File|Webhook]
       [--text T] [--data JSON] [--file PATH] [--topic T] [--hint H] [--wait] [--timeout S]
  converse --workflow W [--type Chat|Data] --text T [--participant P] [--data JSON] [--stream]
  tail (--workflow W | --agent A [--activation X]) --participant P
  deadletter list [--agent A] [--after ID] [--limit N] | deadletter show ID
  deadletter replay ID | deadletter discard ID
  schedule list (--workflow W | --agent A [--activation X])
  schedule cancel NAME (--workflow W | --agent A [--activation X])
  instances list AGENT [--status running|idle|completed] [--prefix P] [--active-before T]
       [--active-after T] [--limit N] [--cursor C]
  instances show WORKFLOW_ID | instances complete WORKFLOW_ID
  instances queue WORKFLOW_ID | instances retry WORKFLOW_ID REQUEST_ID
  instances backfill                                       (system admins, once after upgrading)
  hosts [--all]           (the tenant's agents' hosts when -tenant or AGENTBUS_TENANT is set)
  subscription create URL --events E[,E...] [--agent A]... [--description D]
       [--secret whsec_...]
  subscription list | subscription get ID | subscription delete ID
  subscription undelivered ID [--after N] [--limit N]
  subscription replay ID EVENT_ID | subscription discard ID EVENT_ID
  agent register [NAME] [-f FILE|-] [--endpoint URL] [--chat] [--files] [--method M]...
       [--webhook W]... [--workflow-type T]... [--tenants T,...] [--secret whsec_...]
       [--timeout S] [--max-concurrent N]
  agent replace NAME [-f FILE|-] [the flags of register]
  agent list | agent get NAME | agent remove NAME
       (register, replace, list, get, remove: --global for the system admin's global agents)
  agent check [URL] [--secret whsec_...] [-f FILE|-] [--chat] [--files] [--method M]... [--webhook W]...
       (also: agent-check URL ...)

environment: AGENTBUS_URL (default http://127.0.0.1:8080), AGENTBUS_KEY, AGENTBUS_TENANT (default "default")
`

// run is the whole command: args without the program name, env to read AGENTBUS_* from. Errors
// are printed to stderr here; the caller only chooses the exit code.
func run(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) error {
	return runIn(ctx, args, env, os.Stdin, stdout, stderr)
}

// runIn is run reading stdin from in (for -f -).
func runIn(ctx context.Context, args []string, env func(string) (string, bool), in io.Reader, stdout, stderr io.Writer) error {
	err := runCommand(ctx, args, env, in, stdout, stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "error: %v\n\n%s", err, usage)
	default:
		fmt.Fprintf(stderr, "error: %v\n", err)
	}
	return err
}

func runCommand(ctx context.Context, args []string, env func(string) (string, bool), in io.Reader, stdout, stderr io.Writer) error {
	c := newCLI(env, in, stdout, stderr)
	fs := c.flags("agentbus")
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	if err := fs.Parse(args); err != nil {
		return err
	}
	args = fs.Args()
	if len(args) == 0 {
		return usageError{"no command given"}
	}
	if args[0] == "help" {
		fmt.Fprint(stdout, usage)
		return nil
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	c.http = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse // never carry the key to another place
	}}
	return c.run(ctx, args[0], args[1:])
}

// newCLI is a client set up from the environment (AGENTBUS_URL, AGENTBUS_KEY, AGENTBUS_TENANT),
// which the flags may then change.
func newCLI(env func(string) (string, bool), in io.Reader, stdout, stderr io.Writer) *cli {
	c := &cli{stdin: in, stdout: stdout, stderr: stderr}
	getenv := func(name, def string) (string, bool) {
		if v, ok := env(name); ok && v != "" {
			return v, true
		}
		return def, false
	}
	c.url, _ = getenv("AGENTBUS_URL", "http://127.0.0.1:8080")
	c.key, _ = getenv("AGENTBUS_KEY", "")
	c.tenant, c.tenantSet = getenv("AGENTBUS_TENANT", "default")
	return c
}

// handler runs a command with its arguments.
type handler = func(context.Context, []string) error

// run runs the command cmd: one that takes its arguments itself, or the subcommand that
// args names.
func (c *cli) run(ctx context.Context, cmd string, args []string) error {
	if run, ok := c.commands()[cmd]; ok {
		return run(ctx, args)
	}
	table, ok := c.subcommands()[cmd]
	if !ok {
		return usageError{fmt.Sprintf("unknown command %q", cmd)}
	}
	if len(args) == 0 {
		return usageError{cmd + " needs a subcommand"}
	}
	run, ok := table[args[0]]
	if !ok {
		return usageError{fmt.Sprintf("unknown command %q", cmd+" "+args[0])}
	}
	return run(ctx, args[1:])
}

// commands are the commands that take their arguments themselves.
func (c *cli) commands() map[string]handler {
	return map[string]handler{
		"hosts": c.hosts, "host": c.hosts,
		"agent-check": c.agentCheck,
		"send":        c.send,
		"converse":    c.converse,
		"tail":        c.tail,
	}
}

// subcommands are the commands made of subcommands, by every name each goes by.
func (c *cli) subcommands() map[string]map[string]handler {
	tenant := map[string]handler{
		"create": c.tenantCreate, "list": c.tenantList, "ls": c.tenantList, "delete": c.tenantDelete, "rm": c.tenantDelete,
		"usage": c.tenantUsage, "limits": c.tenantLimits,
	}
	key := map[string]handler{
		"create": c.keyCreate, "list": c.keyList, "ls": c.keyList, "revoke": c.keyRevoke, "rotate": c.keyRotate,
	}
	deadLetter := map[string]handler{
		"list": c.deadLetterList, "ls": c.deadLetterList, "show": c.deadLetterShow,
		"replay": c.deadLetterReplay, "discard": c.deadLetterDiscard, "rm": c.deadLetterDiscard,
	}
	schedule := map[string]handler{
		"list": c.scheduleList, "ls": c.scheduleList, "cancel": c.scheduleCancel, "rm": c.scheduleCancel,
	}
	instance := map[string]handler{
		"list": c.instanceList, "ls": c.instanceList, "show": c.instanceShow, "get": c.instanceShow,
		"complete": c.instanceComplete, "backfill": c.instanceBackfill,
		"queue": c.instanceQueue, "retry": c.instanceRetry,
	}
	subscription := map[string]handler{
		"create": c.subscriptionCreate, "list": c.subscriptionList, "ls": c.subscriptionList,
		"get": c.subscriptionGet, "show": c.subscriptionGet, "delete": c.subscriptionDelete, "rm": c.subscriptionDelete,
		"undelivered": c.subscriptionUndelivered, "replay": c.subscriptionReplay, "discard": c.subscriptionDiscard,
	}
	agent := map[string]handler{
		"register": c.agentRegister, "list": c.agentList, "ls": c.agentList, "get": c.agentGet, "show": c.agentGet,
		"replace": c.agentReplace, "remove": c.agentRemove, "rm": c.agentRemove, "check": c.agentCheck,
	}
	return map[string]map[string]handler{
		"tenant": tenant, "tenants": tenant,
		"key": key, "keys": key,
		"deadletter": deadLetter, "deadletters": deadLetter,
		"schedule": schedule, "schedules": schedule,
		"instance": instance, "instances": instance,
		"subscription": subscription, "subscriptions": subscription,
		"agent": agent, "agents": agent,
	}
}

// table writes tab-separated columns to stdout, aligned when it is flushed.
func (c *cli) table() *tabwriter.Writer {
	return tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
}

// fieldList prints one thing as "name:  value" lines, aligned when it is flushed.
type fieldList struct{ *tabwriter.Writer }

func (c *cli) fields() fieldList { return fieldList{c.table()} }

// row prints a field unless its value is empty, with control characters shown as '?'.
func (f fieldList) row(name, value string) {
	if value != "" {
		fmt.Fprintf(f, "%s:\t%s\n", name, cell(value, 4096))
	}
}

// flags is a flag set holding the global flags, so that they may also follow the subcommand.
func (c *cli) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.StringVar(&c.url, "url", c.url, "the agentbus ingress (AGENTBUS_URL)")
	fs.StringVar(&c.key, "key", c.key, "the API key (AGENTBUS_KEY; prefer the variable)")
	fs.Func("tenant", "the tenant (AGENTBUS_TENANT, default \"default\")", func(v string) error {
		c.tenant, c.tenantSet = v, true
		return nil
	})
	fs.BoolVar(&c.json, "json", c.json, "print the raw JSON answers")
	fs.Func("o", "the output: table (the default) or json, as -json", func(v string) error {
		switch v {
		case "json":
			c.json = true
		case "table":
			c.json = false
		default:
			return fmt.Errorf("-o takes table or json, not %q", v)
		}
		return nil
	})
	return fs
}

// parse parses a subcommand's flags, which may come before, between and after its arguments,
// and checks the number of arguments.
func parse(fs *flag.FlagSet, args []string, nargs int, argNames string) ([]string, error) {
	pos, err := parseAll(fs, args)
	if err != nil {
		return nil, err
	}
	if len(pos) != nargs {
		if nargs == 0 {
			return nil, usageError{fmt.Sprintf("%s takes no arguments, got %q", fs.Name(), strings.Join(pos, " "))}
		}
		return nil, usageError{fmt.Sprintf("usage: agentbus %s %s", fs.Name(), argNames)}
	}
	return pos, nil
}

// parseAll parses a subcommand's flags, which may come before, between and after its
// arguments, and returns the arguments.
func parseAll(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// shortTime shows an API time in the local zone, to the second; nothing for none.
func shortTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Local().Format("2006-01-02 15:04:05")
}
