// Package proctest runs agentbus as separate processes on loopback, for tests that must kill a
// real process (SIGKILL) rather than stop a goroutine: it builds the binaries (nats-server from
// the nats-server module agentbus depends on, ingress, workflowhost, standalone and bench), starts NATS
// servers, alone or as a cluster, ingress and workflow hosts with their own stores and logs, and
// kills, stops and restarts them.
//
// Every process it starts is killed when the test ends. The processes of a test log to files in
// a directory of their own, named in the test's output when the first one starts and kept when
// the test fails (or when AGENTBUS_PROCTEST_KEEP_LOGS is set); nothing is printed after a
// failure, so that the end of a failed test's output is its failure message. It is not for
// production use, and it needs the go command. Its functions take a T: a test's testing.TB, or
// a command's own (bench/soak runs a deployment of processes this way).
package proctest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stretchr/testify/require"
)

// T is what proctest needs of its caller: a test's testing.TB, or a command that runs processes
// the same way (bench/soak). Cleanup functions run when the caller ends, last registered first;
// Failed tells whether to keep the log directory.
type T interface {
	Helper()
	Cleanup(func())
	TempDir() string
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	FailNow()
	Failed() bool
}

// Bins are the paths of the built binaries.
type Bins struct {
	NATS, Ingress, Host, Standalone, Bench string
}

var (
	buildOnce sync.Once
	built     Bins
	buildErr  error
	buildDir  string
)

// Build builds the binaries once per test process, into a temporary directory that Cleanup
// removes. repoRoot is the module's root directory.
func Build(repoRoot string) (Bins, error) {
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "agentbus-proctest-")
		if buildErr != nil {
			return
		}
		built = Bins{
			NATS:       filepath.Join(buildDir, "nats-server"),
			Ingress:    filepath.Join(buildDir, "ingress"),
			Host:       filepath.Join(buildDir, "workflowhost"),
			Standalone: filepath.Join(buildDir, "standalone"),
			Bench:      filepath.Join(buildDir, "bench"),
		}
		for out, pkg := range map[string]string{
			built.NATS:       "github.com/nats-io/nats-server/v2",
			built.Ingress:    "./services/ingress",
			built.Host:       "./services/workflowhost",
			built.Standalone: "./services/standalone",
			built.Bench:      "./bench",
		} {
			cmd := exec.Command("go", "build", "-o", out, pkg)
			cmd.Dir = repoRoot
			if b, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("building %s: %w\n%s", pkg, err, b)
				return
			}
		}
	})
	return built, buildErr
}

// Cleanup removes the built binaries; call it from TestMain after the tests ran.
func Cleanup() {
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
}

// FreePort returns a free loopback TCP port for a process to listen on. Its ports come from
// below the kernel's ephemeral range (ip_local_port_range), where neither a port-0 listener nor
// the local end of an outgoing connection is ever placed: a port stays free while its process is
// killed and restarted (on loopback, every connection's local end takes an ephemeral port, which
// could otherwise be one a killed NATS node must bind again). No port is handed out twice in one
// test process. It falls back to a kernel-chosen port when that range has no free port.
func FreePort(t T) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	lo, hi := 10000, ephemeralLow()
	for range 200 {
		if hi-lo < 1000 {
			break
		}
		port := lo + rand.IntN(hi-lo)
		if portsGiven[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		portsGiven[port] = true
		return port
	}
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err, "finding a free port")
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !portsGiven[port] {
			portsGiven[port] = true
			return port
		}
	}
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// ephemeralLow returns the lowest port of the kernel's ephemeral range (Linux's default 32768
// where it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return n
}

// Proc is a process started by the test.
type Proc struct {
	Name string
	bin  string
	args []string
	env  []string
	log  string

	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{}
	state *os.ProcessState // of the last run, once it exited
}

