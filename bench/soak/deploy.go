package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/proctest"
)

const (
	adminKey    = "soak-system-admin-key-0123456789"
	tenant      = "default"
	echoWF      = "default:Echo:Supervisor Workflow:"
	participant = "soak"
)

// deployment is the processes of the soak and how to reach them.
type deployment struct {
	t       proctest.T
	nats    *proctest.NATS
	ingress *proctest.Ingress
	hosts   []*proctest.Proc
	// standalone is set when the ingress is the standalone, with its embedded NATS and host: then
	// nats is nil and hosts empty.
	standalone bool
	// pprof is the base URL of the standalone's profiling endpoint; empty otherwise.
	pprof string
	// metrics are the base URLs of the ingress's and the hosts' operator endpoints, by process name.
	metrics map[string]string
	key     string
	client  *http.Client // admin calls and monitoring reads
}

// proc is one process as the samples name it.
type proc struct {
	name string
	p    *proctest.Proc
}

// procs lists the processes in the order the samples print them.
func (d *deployment) procs() []proc {
	if d.standalone {
		return []proc{{"standalone", d.ingress.Proc}}
	}
	ps := []proc{{"nats", d.nats.Proc}, {"ingress", d.ingress.Proc}}
	for _, h := range d.hosts {
		ps = append(ps, proc{h.Name, h})
	}
	return ps
}

// startDeployment starts nats-server, the ingress and the hosts, creates the tenant and a key,
// and waits until every host serves. It fails t (FailNow) when something does not come up.
//
// With standalone it starts the standalone instead (its store in a temporary directory, its NATS
// in-process only, its profiling endpoint on a free port), with env added to its environment,
// and hosts must be 1.
func startDeployment(t proctest.T, bins proctest.Bins, hosts int, standalone bool, env []string) *deployment {
	d := &deployment{t: t, metrics: map[string]string{}, client: &http.Client{Timeout: 10 * time.Second}, standalone: standalone}
	env = append([]string{"AGENTBUS_LOG_LEVEL=info"}, env...)
	metricsAddr := func(name string) string {
		addr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
		d.metrics[name] = "http://" + addr
		return "AGENTBUS_METRICS_ADDR=" + addr
	}
	if standalone {
		port, pprofPort := proctest.FreePort(t), proctest.FreePort(t)
		d.pprof = fmt.Sprintf("http://127.0.0.1:%d", pprofPort)
		d.ingress = &proctest.Ingress{URL: fmt.Sprintf("http://127.0.0.1:%d", port)}
		d.ingress.Proc = proctest.Start(t, "standalone", bins.Standalone, nil, append([]string{
			"AGENTBUS_DATA_DIR=" + t.TempDir(), "AGENTBUS_NATS_LISTEN=", "AGENTBUS_HTTP_ADDR=" + fmt.Sprintf("127.0.0.1:%d", port),
			"AGENTBUS_PPROF_ADDR=" + fmt.Sprintf("127.0.0.1:%d", pprofPort), metricsAddr("standalone"),
			"AGENTBUS_ADMIN_KEY=" + adminKey, "AGENTBUS_RATE_LIMIT=0",
		}, env...))
		proctest.WaitHTTP(t, d.metrics["standalone"]+"/readyz", 60*time.Second)
	} else {
		d.nats = proctest.StartNATS(t, bins, proctest.NATSOptions{})
		d.ingress = proctest.StartIngress(t, bins, "ingress", d.nats.URL, append(env, metricsAddr("ingress"),
			"AGENTBUS_ADMIN_KEY="+adminKey, "AGENTBUS_RATE_LIMIT=0")...)
		for i := range hosts {
			id := fmt.Sprintf("host-%d", i+1)
			d.hosts = append(d.hosts, proctest.StartHost(t, bins, id, d.nats.URL, append(env, metricsAddr(id))...))
		}
		for _, h := range d.hosts {
			proctest.WaitHTTP(t, d.metrics[h.Name]+"/readyz", 60*time.Second)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	status, b, err := d.admin(ctx, http.MethodPost, "/api/v1/admin/tenants", adminKey, `{"id":"default"}`)
	// The standalone seeds tenant default itself (409 tenant-exists).
	if err != nil || (status != http.StatusCreated && status != http.StatusOK && !(standalone && status == http.StatusConflict)) {
		d.fatalf("creating tenant default: %d %s %v", status, b, err)
	}
	status, b, err = d.admin(ctx, http.MethodPost, "/api/v1/admin/tenants/default/keys", adminKey, `{"name":"soak","role":"tenant-admin"}`)
	var k struct {
		Key string `json:"key"`
	}
	if err != nil || status != http.StatusCreated || json.Unmarshal(b, &k) != nil || k.Key == "" {
		d.fatalf("creating a key: %d %s %v", status, b, err)
	}
	d.key = k.Key
	d.waitServing(ctx, hosts)
	return d
}

func (d *deployment) fatalf(format string, args ...any) {
	d.t.Errorf(format, args...)
	d.t.FailNow()
}

// admin sends a request with a bearer key to the ingress.
func (d *deployment) admin(ctx context.Context, method, path, key, body string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, d.ingress.URL+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// waitServing waits until Echo's host method answers for a few instances and the answers name
// every host: the hosts have shared out the partitions and serve them.
func (d *deployment) waitServing(ctx context.Context, hosts int) {
	for {
		seen := map[string]bool{}
		ok := true
		for i := range 32 {
			u := d.ingress.URL + "/api/user/webhooks/" + url.PathEscape(fmt.Sprintf("%sready-%d", echoWF, i)) + "/host?apikey=" + url.QueryEscape(d.key)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
			if err != nil {
				d.fatalf("%v", err)
			}
			var r struct {
				HostID string `json:"hostId"`
			}
			resp, err := d.client.Do(req)
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &r) != nil {
					err = fmt.Errorf("%d %s", resp.StatusCode, b)
				}
			}
			if err != nil {
				ok = false
				break
			}
			seen[r.HostID] = true
		}
		if ok && len(seen) == hosts {
			return
		}
		if ctx.Err() != nil {
			d.fatalf("the hosts did not all serve within a minute")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// watch ends the run (cancel) as soon as one of the processes exits.
func (d *deployment) watch(ctx context.Context, cancel context.CancelCauseFunc) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, p := range d.procs() {
			if !p.p.Running() {
				cancel(fmt.Errorf("%s exited; the end of its log:\n%s", p.name, tail(p.p.Log(), 20)))
				return
			}
		}
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
