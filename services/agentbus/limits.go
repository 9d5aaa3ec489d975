package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/agentbus/agentbus/pkg/tenantlimits"
)

// tenantLimits runs tenant limits get|set.
func (c *cli) tenantLimits(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError{"tenant limits needs a subcommand: get or set"}
	}
	switch args[0] {
	case "get", "show":
		return c.tenantLimitsGet(ctx, args[1:])
	case "set":
		return c.tenantLimitsSet(ctx, args[1:])
	default:
		return usageError{fmt.Sprintf("unknown command %q", "tenant limits "+args[0])}
	}
}

// limitsPath is the limits route of the tenant named, or of the current one.
func (c *cli) limitsPath(pos []string) string {
	tenant := c.tenant
	if len(pos) == 1 {
		tenant = pos[0]
	}
	return "/api/v1/admin/tenants/" + url.PathEscape(tenant) + "/limits"
}

// tenantLimitsGet prints a tenant's limits: what holds, and which of it was set for the tenant.
func (c *cli) tenantLimitsGet(ctx context.Context, args []string) error {
	pos, err := parseBetween(c.flags("tenant limits get"), args, 0, 1, "[ID]")
	if err != nil {
		return err
	}
	var rec tenantlimits.Record
	if printed, err := c.fetch(ctx, http.MethodGet, c.limitsPath(pos), nil, nil, &rec); err != nil || printed {
		return err
	}
	return c.showLimits(rec)
}

// limitFlags are the values tenant limits set takes; each is left as it was unless given.
type limitFlags struct {
	weight, maxConcurrent, maxQueued optionalInt
	maxBytes, maxInstances           optionalInt
	rate, keyRate                    optionalRate
	writeRate, listenRate            optionalRate
}

// tenantLimitsSet changes a tenant's limits: the values given, of the tenant or (--agent) of
// one of its agents, on top of what is set (--replace: on top of nothing), or the whole record
// from a file (-f). It prints what holds then.
func (c *cli) tenantLimitsSet(ctx context.Context, args []string) error {
	fs := c.flags("tenant limits set")
	agentName := fs.String("agent", "", "set the values of this agent's requests instead of the tenant's")
	file := fs.String("f", "", "the whole record, as JSON (- reads stdin), in place of the flags")
	replace := fs.Bool("replace", false, "start from nothing set rather than from what is set: the values not given are the deployment's")
	var f limitFlags
	fs.Var(&f.weight, "weight", "the tenant's weight in the turns of an agent's handler slots, 1 to 1000")
	fs.Var(&f.maxConcurrent, "max-concurrent", "at most this many requests of an agent run at once over every host (0: no cap)")
	fs.Var(&f.maxQueued, "max-queued", "at most this many requests of an agent wait to run (0: no cap)")
	fs.Var(&f.rate, "rate", "requests a second, RATE[:BURST]: the tenant's (all its keys), or with --agent its calls to the agent (0: no limit)")
	fs.Var(&f.keyRate, "key-rate", "requests a second of each of the tenant's keys, RATE[:BURST] (0: no limit)")
	fs.Var(&f.writeRate, "write-rate", "configuration writes a second of the tenant (keys, remote agents, subscriptions), RATE[:BURST] (0: no limit)")
	fs.Var(&f.listenRate, "listen-rate", "history listen streams the tenant opens a second, RATE[:BURST] (0: no limit)")
	fs.Var(&f.maxBytes, "max-bytes", "bytes the tenant may keep stored (0: no quota)")
	fs.Var(&f.maxInstances, "max-instances", "workflow instances the tenant may have (0: no quota)")
	pos, err := parseBetween(fs, args, 0, 1, "[ID] [--agent NAME] [--weight N] [--max-concurrent N] [--max-queued N] [--rate R[:B]] [--key-rate R[:B]] [--write-rate R[:B]] [--listen-rate R[:B]] [--max-bytes N] [--max-instances N] [--replace] | -f FILE")
	if err != nil {
		return err
	}
	path := c.limitsPath(pos)
	var l tenantlimits.Limits
	switch {
	case *file != "":
		raw, err := readRegistrationFile(*file, c.stdin)
		if err != nil {
			return err
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			return fmt.Errorf("reading %s: %w", fileName(*file), err)
		}
	case !*replace:
		var cur tenantlimits.Record
		if _, err := c.call(ctx, http.MethodGet, path, nil, nil, &cur); err != nil {
			return err
		}
		l = cur.Limits
	}
	if *file == "" {
		if err := f.apply(&l, *agentName); err != nil {
			return usageError{err.Error()}
		}
	}
	var rec tenantlimits.Record
	if printed, err := c.fetch(ctx, http.MethodPut, path, nil, l, &rec); err != nil || printed {
		return err
	}
	return c.showLimits(rec)
}

// apply sets the values given on l, the tenant's or, with agent, the agent's.
func (f limitFlags) apply(l *tenantlimits.Limits, agent string) error {
	v := &l.Values
	var agentValues tenantlimits.Values
	if agent != "" {
		agentValues = l.Agents[agent]
		v = &agentValues
		if f.keyRate.set || f.writeRate.set || f.listenRate.set || f.maxBytes.set || f.maxInstances.set {
			return fmt.Errorf("--key-rate, --write-rate, --listen-rate, --max-bytes and --max-instances are the tenant's, not an agent's")
		}
	}
	f.weight.to(&v.Weight)
	f.maxConcurrent.to(&v.MaxConcurrent)
	f.maxQueued.to(&v.MaxQueued)
	f.rate.to(&v.Rate)
	f.keyRate.to(&l.KeyRate)
	f.writeRate.to(&l.WriteRate)
	f.listenRate.to(&l.ListenRate)
	f.maxBytes.to64(&l.MaxBytes)
	f.maxInstances.to64(&l.MaxInstances)
	if agent != "" {
		if l.Agents == nil {
			l.Agents = map[string]tenantlimits.Values{}
		}
		l.Agents[agent] = agentValues
		if agentValues == (tenantlimits.Values{}) {
			delete(l.Agents, agent)
		}
	}
	return nil
}