// Start starts bin as a process named name (for logs), with args and, on top of the test's
// environment, env ("KEY=value"). Its output goes to name.log in the test's log directory.
func Start(t T, name, bin string, args, env []string) *Proc {
	t.Helper()
	p := &Proc{Name: name, bin: bin, args: args, env: env, log: filepath.Join(logDir(t), name+".log")}
	require.NoError(t, p.start(), "starting %s", name)
	t.Cleanup(p.Kill)
	return p
}

var (
	logDirsMu sync.Mutex
	logDirs   = map[T]string{}
)

// logDir returns the directory the test's processes log to, creating it on the first call. It
// outlives the test when the test fails.
func logDir(t T) string {
	t.Helper()
	logDirsMu.Lock()
	defer logDirsMu.Unlock()
	if dir, ok := logDirs[t]; ok {
		return dir
	}
	dir, err := os.MkdirTemp("", "agentbus-proctest-logs-")
	require.NoError(t, err, "creating a log directory")
	logDirs[t] = dir
	t.Logf("processes log to %s (kept if the test fails)", dir)
	// Registered before any process's Kill, so it runs after all of them.
	t.Cleanup(func() {
		logDirsMu.Lock()
		delete(logDirs, t)
		logDirsMu.Unlock()
		if !t.Failed() && os.Getenv("AGENTBUS_PROCTEST_KEEP_LOGS") == "" {
			_ = os.RemoveAll(dir)
		}
	})
	return dir
}

func (p *Proc) start() error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "=== %s start %s\n", p.Name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.state = cmd.ProcessState
		p.mu.Unlock()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	return nil
}

// Pid returns the process id of the current run.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// Running reports whether the current run has not exited.
func (p *Proc) Running() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL, as a crash or an OOM kill would, and waits until the process is gone.
func (p *Proc) Kill() {
	p.signal(syscall.SIGKILL, time.Minute)
}

// Stop sends SIGTERM and waits up to timeout for a clean exit, then kills. It reports whether
// the process exited by itself.
func (p *Proc) Stop(timeout time.Duration) bool {
	return p.signal(syscall.SIGTERM, timeout)
}

// Pause stops the process with SIGSTOP, as a debugger, a long pause or a frozen VM would: it
// keeps its connections but runs nothing until Resume.
func (p *Proc) Pause() { p.send(syscall.SIGSTOP) }

// Resume lets a paused process go on (SIGCONT).
func (p *Proc) Resume() { p.send(syscall.SIGCONT) }

func (p *Proc) send(sig syscall.Signal) {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	_ = cmd.Process.Signal(sig)
}

// Terminate sends SIGTERM, as an orchestrator stopping the process does, and returns at once;
// Wait tells how the process ended.
func (p *Proc) Terminate() {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGTERM)
}

// Wait waits up to timeout for the current run to exit and returns its exit code (-1 when a
// signal ended it). ok is false when it still runs after timeout.
func (p *Proc) Wait(timeout time.Duration) (code int, ok bool) {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
	case <-time.After(timeout):
		return 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state.ExitCode(), true
}

func (p *Proc) signal(sig syscall.Signal, timeout time.Duration) bool {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	select {
	case <-done:
		return true
	default:
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		return false
	}
}

// Restart starts the process again, with the same arguments, after it exited.
func (p *Proc) Restart(t T) {
	t.Helper()
	require.False(t, p.Running(), "restarting %s while it runs", p.Name)
	require.NoError(t, p.start(), "restarting %s", p.Name)
}

// RSS returns the resident memory of the process in bytes, from /proc (Linux).
func (p *Proc) RSS() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
	if err != nil {
		return 0, fmt.Errorf("reading process status: %w", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("reading VmRSS %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no VmRSS in process status")
}

// CPU returns the CPU time, user and system, that the process with this id has used so far,
// from /proc/{pid}/stat (Linux).
func CPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading process stat: %w", err)
	}
	// The fields after the command name, which is in parentheses and may hold spaces and
	// parentheses: utime and stime are the 14th and 15th of the line, the 12th and 13th after it.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, errors.New("no command name in process stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("too few fields in process stat")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("reading CPU times in process stat: %w", err)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// clockTicks is the unit of /proc's CPU times (USER_HZ), 100 on every Linux platform Go runs on.
