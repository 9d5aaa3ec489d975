package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentbus/agentbus/pkg/gogc"
	"github.com/agentbus/agentbus/pkg/proctest"
)

// The processes phase is the scaled-out deployment on this machine: nats-server, one ingress and
// one workflow host, each a process of its own built from this module (or taken from -bins),
// talking over loopback TCP as they would over a network. The load is the agentbus phase's, and
// its CPU per call counts all four processes (the servers and the load generator).
const phaseProcesses = "processes"

// Process names, which also name their logs and profiles.
const (
	procNATS    = "nats"
	procIngress = "ingress"
	procHost    = "workflowhost"
)

// procNames lists the server processes in the order they start.
var procNames = []string{procNATS, procIngress, procHost}

// procBinaries are the paths of the processes' binaries.
type procBinaries struct{ nats, ingress, host string }

var (
	procBinsOnce sync.Once
	procBins     procBinaries
	procBinsErr  error
)

// processBinaries returns the binaries of the processes phase: those in dir when it is given
// (nats-server, ingress and workflowhost), else built once per run from this module into a
// temporary directory, removed by removeBuilt.
func processBinaries(ctx context.Context, dir string) (procBinaries, error) {
	procBinsOnce.Do(func() {
		if dir != "" {
			procBins = procBinaries{filepath.Join(dir, "nats-server"), filepath.Join(dir, "ingress"), filepath.Join(dir, "workflowhost")}
			for _, b := range []string{procBins.nats, procBins.ingress, procBins.host} {
				if _, err := os.Stat(b); err != nil {
					procBinsErr = fmt.Errorf("-bins: %w", err)
					return
				}
			}
			return
		}
		procBins, procBinsErr = buildProcesses(ctx)
	})
	return procBins, procBinsErr
}

// builtDir is the temporary directory the binaries were built into, if any.
var builtDir string

// removeBuilt removes the binaries built for the processes phase.
func removeBuilt() {
	if builtDir != "" {
		_ = os.RemoveAll(builtDir)
	}
}

// buildProcesses builds nats-server (the version this module depends on), ingress and
// workflowhost from the module the command runs in.
func buildProcesses(ctx context.Context) (procBinaries, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/agentbus/agentbus").Output()
	if err != nil {
		return procBinaries{}, fmt.Errorf("finding the agentbus module (run bench inside the repository, or give -bins): %w", err)
	}
	root := strings.TrimSpace(string(out))
	if builtDir, err = os.MkdirTemp("", "agentbus-bench-bin-"); err != nil {
		return procBinaries{}, err
	}
	fmt.Fprintf(os.Stderr, "building nats-server, ingress and workflowhost…\n")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", builtDir+string(filepath.Separator),
		"github.com/nats-io/nats-server/v2", "./services/ingress", "./services/workflowhost")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return procBinaries{}, fmt.Errorf("building the processes: %w\n%s", err, b)
	}
	return procBinaries{filepath.Join(builtDir, "nats-server"), filepath.Join(builtDir, "ingress"), filepath.Join(builtDir, "workflowhost")}, nil
}

// child is a server process of the processes phase.
type child struct {
	name  string
	cmd   *exec.Cmd
	done  chan struct{}
	pprof string // base URL of its profiling endpoint
}