// optionalInt is a whole-number flag that may be left out, or given as "default" to take the
// value set away.
type optionalInt struct {
	set, unset bool
	n          int64
}

func (o *optionalInt) String() string { return "" }

func (o *optionalInt) Set(s string) error {
	o.set = true
	if s == "default" {
		o.unset = true
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("%q is not a whole number (or default)", s)
	}
	o.n = n
	return nil
}

func (o optionalInt) to(dst **int) {
	switch {
	case o.unset:
		*dst = nil
	case o.set:
		n := int(o.n)
		*dst = &n
	}
}

func (o optionalInt) to64(dst **int64) {
	switch {
	case o.unset:
		*dst = nil
	case o.set:
		n := o.n
		*dst = &n
	}
}

// optionalRate is a RATE[:BURST] flag that may be left out, or given as "default".
type optionalRate struct {
	set, unset bool
	r          tenantlimits.Rate
}

func (o *optionalRate) String() string { return "" }

func (o *optionalRate) Set(s string) error {
	o.set = true
	if s == "default" {
		o.unset = true
		return nil
	}
	rate, burst, hasBurst := strings.Cut(s, ":")
	var err error
	if o.r.PerSecond, err = strconv.ParseFloat(rate, 64); err != nil {
		return fmt.Errorf("%q is not RATE[:BURST] (or default)", s)
	}
	if hasBurst {
		if o.r.Burst, err = strconv.Atoi(burst); err != nil {
			return fmt.Errorf("%q is not RATE[:BURST] (or default)", s)
		}
	}
	return nil
}

func (o optionalRate) to(dst **tenantlimits.Rate) {
	switch {
	case o.unset:
		*dst = nil
	case o.set:
		r := o.r
		*dst = &r
	}
}

var _ flag.Value = (*optionalInt)(nil)

// showLimits prints what holds for a tenant, marking what was set for it.
func (c *cli) showLimits(rec tenantlimits.Record) error {
	l, e := rec.Limits, rec.Effective
	tw := c.fields()
	tw.row("tenant", rec.Tenant)
	if rec.UpdatedAt != nil {
		tw.row("set", shortTime(rec.UpdatedAt.Time)+" by "+rec.UpdatedBy)
	} else {
		tw.row("set", "nothing: the deployment's settings")
	}
	tw.row("weight", marked(strconv.Itoa(e.Weight), l.Weight != nil))
	tw.row("max concurrent", marked(orNone(int64(e.MaxConcurrent), itoa), l.MaxConcurrent != nil))
	tw.row("max queued", marked(orNone(int64(e.MaxQueued), itoa), l.MaxQueued != nil))
	tw.row("rate", marked(rateOf(e.Rate), l.Rate != nil))
	tw.row("key rate", marked(rateOf(e.KeyRate), l.KeyRate != nil))
	tw.row("write rate", marked(rateOf(e.WriteRate), l.WriteRate != nil))
	tw.row("listen rate", marked(rateOf(e.ListenRate), l.ListenRate != nil))
	tw.row("max bytes", marked(orNone(e.MaxBytes, bytesOf), l.MaxBytes != nil))
	tw.row("max instances", marked(orNone(e.MaxInstances, itoa), l.MaxInstances != nil))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(e.Agents) == 0 {
		return nil
	}
	fmt.Fprintln(c.stdout)
	at := c.table()
	fmt.Fprintln(at, "AGENT\tWEIGHT\tMAX CONCURRENT\tMAX QUEUED\tRATE")
	for _, name := range slices.Sorted(maps.Keys(e.Agents)) {
		a, set := e.Agents[name], l.Agents[name]
		fmt.Fprintf(at, "%s\t%s\t%s\t%s\t%s\n", cell(name, 80), marked(strconv.Itoa(a.Weight), set.Weight != nil),
			marked(orNone(int64(a.MaxConcurrent), itoa), set.MaxConcurrent != nil),
			marked(orNone(int64(a.MaxQueued), itoa), set.MaxQueued != nil), marked(rateOf(a.Rate), set.Rate != nil))
	}
	if err := at.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, "(set): set for the tenant or the agent; the others are the tenant's or the deployment's")
	return nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// orNone shows a cap, "none" for 0.
func orNone(n int64, show func(int64) string) string {
	if n == 0 {
		return "none"
	}
	return show(n)
}

// rateOf shows a rate: "20/s, bursts of 40", or "none".
func rateOf(r tenantlimits.Rate) string {
	if r.PerSecond <= 0 {
		return "none"
	}
	return fmt.Sprintf("%s/s, bursts of %d", strconv.FormatFloat(r.PerSecond, 'f', -1, 64), r.Burst)
}

// marked adds " (set)" to a value set for the tenant.
func marked(s string, set bool) string {
	if set {
		return s + " (set)"
	}
	return s
}
