package proctest_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/proctest"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

const (
	echoPy   = "EchoPy"
	echoPyWF = "default:EchoPy:Supervisor Workflow:"
)

// The Python kit's Echo (sdk/python/examples/echo.py), a process of its own on a fixed port, is
// registered as a remote agent and served by two workflow host processes. Clients call its count
// webhook on a set of instances, each call with an Idempotency-Key of its own that it is retried
// with until it is answered 200 (untilAnswered). The Echo is killed with SIGKILL three times
// under that load and started again after an outage; then the workflow hosts are killed twice:
// host-1, started again at once, and host-2, left dead for host-1 to take over. Afterwards every
// instance counted exactly its accepted calls (each answer 1..n once, the state's count n),
// nothing is dead-lettered, and the time from each kill until every instance answered again is
// printed.
func TestProcessesRemoteAgentSurvivesKills(t *testing.T) {
	t.Parallel() // beside the other parallel process tests: its callers wait up to 20 s, and it judges no time
	bins := needProcesses(t)
	py := needPython(t)
	nats := proctest.StartNATS(t, bins, proctest.NATSOptions{})
	// The hosts call the Echo on loopback: the tenant's registration must be on the allow-list.
	sys := newSystem(t, bins, nats.URL, "AGENTBUS_OUTBOUND_URLS=http://127.0.0.1:*")
	ids := []string{"host-1", "host-2"}
	for _, id := range ids {
		sys.startHost(id)
	}
	sys.waitSettled(ids, 30*time.Second)

	echo := startEchoPy(t, py, webhooksig.NewStandardSecret())
	ctx := proctest.Context(t, 30*time.Second)
	status, b := sys.do(ctx, http.MethodPost, "/api/v1/admin/tenants/default/agents", sys.key, string(echo.registration))
	require.Equal(t, http.StatusCreated, status, "registering the Echo: %s", b)
	sys.waitSettledAgent(echoPy, remoteHostIDs(echoPy, ids...), 30*time.Second)
	sys.waitAnswersOn(echoPyWF, 20*time.Second)

	const instances, clients = 24, 12
	load := startCountLoadOn(sys, echoPyWF, "rk", instances, clients, 45*time.Second)
	all := make([]string, instances)
	for i := range all {
		all[i] = fmt.Sprintf("rk-%d", i)
	}
	load.waitAccepted(t, 2*instances, 30*time.Second)

	// Phase 1: the Echo is killed three times, each time down for outage.
	const outage = 1500 * time.Millisecond
	var echoAgain []time.Duration
	for round := range 3 {
		time.Sleep(time.Second)
		load.waitAccepted(t, load.accepted()+instances, 30*time.Second)
		echo.Kill()
		killed := time.Now()
		before := load.accepted()
		time.Sleep(outage)
		echo.Restart(t)
		echo.waitListening(t, 10*time.Second)
		restarted := time.Now()
		again := load.answeredAgain(t, all, restarted, 40*time.Second)
		echoAgain = append(echoAgain, again.Sub(killed))
		t.Logf("Echo kill %d: down %v; every instance answered again %v after the kill (%v after the restart); %d calls accepted before it",
			round+1, restarted.Sub(killed).Round(time.Millisecond), again.Sub(killed).Round(time.Millisecond),
			again.Sub(restarted).Round(time.Millisecond), before)
	}

	// Phase 2: host-1 is killed and started again at once, then host-2 is killed and left dead.
	var hostAgain []time.Duration
	for round, victim := range ids {
		time.Sleep(time.Second)
		load.waitAccepted(t, load.accepted()+instances, 30*time.Second)
		sys.hosts[victim].Kill()
		killed := time.Now()
		before := load.accepted()
		how := "left dead"
		if round == 0 {
			sys.startHost(victim)
			how = "started again at once"
		}
		// Answers on their way when the host died may still come from it.
		again := load.answeredAgain(t, all, killed.Add(onTheirWay), 60*time.Second)
		hostAgain = append(hostAgain, again.Sub(killed))
		t.Logf("host kill %d: %s, %s; every instance answered again %v after the kill; %d calls accepted before it",
			round+1, victim, how, again.Sub(killed).Round(time.Millisecond), before)
		if round == 0 {
			sys.waitSettledAgent(echoPy, remoteHostIDs(echoPy, ids...), 30*time.Second)
		}
	}
	load.waitAccepted(t, load.accepted()+instances, 30*time.Second)
	load.finish()

	hostRetries, cut := 0, 0
	for _, id := range ids {
		log := sys.hosts[id].Log()
		hostRetries += strings.Count(log, "webhook handler failed; retrying")
		cut += strings.Count(log, "the answer was cut off")
	}
	t.Logf("%d count calls accepted over %d instances from %d clients; %d of their attempts failed and were retried by the clients; the hosts retried %d calls to the Echo (%d of them after an answer cut off by a kill)",
		load.accepted(), instances, clients, len(load.failures), hostRetries, cut)
	if reasons := load.failureReasons(); reasons != "" {
		t.Logf("failed attempts: %s", reasons)
	}
	t.Logf("kill → every instance answered again: Echo %v (started again %v after each kill), workflow hosts %v",
		roundAll(echoAgain), outage, roundAll(hostAgain))
	load.verify(t)
	sys.noDeadLetters(t, 1)
}

