package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/agentbus/agentbus/pkg/remote"
)

// systemAgentsPath is where a system admin manages the global remote agents.
const systemAgentsPath = "/api/v1/admin/agents"

// maxRegistrationFile bounds a registration file read into memory; the API takes less.
const maxRegistrationFile = 4 << 20

// agentsPath is where the current tenant's remote agents are, or with global the system
// admin's; with name, one of them.
func (c *cli) agentsPath(global bool, name string) string {
	if !global {
		return c.tenantItemPath("agents", name)
	}
	if name == "" {
		return systemAgentsPath
	}
	return systemAgentsPath + "/" + url.PathEscape(name)
}

// globalFlag adds --global to a remote-agent subcommand.
func globalFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("global", false, "the system admin's global agents ("+systemAgentsPath+"), not the tenant's own; needs a system-admin key")
}

// registrationFlags are the flags that give a registration: a JSON file and fields over it.
type registrationFlags struct {
	file                                      string
	name, endpoint, secret                    string
	chat, files                               bool
	webhooks, methods, workflowTypes, tenants listFlag
	timeout, maxConcurrent, partitions        int
}

// define adds the flags to fs; endpoint says whether --endpoint gives the URL (check takes it
// as an argument instead).
func (r *registrationFlags) define(fs *flag.FlagSet, endpoint bool) {
	fs.StringVar(&r.file, "f", "", "the registration, a JSON file as the kits' Echos print it (- reads stdin)")
	fs.StringVar(&r.name, "name", "", "the agent's name")
	if endpoint {
		fs.StringVar(&r.endpoint, "endpoint", "", "the agent's URL, where the hosts POST its requests (the registration's url)")
	}
	fs.BoolVar(&r.chat, "chat", false, "it takes Chat messages")
	fs.BoolVar(&r.files, "files", false, "it takes File messages (the registration's file)")
	fs.Var(&r.webhooks, "webhook", "a webhook method; repeat it, or separate by commas")
	fs.Var(&r.methods, "method", "a Data method, by name (descriptions and schemas come from -f); repeat it, or separate by commas")
	fs.Var(&r.workflowTypes, "workflow-type", `a workflow type it serves; repeat it, or separate by commas (default "Supervisor Workflow")`)
	fs.Var(&r.tenants, "tenants", "a global agent's tenants, comma-separated (default every tenant)")
	fs.StringVar(&r.secret, "secret", "", "the signing secret, whsec_ and a base64 key of 24 to 64 bytes")
	fs.IntVar(&r.timeout, "timeout", 0, "seconds one request may take, 1-300 (default 30)")
	fs.IntVar(&r.maxConcurrent, "max-concurrent", 0, "requests one host sends the agent at once, 1-1024 (default 32)")
	fs.IntVar(&r.partitions, "partitions", 0, "partitions of the agent's inbox, at most this many hosts sharing its work, 1-16 for a tenant's agent (default 4, 16 for an agent several tenants share)")
}

// body is the registration: the file's object, if any, with each flag given over its field.
// The fields agentbus sets (owner, createdAt, updatedAt) are dropped, so that what get prints
// can be edited and given to replace.
func (r *registrationFlags) body(fs *flag.FlagSet, stdin io.Reader) (map[string]json.RawMessage, error) {
	obj := map[string]json.RawMessage{}
	if r.file != "" {
		raw, err := readRegistrationFile(r.file, stdin)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
			return nil, fmt.Errorf("%s is not a JSON object: %v", fileName(r.file), err)
		}
		for _, k := range []string{"owner", "createdAt", "updatedAt"} {
			delete(obj, k)
		}
	}
	var err error
	set := func(key string, v any) {
		b, e := json.Marshal(v)
		if e != nil && err == nil {
			err = e
		}
		obj[key] = b
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "name":
			set("name", r.name)
		case "endpoint":
			set("url", r.endpoint)
		case "chat":
			set("chat", r.chat)
		case "files":
			set("file", r.files)
		case "webhook":
			set("webhooks", []string(r.webhooks))
		case "method":
			methods := make([]remote.Method, len(r.methods))
			for i, m := range r.methods {
				methods[i].Name = m
			}
			set("methods", methods)
		case "workflow-type":
			set("workflowTypes", []string(r.workflowTypes))
		case "tenants":
			set("tenants", []string(r.tenants))
		case "secret":
			set("secret", r.secret)
		case "timeout":
			set("timeoutSeconds", r.timeout)
		case "max-concurrent":
			set("maxConcurrent", r.maxConcurrent)
		case "partitions":
			set("partitions", r.partitions)
		}
	})
	return obj, err
}