// stop asks the process to exit (SIGTERM) and kills it after a while.
func (c *child) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(15 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// cpu is the CPU time, user and system, the process has used so far (Linux: /proc); 0 when it
// cannot be read.
func (c *child) cpu() time.Duration {
	d, _ := proctest.CPU(c.cmd.Process.Pid)
	return d
}

// syscalls is how many read and write system calls the process made so far (Linux: /proc).
func syscalls(pid string) (reads, writes int64) {
	b, err := os.ReadFile("/proc/" + pid + "/io")
	if err != nil {
		return 0, 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "syscr: "); ok {
			reads, _ = strconv.ParseInt(v, 10, 64)
		} else if v, ok := strings.CutPrefix(line, "syscw: "); ok {
			writes, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return reads, writes
}

// procUsage is what a process used: CPU time, and read and write system calls (sockets, files
// and pipes alike).
type procUsage struct {
	CPU           time.Duration
	Reads, Writes int64
}

func (u procUsage) minus(v procUsage) procUsage {
	return procUsage{u.CPU - v.CPU, u.Reads - v.Reads, u.Writes - v.Writes}
}

func (c *child) usage() procUsage {
	r, w := syscalls(strconv.Itoa(c.cmd.Process.Pid))
	return procUsage{c.cpu(), r, w}
}

// selfUsage is this process's usage: the load generator's, in the processes phase.
func selfUsage() procUsage {
	r, w := syscalls("self")
	return procUsage{processCPU(), r, w}
}

// procEnv is extra environment of the processes, by process name or "all", from -penv.
type procEnv map[string][]string

func (p procEnv) String() string {
	var parts []string
	for _, name := range append([]string{"all"}, procNames...) {
		for _, kv := range p[name] {
			parts = append(parts, name+":"+kv)
		}
	}
	return strings.Join(parts, ",")
}

// Set reads one "name:KEY=VALUE" (name: nats, ingress, workflowhost or all).
func (p procEnv) Set(v string) error {
	name, kv, ok := strings.Cut(v, ":")
	if !ok || !strings.Contains(kv, "=") || (name != "all" && !slices.Contains(procNames, name)) {
		return fmt.Errorf("%q: want name:KEY=VALUE with name one of all, %s", v, strings.Join(procNames, ", "))
	}
	p[name] = append(p[name], kv)
	return nil
}

// of returns the extra environment of process name.
func (p procEnv) of(name string) []string {
	return append(append([]string(nil), p["all"]...), p[name]...)
}

// startProcesses starts nats-server, an ingress and a workflow host as processes on loopback,
// each with a store or log in a temporary directory, creates tenant default with a tenant-admin
// key, waits until a webhook call goes through and returns the load of o.Target against them and
// a function that stops them and removes the directory.
func startProcesses(ctx context.Context, o options) (ep endpoint, stop func() error, err error) {
	bins, err := processBinaries(ctx, o.Bins)
	if err != nil {
		return endpoint{}, nil, err
	}
	dir, err := os.MkdirTemp("", "agentbus-bench-processes-")
	if err != nil {
		return endpoint{}, nil, err
	}
	var children []*child
	stop = func() error {
		for i := len(children) - 1; i >= 0; i-- {
			children[i].stop()
		}
		if os.Getenv("AGENTBUS_BENCH_KEEP_LOGS") != "" {
			fmt.Fprintf(os.Stderr, "bench: the processes' logs and store are in %s\n", dir)
			return nil
		}
		return os.RemoveAll(dir)
	}
	defer func() {
		if err != nil {
			if len(children) > 0 {
				err = fmt.Errorf("%w (logs: %s)", err, dir)
				for _, c := range children {
					c.stop()
				}
				return
			}
			_ = stop()
		}
	}()
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()

	ports, err := freePorts(7)
	if err != nil {
		return endpoint{}, nil, err
	}
	natsPort, natsMon, natsProf, httpPort, ingressProf, hostOps, hostProf := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5], ports[6]
	start := func(name, bin string, args, env []string) (*child, error) {
		f, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(bin, args...)
		cmd.Env = append(append(os.Environ(), env...), o.ProcEnv.of(name)...)
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Start(); err != nil {
			f.Close()
			return nil, fmt.Errorf("starting %s: %w", name, err)
		}
		c := &child{name: name, cmd: cmd, done: make(chan struct{})}
		go func() { _ = cmd.Wait(); f.Close(); close(c.done) }()
		children = append(children, c)
		return c, nil
	}

	conf := filepath.Join(dir, "nats.conf")
	store := filepath.Join(dir, "store")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "server_name: bench\nlisten: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\nprof_port: %d\njetstream {\n  store_dir: %q\n}\n",
		natsPort, natsMon, natsProf, store), 0o644); err != nil {
		return endpoint{}, nil, err
	}
	// nats-server collects garbage as the deploy configs have it, the agentbus binaries as they
	// set it themselves, unless the environment gives GOGC.
	var natsEnv []string
	if os.Getenv("GOGC") == "" {
		natsEnv = []string{"GOGC=" + strconv.Itoa(gogc.Default)}
	}
	n, err := start(procNATS, bins.nats, []string{"-c", conf}, natsEnv)
	if err != nil {
		return endpoint{}, nil, err
	}
	n.pprof = fmt.Sprintf("http://127.0.0.1:%d", natsProf)
	if err := waitOK(sctx, n, fmt.Sprintf("http://127.0.0.1:%d/healthz?js-enabled-only=true", natsMon)); err != nil {
		return endpoint{}, nil, err
	}

	natsURL := fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
	adminKey := randomKey()
	common := []string{"AGENTBUS_NATS_URL=" + natsURL, fmt.Sprintf("AGENTBUS_PARTITIONS=%d", o.Partitions), "AGENTBUS_LOG_LEVEL=info"}
	base := fmt.Sprintf("http://127.0.0.1:%d", httpPort)
	in, err := start(procIngress, bins.ingress, nil, append(common,
		fmt.Sprintf("AGENTBUS_HTTP_ADDR=127.0.0.1:%d", httpPort),
		fmt.Sprintf("AGENTBUS_PPROF_ADDR=127.0.0.1:%d", ingressProf),
		"AGENTBUS_ADMIN_KEY="+adminKey,
		// As the in-process stack: no rate limit, and room for every client's call.
		"AGENTBUS_RATE_LIMIT=0",
		"AGENTBUS_MAX_WAITING_PER_TENANT=100000"))
	if err != nil {
		return endpoint{}, nil, err
	}
	in.pprof = fmt.Sprintf("http://127.0.0.1:%d", ingressProf)
	host, err := start(procHost, bins.host, nil, append(common,
		"AGENTBUS_HOST_ID=bench-host",
		fmt.Sprintf("AGENTBUS_METRICS_ADDR=127.0.0.1:%d", hostOps),
		fmt.Sprintf("AGENTBUS_PPROF_ADDR=127.0.0.1:%d", hostProf)))
	if err != nil {
		return endpoint{}, nil, err
	}
	host.pprof = fmt.Sprintf("http://127.0.0.1:%d", hostProf)
	if err := waitOK(sctx, in, base+"/healthz"); err != nil {
		return endpoint{}, nil, err
	}
	if err := waitOK(sctx, host, fmt.Sprintf("http://127.0.0.1:%d/readyz", hostOps)); err != nil {
		return endpoint{}, nil, err
	}

	key, err := createKey(sctx, base, adminKey)
	if err != nil {
		return endpoint{}, nil, err
	}
	if ep, err = newEndpoint(o, base, key); err != nil {
		return endpoint{}, nil, err
	}
	// The key reaches the ingress through its watch of the keys bucket, and the ingress learns
	// of the host from its heartbeat: one call of the load going through says both did.
	client := newClient(1)
	defer client.CloseIdleConnections()
	for {
		_, err := post(sctx, client, ep, ep.reqs[0])
		if err == nil {
			break
		}
		if !sleepUntil(sctx, time.Now().Add(20*time.Millisecond)) {
			return endpoint{}, nil, fmt.Errorf("the processes did not answer a call within a minute: %w", err)
		}
	}
	ep.others = func() map[string]procUsage {
		u := make(map[string]procUsage, len(children)+1)
		u["bench"] = selfUsage()
		for _, c := range children {
			u[c.name] = c.usage()
		}
		return u
	}
	varz := fmt.Sprintf("http://127.0.0.1:%d/varz", natsMon)
	ep.msgs = func() (in, out int64) { return natsMsgs(varz) }
	ep.profile = func(prefix string, d time.Duration) func() {
		return profileChildren(children, prefix, d)
	}
	return ep, stop, nil
}