// needPython returns the path of python3. Without it the test is skipped, unless CI is set.
func needPython(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3 is needed to run the Python Echo (CI is set)")
		}
		t.Skip("no python3: the Python Echo is not run")
	}
	return py
}

// pyEcho is the Python kit's Echo running as a process of the test.
type pyEcho struct {
	*proctest.Proc
	port         int
	registration []byte
}

// startEchoPy starts sdk/python/examples/echo.py on a free port that it keeps when restarted,
// with the secret, and reads its registration.
func startEchoPy(t *testing.T, py, secret string) *pyEcho {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "..", "sdk", "python", "examples", "echo.py"))
	require.NoError(t, err)
	e := &pyEcho{port: proctest.FreePort(t)}
	args := []string{"-I", "-S", "-B", script, "--name", echoPy, "--port", fmt.Sprint(e.port), "--secret", secret}
	e.registration, err = exec.Command(py, append(args, "--registration")...).Output()
	require.NoError(t, err, "reading the Echo's registration")
	e.Proc = proctest.Start(t, "echopy", py, args, nil)
	e.waitListening(t, 10*time.Second)
	return e
}

// waitListening waits until the Echo accepts connections.
func (e *pyEcho) waitListening(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", e.port), time.Second)
		if err == nil {
			c.Close()
			return
		}
		require.True(t, e.Running(), "the Echo exited: %s", e.Log())
		require.True(t, time.Now().Before(deadline), "the Echo does not listen within %v: %v", within, err)
		time.Sleep(20 * time.Millisecond)
	}
}

// remoteHostIDs are the ids of the hosts that workflow host processes ids run for a remote agent.
func remoteHostIDs(agent string, ids ...string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id + "/" + subject.Token(agent)
	}
	return out
}

// waitAnswersOn waits until an instance of the agent of wf answers its state webhook.
func (s *system) waitAnswersOn(wf string, within time.Duration) {
	s.t.Helper()
	ctx := proctest.Context(s.t, within)
	for {
		status, b, err := s.webhookOn(ctx, wf, "ready-probe", "state", nil)
		if err == nil && status == http.StatusOK {
			return
		}
		require.NoError(s.t, ctx.Err(), "%s not answered within %v (last: %d %s %v)", wf, within, status, b, err)
		time.Sleep(50 * time.Millisecond)
	}
}

// waitAccepted waits until at least n calls were accepted.
func (l *countLoad) waitAccepted(t *testing.T, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for l.accepted() < n {
		require.True(t, time.Now().Before(deadline), "%d calls accepted, not %d, within %v", l.accepted(), n, within)
		time.Sleep(10 * time.Millisecond)
	}
}

// answeredAgain waits until each of instances had a call answered at since or later, and returns
// when the last of them was.
func (l *countLoad) answeredAgain(t *testing.T, instances []string, since time.Time, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var last time.Time
		missing := []string{}
		l.mu.Lock()
		for _, a := range instances {
			i, _ := slices.BinarySearchFunc(l.times[a], since, func(at, since time.Time) int { return at.Compare(since) })
			if i == len(l.times[a]) {
				missing = append(missing, a)
				continue
			}
			if at := l.times[a][i]; at.After(last) {
				last = at
			}
		}
		l.mu.Unlock()
		if len(missing) == 0 {
			return last
		}
		require.True(t, time.Now().Before(deadline), "instances %v not answered within %v; failed attempts so far: %s",
			missing, within, l.failureReasons())
		time.Sleep(10 * time.Millisecond)
	}
}

func roundAll(ds []time.Duration) string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond).String()
	}
	return strings.Join(out, ", ")
}