func readRegistrationFile(name string, stdin io.Reader) ([]byte, error) {
	var rd io.Reader = stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		rd = f
	}
	raw, err := io.ReadAll(io.LimitReader(rd, maxRegistrationFile+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", fileName(name), err)
	}
	if len(raw) > maxRegistrationFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", fileName(name), maxRegistrationFile)
	}
	return raw, nil
}

func fileName(name string) string {
	if name == "-" {
		return "stdin"
	}
	return name
}

// agentRegister registers a remote agent: POST …/agents.
func (c *cli) agentRegister(ctx context.Context, args []string) error {
	fs := c.flags("agent register")
	global := globalFlag(fs)
	var rf registrationFlags
	rf.define(fs, true)
	pos, err := parseBetween(fs, args, 0, 1, "[NAME] [-f FILE] [--endpoint URL] [--chat] [--files] [--method M]... [--webhook W]... [--global]")
	if err != nil {
		return err
	}
	body, err := rf.body(fs, c.stdin)
	if err != nil {
		return err
	}
	if len(pos) == 1 {
		body["name"], _ = json.Marshal(pos[0])
	}
	if rf.file == "" && len(body) == 0 {
		return usageError{"agent register needs -f FILE or the registration's flags (--name, --endpoint, ...)"}
	}
	_, givenSecret := body["secret"]
	var reg remote.Registration
	raw, err := c.call(ctx, http.MethodPost, c.agentsPath(*global, ""), nil, body, &reg)
	if err != nil {
		return err
	}
	// As a new key: the secret alone on stdout, so that it can be captured, and what it signs on
	// stderr.
	fmt.Fprintf(c.stderr, "agent %s registered, %s: %s.\n", cell(reg.Name, 200), servedTo(reg), cell(reg.URL, 4096))
	if !givenSecret {
		fmt.Fprintln(c.stderr, "warning: the signing secret is shown only this once; store it now, it cannot be read again.")
	}
	if c.json {
		c.printJSON(raw)
		return nil
	}
	fmt.Fprintln(c.stdout, reg.Secret)
	return nil
}

// servedTo says whom an agent serves.
func servedTo(reg remote.Registration) string {
	switch {
	case reg.Owner != "":
		return "an agent of tenant " + cell(reg.Owner, 200)
	case len(reg.Tenants) == 0:
		return "a global agent of every tenant"
	default:
		return "a global agent of tenants " + cell(strings.Join(reg.Tenants, ", "), 400)
	}
}

// agentReplace replaces a remote agent's registration: PUT …/agents/{name}.
func (c *cli) agentReplace(ctx context.Context, args []string) error {
	fs := c.flags("agent replace")
	global := globalFlag(fs)
	var rf registrationFlags
	rf.define(fs, true)
	pos, err := parse(fs, args, 1, "NAME [-f FILE] [--endpoint URL] [--chat] [--files] [--method M]... [--webhook W]... [--global]")
	if err != nil {
		return err
	}
	body, err := rf.body(fs, c.stdin)
	if err != nil {
		return err
	}
	if rf.file == "" && len(body) == 0 {
		return usageError{"agent replace needs -f FILE or the registration's flags (--endpoint, --chat, ...)"}
	}
	var reg remote.Registration
	if printed, err := c.fetch(ctx, http.MethodPut, c.agentsPath(*global, pos[0]), nil, body, &reg); err != nil || printed {
		return err
	}
	fmt.Fprintf(c.stdout, "agent %s replaced, %s: %s\n", cell(reg.Name, 200), servedTo(reg), cell(reg.URL, 4096))
	return nil
}