const clockTicks = 100

// Log returns the whole log of the process.
func (p *Proc) Log() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// WaitHTTP polls url until it answers 200, failing the test after within.
func WaitHTTP(t T, url string, within time.Duration) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(within)
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			require.FailNowf(t, "not ready", "%s not ready within %v (last: %v)", url, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// NATS is a nats-server process of the test.
type NATS struct {
	*Proc
	ServerName string
	Port       int
	HTTPPort   int
	// URL is its client URL.
	URL string

	opts NATSOptions
	conf string // its config file's path
}

// NATSOptions configure a NATS server process.
type NATSOptions struct {
	// Name of the server, n1 when empty.
	Name string
	// Dir is its JetStream store: keep it to restart on the same data. Default: a temporary one.
	Dir string
	// ClusterPort and Routes make it a cluster member (cluster "agentbus").
	ClusterPort int
	Routes      []string
	// SyncAlways fsyncs every write, as the production configs do.
	SyncAlways bool
	// Token, when set, is the authorization token clients must send
	// (nats://token@127.0.0.1:port). The processes of a test send none: a server that requires
	// one refuses them, and nats.go closes a connection refused twice in a row for good.
	Token string
}

// StartNATS starts a nats-server with JetStream on loopback and waits until it is healthy.
func StartNATS(t T, bins Bins, o NATSOptions) *NATS {
	t.Helper()
	if o.Name == "" {
		o.Name = "n1"
	}
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	n := &NATS{ServerName: o.Name, Port: FreePort(t), HTTPPort: FreePort(t), opts: o}
	n.URL = fmt.Sprintf("nats://127.0.0.1:%d", n.Port)
	n.conf = filepath.Join(t.TempDir(), o.Name+".conf")
	n.writeConf(t)
	n.Proc = Start(t, "nats-"+o.Name, bins.NATS, []string{"-c", n.conf}, nil)
	if o.ClusterPort == 0 {
		n.WaitHealthy(t, 20*time.Second)
	}
	return n
}

// writeConf writes the server's config file from its options.
func (n *NATS) writeConf(t T) {
	t.Helper()
	o := n.opts
	var conf strings.Builder
	fmt.Fprintf(&conf, "server_name: %s\nlisten: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\n", o.Name, n.Port, n.HTTPPort)
	fmt.Fprintf(&conf, "jetstream {\n  store_dir: %q\n", o.Dir)
	if o.SyncAlways {
		conf.WriteString("  sync_interval: always\n")
	}
	conf.WriteString("}\n")
	if o.ClusterPort != 0 {
		fmt.Fprintf(&conf, "cluster {\n  name: agentbus\n  listen: 127.0.0.1:%d\n  routes: [%s]\n}\n", o.ClusterPort, strings.Join(o.Routes, ", "))
	}
	if o.Token != "" {
		fmt.Fprintf(&conf, "authorization {\n  token: %q\n}\n", o.Token)
	}
	require.NoError(t, os.WriteFile(n.conf, []byte(conf.String()), 0o644), "writing the NATS config")
}

// SetToken rewrites the server's config with an authorization token ("" for none, as
// NATSOptions.Token), which takes effect when it starts again (Restart).
func (n *NATS) SetToken(t T, token string) {
	t.Helper()
	n.opts.Token = token
	n.writeConf(t)
}

// WaitHealthy waits until the server reports JetStream healthy.
func (n *NATS) WaitHealthy(t T, within time.Duration) {
	t.Helper()
	WaitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/healthz?js-enabled-only=true", n.HTTPPort), within)
}

// WaitCurrent waits until the server reports every stream and consumer it holds a replica of
// current (its /healthz without options): a node restarted on its data has caught up.
func (n *NATS) WaitCurrent(t T, within time.Duration) {
	t.Helper()
	WaitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/healthz", n.HTTPPort), within)
}

// Cluster is a NATS cluster of processes.
type Cluster struct {
	Nodes []*NATS
}

// StartCluster starts size NATS servers n1, n2, … routed to each other and waits until
// JetStream has a meta leader.
func StartCluster(t T, bins Bins, size int, syncAlways bool) *Cluster {
	t.Helper()
	ports := make([]int, size)
	routes := make([]string, size)
	for i := range ports {
		ports[i] = FreePort(t)
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", ports[i])
	}
	c := &Cluster{}
	for i := range size {
		c.Nodes = append(c.Nodes, StartNATS(t, bins, NATSOptions{Name: fmt.Sprintf("n%d", i+1), ClusterPort: ports[i], Routes: routes, SyncAlways: syncAlways}))
	}
	for _, n := range c.Nodes {
		WaitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/healthz?js-meta-only=true", n.HTTPPort), 30*time.Second)
	}
	c.waitMetaPeers(t, 30*time.Second)
	return c
}

// waitMetaPeers waits until the JetStream meta leader counts every other node as a current
// peer: until then it refuses to place a replicated stream ("no suitable peers for placement,
// peer offline"), which a service starting at once would be told.
func (c *Cluster) waitMetaPeers(t T, within time.Duration) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(within)
	for {
		for _, n := range c.Nodes {
			var jsz struct {
				Meta *struct {
					Leader   string `json:"leader"`
					Replicas []struct {
						Current bool `json:"current"`
						Offline bool `json:"offline"`
					} `json:"replicas"`
				} `json:"meta_cluster"`
			}
			resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/jsz", n.HTTPPort))
			if err != nil {
				continue
			}
			err = json.NewDecoder(resp.Body).Decode(&jsz)
			resp.Body.Close()
			if err != nil || jsz.Meta == nil || jsz.Meta.Leader != n.ServerName || len(jsz.Meta.Replicas) != len(c.Nodes)-1 {
				continue
			}
			current := true
			for _, r := range jsz.Meta.Replicas {
				current = current && r.Current && !r.Offline
			}
			if current {
				return
			}
		}
		require.True(t, time.Now().Before(deadline), "the JetStream meta leader does not count every node as a current peer within %v", within)
		time.Sleep(50 * time.Millisecond)
	}
}

