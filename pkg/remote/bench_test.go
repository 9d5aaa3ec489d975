package remote_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/proctest"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// BenchmarkRemoteWebhookEcho calls the webhook echo of the Go Echo and of the Python and
// TypeScript kits' Echos, registered as remote agents, through the whole stack (keep-alive
// clients, 100 conversations), and prints each one's rate and p99 and the remote ones' rates as
// shares of Go's. The three take turns for AGENTBUS_BENCH_ROUNDS rounds (3) of
// AGENTBUS_BENCH_CALLS calls (20,000) over AGENTBUS_BENCH_CLIENTS clients (64), and the shares are
// the medians of the rounds' shares. On Linux each round also prints the CPU time per call of
// this process (the stack and the load generator) and of the agent's own process.
func BenchmarkRemoteWebhookEcho(b *testing.B) {
	b.Cleanup(benchClient.CloseIdleConnections)
	pyReg, pyProc := startPythonEchoProcess(b, webhooksig.NewStandardSecret())
	tsReg, tsProc := startTypeScriptEcho(b, webhooksig.NewStandardSecret())
	s := stacktest.Start(b, stacktest.Options{})
	urls := map[string]string{"Go": s.URL + "/api/user/webhooks/Echo/echo?apikey=" + s.Key}
	procs := map[string]*os.Process{"Python": pyProc, "TypeScript": tsProc}
	for name, reg := range map[string]map[string]any{"Python": pyReg, "TypeScript": tsReg} {
		if reg == nil {
			continue
		}
		status, _ := call(b, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/agents", s.Key, reg, nil)
		require.Equal(b, http.StatusCreated, status)
		agent := reg["name"].(string)
		require.NoError(b, s.WaitLive(b.Context(), agent))
		urls[name] = s.URL + "/api/user/webhooks/" + agent + "/echo?apikey=" + s.Key
	}
	calls := envInt(b, "AGENTBUS_BENCH_CALLS", 20000)
	clients, rounds := envInt(b, "AGENTBUS_BENCH_CLIENTS", 64), envInt(b, "AGENTBUS_BENCH_ROUNDS", 3)
	names := []string{"Go", "Python", "TypeScript"}
	for _, u := range urls {
		measure(b, u, calls/3, clients) // warm up
	}
	for range b.N {
		shares := map[string][]float64{}
		for round := range rounds {
			runs := map[string]run{}
			line := fmt.Sprintf("round %d, webhook echo, %d calls over %d clients and 100 conversations:", round+1, calls, clients)
			for _, name := range names {
				u, ok := urls[name]
				if !ok {
					continue
				}
				proc := procs[name]
				self, agent := processCPU(nil), time.Duration(0)
				if proc != nil {
					agent = processCPU(proc)
				}
				r := measure(b, u, calls, clients)
				self = processCPU(nil) - self
				if proc != nil {
					agent = processCPU(proc) - agent
				}
				runs[name] = r
				line += fmt.Sprintf(" %s %.0f/s p50 %v p99 %v (%.2f of Go)", name, r.rate, r.p50.Round(time.Microsecond*10),
					r.p99.Round(time.Microsecond*10), r.rate/runs["Go"].rate)
				if self > 0 {
					line += fmt.Sprintf(", CPU per call: stack %v", self/time.Duration(calls))
				}
				if agent > 0 {
					line += fmt.Sprintf(", agent %v", agent/time.Duration(calls))
				}
				line += ";"
				shares[name] = append(shares[name], r.rate/runs["Go"].rate)
			}
			b.Log(line)
		}
		line := fmt.Sprintf("median of %d rounds:", rounds)
		for _, name := range names[1:] {
			if len(shares[name]) == 0 {
				continue
			}
			slices.Sort(shares[name])
			m := shares[name][len(shares[name])/2]
			line += fmt.Sprintf(" %s %.2f of Go;", name, m)
			b.ReportMetric(m, strings.ToLower(name)+"/go")
		}
		b.Log(line)
	}
}

// envInt is the environment variable's whole number, or def when it is not set.
func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(b, err, name)
	require.Positive(b, n, name)
	return n
}

// processCPU returns the CPU time, user and system, that the process (this one when nil) has
// used so far; 0 where the system does not tell it (/proc of Linux).
func processCPU(p *os.Process) time.Duration {
	pid := os.Getpid()
	if p != nil {
		pid = p.Pid
	}
	d, _ := proctest.CPU(pid)
	return d
}

// startTypeScriptEcho runs the TypeScript kit's compiled Echo (sdk/typescript/dist, which
// go test ./sdk/typescript builds) and returns its registration and process; nil when it is not
// built.
func startTypeScriptEcho(b *testing.B, secret string) (map[string]any, *os.Process) {
	_, here, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(here), "..", "..", "sdk", "typescript", "dist", "examples", "echo.js")
	node, err := exec.LookPath("node")
	if _, serr := os.Stat(script); err != nil || serr != nil {
		b.Log("no node or no sdk/typescript/dist (go test ./sdk/typescript builds it): the TypeScript Echo is left out")
		return nil, nil
	}
	cmd := exec.Command(node, script, "--port", "0", "--secret", secret)
	out, err := cmd.StdoutPipe()
	require.NoError(b, err)
	require.NoError(b, cmd.Start())
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var reg map[string]any
	require.NoError(b, json.NewDecoder(out).Decode(&reg))
	return reg, cmd.Process
}

type run struct {
	p50, p99 time.Duration
	rate     float64
}

// benchClient keeps a connection per client alive (http.DefaultTransport keeps two).
var benchClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// measure makes n POSTs to url over the given clients, on keep-alive connections.
func measure(b *testing.B, url string, n, clients int) run {
	var mu sync.Mutex
	var all []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		wg.Go(func() {
			for i := c; i < n; i += clients {
				t0 := time.Now()
				// 100 conversations: one conversation's calls run one at a time.
				resp, err := benchClient.Post(url+"&participantId=c"+strconv.Itoa(i%100), "application/json", bytes.NewReader([]byte(`{"n":1}`)))
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Errorf("%s answered %d", url, resp.StatusCode)
					return
				}
				d := time.Since(t0)
				mu.Lock()
				all = append(all, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	slices.Sort(all)
	return run{p50: all[len(all)/2], p99: all[len(all)*99/100], rate: float64(len(all)) / took.Seconds()}
}