func (c *cli) agentList(ctx context.Context, args []string) error {
	fs := c.flags("agent list")
	global := globalFlag(fs)
	if _, err := parse(fs, args, 0, ""); err != nil {
		return err
	}
	var ans remote.List
	if printed, err := c.fetch(ctx, http.MethodGet, c.agentsPath(*global, ""), nil, nil, &ans); err != nil || printed {
		return err
	}
	tw := c.table()
	fmt.Fprintln(tw, "NAME\tURL\tMETHODS\tCHAT\tFILE\tTENANTS")
	for _, a := range ans.Agents {
		tenants := "*"
		if len(a.Tenants) > 0 {
			tenants = strings.Join(a.Tenants, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", cell(a.Name, 80), cell(a.URL, 80), cell(methodsSummary(a), 80),
			yesNo(a.Chat), yesNo(a.File), cell(tenants, 60))
	}
	return tw.Flush()
}

// methodsSummary names an agent's Data methods and webhooks, at most three of each:
// "count,sum; webhooks: echo", "a,b,c +2".
func methodsSummary(a remote.Registration) string {
	names := make([]string, len(a.Methods))
	for i, m := range a.Methods {
		names[i] = m.Name
	}
	var parts []string
	if len(names) > 0 {
		parts = append(parts, firstNames(names))
	}
	if len(a.Webhooks) > 0 {
		parts = append(parts, "webhooks: "+firstNames(a.Webhooks))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}

// firstNames is at most three names, comma-separated, and how many more there are.
func firstNames(names []string) string {
	const shown = 3
	if len(names) <= shown {
		return strings.Join(names, ",")
	}
	return strings.Join(names[:shown], ",") + " +" + strconv.Itoa(len(names)-shown)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// agentGet prints a registration as the API shows it (without its secret), as indented JSON
// that replace -f takes back; -json prints it on one line.
func (c *cli) agentGet(ctx context.Context, args []string) error {
	fs := c.flags("agent get")
	global := globalFlag(fs)
	pos, err := parse(fs, args, 1, "NAME [--global]")
	if err != nil {
		return err
	}
	raw, err := c.call(ctx, http.MethodGet, c.agentsPath(*global, pos[0]), nil, nil, nil)
	if err != nil {
		return err
	}
	if c.json {
		c.printJSON(raw)
		return nil
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, bytes.TrimSpace(raw), "", "  "); err != nil {
		return fmt.Errorf("the answer is not JSON: %w", err)
	}
	buf.WriteByte('\n')
	_, err = c.stdout.Write(buf.Bytes())
	return err
}

func (c *cli) agentRemove(ctx context.Context, args []string) error {
	fs := c.flags("agent remove")
	global := globalFlag(fs)
	pos, err := parse(fs, args, 1, "NAME [--global]")
	if err != nil {
		return err
	}
	if _, err := c.call(ctx, http.MethodDelete, c.agentsPath(*global, pos[0]), nil, nil, nil); err != nil {
		return err
	}
	if !c.json {
		fmt.Fprintf(c.stdout, "agent %s removed; the hosts stop serving it within seconds\n", cell(pos[0], 200))
	}
	return nil
}

// agentCheck drives an agent's endpoint through the protocol's cases (remote.Check) and prints
// one line per case; any failed case makes it fail. It calls the endpoint, not agentbus: it
// needs no key.
func (c *cli) agentCheck(ctx context.Context, args []string) error {
	reg, err := c.checkedRegistration(args)
	if err != nil {
		return err
	}
	results := remote.Check(ctx, reg)
	if err := ctx.Err(); err != nil {
		return err
	}
	return c.printCheck(reg.URL, results)
}

// checkedRegistration reads agent check's arguments into the registration to check: its
// flags, -f FILE or standard input, and the URL argument; it refuses one that names no URL, no
// secret or nothing the agent takes.
func (c *cli) checkedRegistration(args []string) (remote.Registration, error) {
	var reg remote.Registration
	fs := c.flags("agent check")
	var rf registrationFlags
	rf.define(fs, false)
	var examples exampleFlag
	fs.Var(&examples, "example", `parameters to send a Data method, METHOD=JSON object ('sum={"values":[2,3]}'), in place of its schema's examples; repeat it`)
	pos, err := parseBetween(fs, args, 0, 1, "[URL] [--secret whsec_...] [-f FILE] [--chat] [--files] [--method M]... [--webhook W]... [--example M=JSON]...")
	if err != nil {
		return reg, err
	}
	body, err := rf.body(fs, c.stdin)
	if err != nil {
		return reg, err
	}
	if len(pos) == 1 {
		body["url"], _ = json.Marshal(pos[0])
	}
	b, err := json.Marshal(body)
	if err != nil {
		return reg, err
	}
	if err := json.Unmarshal(b, &reg); err != nil {
		return reg, fmt.Errorf("the registration is not one: %w", err)
	}
	switch {
	case reg.URL == "":
		return reg, usageError{"agent check needs the endpoint's URL: an argument, or the url of -f"}
	case reg.Secret == "":
		return reg, usageError{"agent check needs the signing secret: --secret, or the secret of -f"}
	case !reg.Chat && !reg.File && len(reg.Methods) == 0 && len(reg.Webhooks) == 0:
		return reg, usageError{"agent check needs to know what the agent takes: -f FILE, or --chat, --files, --method, --webhook"}
	}
	if u, err := url.Parse(reg.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return reg, usageError{fmt.Sprintf("agent check: %q is not an http or https URL", reg.URL)}
	}
	if reg.Name == "" {
		reg.Name = "Checked"
	}
	if err := examples.apply(reg.Methods); err != nil {
		return reg, usageError{"agent check: " + err.Error()}
	}
	return reg, nil
}

// printCheck prints the results of checking the endpoint, as JSON or a table, and their
// counts on standard error; it fails when any case failed.
func (c *cli) printCheck(endpoint string, results []remote.CheckResult) error {
	passed, failed, skipped := 0, 0, 0
	for _, r := range results {
		switch {
		case !r.OK:
			failed++
		case r.Skipped:
			skipped++
		default:
			passed++
		}
	}
	if c.json {
		raw, err := json.Marshal(results)
		if err != nil {
			return err
		}
		c.printJSON(raw)
	} else {
		tw := c.table()
		for _, r := range results {
			verdict := "PASS"
			switch {
			case !r.OK:
				verdict = "FAIL"
			case r.Skipped:
				verdict = "SKIP"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", verdict, cell(r.Case, 200), cell(r.Detail, 400))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(c.stderr, "%s: %d passed, %d failed, %d skipped\n", cell(endpoint, 4096), passed, failed, skipped)
	if failed > 0 {
		return errCheckFailed{failed: failed, of: len(results)}
	}
	return nil
}

// exampleFlag is agent check's --example: sample parameters of Data methods, each
// METHOD=JSON, given as they are (a JSON object has commas, so they are not a list).
type exampleFlag []string

func (f *exampleFlag) String() string { return strings.Join(*f, " ") }
func (f *exampleFlag) Set(v string) error {
	*f = append(*f, v)
	return nil
}

// apply makes the examples given the examples of their methods' schemas, in the order given, in
// place of the schemas' own, which is where remote.Check takes a method's parameters from.
func (f exampleFlag) apply(methods []remote.Method) error {
	given := map[int][]json.RawMessage{}
	for _, v := range f {
		name, params, ok := strings.Cut(v, "=")
		i := slices.IndexFunc(methods, func(m remote.Method) bool { return strings.EqualFold(m.Name, name) })
		switch {
		case !ok:
			return fmt.Errorf("--example %q: give METHOD=JSON", v)
		case i < 0:
			return fmt.Errorf("--example %q: the registration has no Data method %q (give it with --method or -f)", v, name)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal([]byte(params), &obj); err != nil || obj == nil {
			return fmt.Errorf("--example %q: the parameters are not a JSON object", v)
		}
		given[i] = append(given[i], json.RawMessage(params))
	}
	for i, list := range given {
		schema := map[string]json.RawMessage{}
		if len(methods[i].Schema) > 0 {
			if err := json.Unmarshal(methods[i].Schema, &schema); err != nil || schema == nil {
				return fmt.Errorf("the schema of %s is not a JSON object", methods[i].Name)
			}
		}
		var err error
		if schema["examples"], err = json.Marshal(list); err != nil {
			return err
		}
		if methods[i].Schema, err = json.Marshal(schema); err != nil {
			return err
		}
	}
	return nil
}

// errCheckFailed is an agent check with failed cases.
type errCheckFailed struct{ failed, of int }

func (e errCheckFailed) Error() string {
	return fmt.Sprintf("%d of %d cases failed", e.failed, e.of)
}

// parseBetween is parse for a command of min to max arguments.
func parseBetween(fs *flag.FlagSet, args []string, min, max int, argNames string) ([]string, error) {
	pos, err := parseAll(fs, args)
	if err != nil {
		return nil, err
	}
	if len(pos) < min || len(pos) > max {
		return nil, usageError{fmt.Sprintf("usage: agentbus %s %s", fs.Name(), argNames)}
	}
	return pos, nil
}