// profileChildren fetches a CPU profile of d from each child into prefix.name, and returns a
// function that waits for them.
func profileChildren(children []*child, prefix string, d time.Duration) (wait func()) {
	secs := max(1, int(math.Round(d.Seconds())))
	var wg sync.WaitGroup
	for _, c := range children {
		wg.Go(func() {
			if err := fetchProfile(c.pprof+"/debug/pprof/profile?seconds="+strconv.Itoa(secs), prefix+"."+c.name, d); err != nil {
				fmt.Fprintf(os.Stderr, "bench: profiling %s: %v\n", c.name, err)
			}
		})
	}
	return wg.Wait
}

func fetchProfile(url, file string, d time.Duration) error {
	client := &http.Client{Timeout: d + 30*time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	return errors.Join(err, f.Close())
}

// natsMsgs reads the messages a NATS server received and sent so far from its /varz.
func natsMsgs(varz string) (in, out int64) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(varz)
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	var v struct {
		InMsgs  int64 `json:"in_msgs"`
		OutMsgs int64 `json:"out_msgs"`
	}
	if json.NewDecoder(resp.Body).Decode(&v) != nil {
		return 0, 0
	}
	return v.InMsgs, v.OutMsgs
}

// waitOK polls url until it answers 200, while c runs.
func waitOK(ctx context.Context, c *child, url string) error {
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		select {
		case <-c.done:
			return fmt.Errorf("%s exited while starting", c.name)
		case <-ctx.Done():
			return fmt.Errorf("%s not ready (%s): %w", c.name, url, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// createKey creates tenant default and a tenant-admin key of it through the admin API.
func createKey(ctx context.Context, base, adminKey string) (string, error) {
	do := func(path, body string, ok ...int) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+adminKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, s := range ok {
			if resp.StatusCode == s {
				return b, nil
			}
		}
		return nil, fmt.Errorf("POST %s: status %d: %s", path, resp.StatusCode, bytes.TrimSpace(b))
	}
	if _, err := do("/api/v1/admin/tenants", `{"id":"`+benchTenant+`"}`, http.StatusCreated, http.StatusOK, http.StatusConflict); err != nil {
		return "", err
	}
	b, err := do("/api/v1/admin/tenants/"+benchTenant+"/keys", `{"name":"bench","role":"tenant-admin"}`, http.StatusCreated)
	if err != nil {
		return "", err
	}
	var k struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(b, &k); err != nil || k.Key == "" {
		return "", fmt.Errorf("creating a key: no key in %s", b)
	}
	return k.Key, nil
}

// freePorts returns n distinct free loopback ports.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func randomKey() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