// URLs returns the client URLs of all nodes, comma-separated.
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		urls[i] = n.URL
	}
	return strings.Join(urls, ",")
}

// Node returns the node with the given server name, or nil.
func (c *Cluster) Node(name string) *NATS {
	for _, n := range c.Nodes {
		if n.ServerName == name {
			return n
		}
	}
	return nil
}

// Ingress is an ingress process of the test.
type Ingress struct {
	*Proc
	URL string
}

// StartIngress starts an ingress against natsURL with the given extra environment and waits
// until it serves.
func StartIngress(t T, bins Bins, name, natsURL string, env ...string) *Ingress {
	t.Helper()
	port := FreePort(t)
	in := &Ingress{URL: fmt.Sprintf("http://127.0.0.1:%d", port)}
	in.Proc = Start(t, name, bins.Ingress, nil, append([]string{
		"AGENTBUS_NATS_URL=" + natsURL, "AGENTBUS_HTTP_ADDR=" + fmt.Sprintf("127.0.0.1:%d", port),
	}, env...))
	WaitHTTP(t, in.URL+"/healthz", 30*time.Second)
	return in
}

// StartHost starts a workflow host with the given id against natsURL. It does not wait: the
// test watches the host's heartbeat.
func StartHost(t T, bins Bins, id, natsURL string, env ...string) *Proc {
	t.Helper()
	return Start(t, id, bins.Host, nil, append([]string{"AGENTBUS_NATS_URL=" + natsURL, "AGENTBUS_HOST_ID=" + id}, env...))
}

// Context returns a context that ends with the test or after d.
func Context(t T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
