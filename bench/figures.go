package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The -figures mode writes docs/performance.md's webhook figures in one command: bench/wrk.sh
// (wrk against the standalone, bare net/http and the minimal pipeline, each in a process of its
// own) and then this bench's bare, pipeline and agentbus phases, the same number of rounds each,
// and a Markdown paragraph and table of their medians side by side, with the date, the commit
// and the machine's load.

// wrkRound is one round of bench/wrk.sh: each phase's req/s and p99.
type wrkRound map[string]wrkResult

type wrkResult struct {
	RPS float64
	P99 time.Duration
}

// wrkLine matches the line bench/wrk.lua prints for each run.
var wrkLine = regexp.MustCompile(`^([a-z-]+): req/s ([0-9.]+) +p50 [0-9.]+ms +p99 ([0-9.]+)ms +non-2xx/3xx ([0-9]+) +errors ([0-9]+)$`)

// parseWrk reads bench/wrk.sh's output: a "round N" line, then a line per phase.
func parseWrk(r io.Reader) ([]wrkRound, error) {
	var rounds []wrkRound
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "round ") {
			rounds = append(rounds, wrkRound{})
			continue
		}
		m := wrkLine.FindStringSubmatch(line)
		if m == nil || len(rounds) == 0 {
			continue
		}
		if m[4] != "0" || m[5] != "0" {
			return nil, fmt.Errorf("wrk: %s answered %s non-2xx and had %s errors", m[1], m[4], m[5])
		}
		rps, _ := strconv.ParseFloat(m[2], 64)
		p99, _ := strconv.ParseFloat(m[3], 64)
		rounds[len(rounds)-1][m[1]] = wrkResult{RPS: rps, P99: time.Duration(p99 * float64(time.Millisecond))}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(rounds) == 0 {
		return nil, errors.New("wrk: no round in its output")
	}
	return rounds, nil
}

// runFigures runs bench/wrk.sh and this bench's phases for rounds rounds each and prints the
// figures.
func runFigures(ctx context.Context, o options, rounds int, wrkSeconds int) error {
	if _, err := exec.LookPath("wrk"); err != nil {
		return errors.New("wrk is not installed (Debian: apt-get install wrk)")
	}
	if _, err := os.Stat("bench/wrk.sh"); err != nil {
		return errors.New("run -figures from the module's root, where bench/wrk.sh is")
	}
	date := time.Now().UTC().Format("2006-01-02")
	commit := gitCommit(ctx)
	loadBefore := loadAverage()

	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this binary for bench/wrk.sh: %w", err)
	}
	fmt.Fprintf(os.Stderr, "running bench/wrk.sh %d %d…\n", rounds, wrkSeconds)
	cmd := exec.CommandContext(ctx, "sh", "bench/wrk.sh", strconv.Itoa(rounds), strconv.Itoa(wrkSeconds))
	cmd.Env = append(os.Environ(), "BENCH="+self)
	var out bytes.Buffer
	cmd.Stdout = io.MultiWriter(&out, os.Stderr)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("bench/wrk.sh: %w", err)
	}
	wrk, err := parseWrk(&out)
	if err != nil {
		return err
	}

	o.Rounds = rounds
	phases := []string{phaseBare, phasePipeline, phaseAgentbus}
	all, failed := execute(ctx, o, phases, nil, true, profiles{}, guard{})
	if failed {
		return errors.New("the bench's phases failed")
	}
	loadAfter := loadAverage()

	fmt.Println()
	printFigures(os.Stdout, figures{
		Date: date, Commit: commit, Load: loadBefore + " and " + loadAfter,
		Rounds: rounds, WrkSeconds: wrkSeconds, Options: o, Wrk: wrk, Bench: all,
	})
	return nil
}

// figures is what printFigures writes.
type figures struct {
	Date, Commit, Load string
	Rounds, WrkSeconds int
	Options            options
	Wrk                []wrkRound
	Bench              []map[string]result
}

// printFigures writes the paragraph and table of docs/performance.md's webhook figures.
func printFigures(w io.Writer, f figures) {
	wrkRPS := func(p string) float64 {
		return median(f.Wrk, func(r wrkRound) (float64, bool) { v, ok := r[p]; return v.RPS, ok })
	}
	wrkRatio := func(a, b string) float64 {
		return median(f.Wrk, func(r wrkRound) (float64, bool) {
			ra, okA := r[a]
			rb, okB := r[b]
			return ra.RPS / rb.RPS, okA && okB && rb.RPS > 0
		})
	}
	benchRPS := func(p string) float64 {
		return median(f.Bench, func(res map[string]result) (float64, bool) { r, ok := res[p]; return r.RPS(), ok })
	}
	wrkP99 := time.Duration(median(f.Wrk, func(r wrkRound) (float64, bool) {
		v, ok := r["standalone"]
		return float64(v.P99), ok
	}))
	benchP99 := time.Duration(median(f.Bench, p99Fig(phaseAgentbus)) * float64(time.Millisecond))
	ms := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
	}
	o := f.Options
	fmt.Fprintf(w, "**Webhook `echo`** (%s, `%s`; %d instances, %d connections; load average %s), from\n", f.Date, f.Commit, o.Instances, o.Clients, f.Load)
	fmt.Fprintf(w, "`go run ./bench -figures %d -wrk-seconds %d -duration %s -warmup %s`: wrk against the standalone\n", f.Rounds, f.WrkSeconds, o.Duration, o.Warmup)
	fmt.Fprintf(w, "(`bench/wrk.sh %d %d`) and the bench's phases (`-rounds %d`), each a median of %d rounds:\n\n", f.Rounds, f.WrkSeconds, f.Rounds, f.Rounds)
	fmt.Fprintln(w, "| | wrk | bench | target |")
	fmt.Fprintln(w, "|---|---|---|---|")
	fmt.Fprintf(w, "| req/s: bare, pipeline, agentbus | %s, %s, %s | %s, %s, %s | |\n",
		thousands(wrkRPS("bare")), thousands(wrkRPS("pipeline")), thousands(wrkRPS("standalone")),
		thousands(benchRPS(phaseBare)), thousands(benchRPS(phasePipeline)), thousands(benchRPS(phaseAgentbus)))
	fmt.Fprintf(w, "| agentbus / pipeline | **%.3f** | **%.3f** | ≥ %.2f |\n", wrkRatio("standalone", "pipeline"), median(f.Bench, ratioFig(phaseAgentbus, phasePipeline)), targetPipelineRatio)
	fmt.Fprintf(w, "| agentbus / bare | **%.3f** | **%.3f** | ≥ %.2f |\n", wrkRatio("standalone", "bare"), median(f.Bench, ratioFig(phaseAgentbus, phaseBare)), targetRatio)
	fmt.Fprintf(w, "| agentbus p99 | %s | %s | ≤ %s |\n", ms(wrkP99), ms(benchP99), ms(targetP99))
	fmt.Fprintf(w, "| CPU per call: agentbus, pipeline | | %.0f, %.0f µs | |\n", median(f.Bench, cpuFig(phaseAgentbus)), median(f.Bench, cpuFig(phasePipeline)))
}

// thousands formats n rounded, with commas between thousands.
func thousands(n float64) string {
	s := strconv.FormatInt(int64(n+0.5), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// gitCommit is HEAD's short hash, "+" when the work tree has changes, or "unknown".
func gitCommit(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	commit := strings.TrimSpace(string(out))
	if st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		commit += "+"
	}
	return commit
}

// loadAverage is the one-minute load average (Linux), or "?".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}
