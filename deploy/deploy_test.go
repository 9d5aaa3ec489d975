// Package deploy_test checks the deployment files statically: docker-compose.yml with the NATS
// configuration it mounts, and the Kubernetes manifests in deploy/k8s. It needs no Docker engine
// and no cluster, so CI runs it on every change; it catches what a YAML linter cannot, such as a
// service without a health check, a probe on a port the container does not open, a manifest
// missing from the kustomization, or a NATS node that does not fsync.
//
// Where the docker compose plugin is installed it also lets Compose itself validate the file.
package deploy_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Roles of the Compose services.
const (
	roleNATS         = "nats"
	roleIngress      = "ingress"
	roleWorkflowHost = "workflowhost"
)

// role says what a Compose service runs: the agentbus binary its image is built for (build arg
// SERVICE of deploy/docker/Dockerfile), or NATS.
func role(s composeService) string {
	if s.Build != nil && s.Build.Args["SERVICE"] != "" {
		return s.Build.Args["SERVICE"]
	}
	if strings.HasPrefix(s.Image, "nats:") || strings.HasPrefix(s.Image, "nats@") {
		return roleNATS
	}
	return ""
}

// byRole returns the names of the services of one role, sorted.
func byRole(c composeFile, r string) []string {
	var out []string
	for name, s := range c.Services {
		if role(s) == r {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// agentbusServices returns the names of the services that run an agentbus binary, sorted.
func agentbusServices(c composeFile) []string {
	return slices.Sorted(slices.Values(append(byRole(c, roleIngress), byRole(c, roleWorkflowHost)...)))
}

func TestComposeServices(t *testing.T) {
	c, _ := loadCompose(t)
	tests := []struct {
		name string
		role string
	}{
		{name: "nats-1", role: roleNATS},
		{name: "nats-2", role: roleNATS},
		{name: "nats-3", role: roleNATS},
		{name: "ingress-1", role: roleIngress},
		{name: "ingress-2", role: roleIngress},
		{name: "workflowhost-1", role: roleWorkflowHost},
		{name: "workflowhost-2", role: roleWorkflowHost},
		{name: "workflowhost-3", role: roleWorkflowHost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, ok := c.Services[tt.name]
			require.True(t, ok, "docker-compose.yml has no service %s", tt.name)
			assert.Equal(t, tt.role, role(s))
			if tt.role != roleNATS {
				require.NotNil(t, s.Build)
				assert.FileExists(t, filepath.Join(repoRoot, s.Build.Context, s.Build.Dockerfile))
			}
		})
	}
}

func TestComposeHealthchecks(t *testing.T) {
	c, _ := loadCompose(t)
	for name, s := range c.Services {
		t.Run(name, func(t *testing.T) {
			hc := s.Healthcheck
			require.NotNil(t, hc, "every service needs a healthcheck")
			assert.False(t, hc.Disable, "healthcheck disabled")
			require.NotEmpty(t, hc.Test, "healthcheck without a test")
			assert.NotEqual(t, "NONE", hc.Test[0], "healthcheck disabled")
			if hc.Test[0] == "CMD" || hc.Test[0] == "CMD-SHELL" {
				require.Greater(t, len(hc.Test), 1, "%s without a command", hc.Test[0])
				assert.NotEmpty(t, strings.TrimSpace(hc.Test[1]))
			}
			if r := role(s); r == roleIngress || r == roleWorkflowHost {
				// The distroless image has no shell, so no CMD-SHELL and no curl: the binary
				// checks itself.
				assert.Equal(t, stringOrList{"CMD", "/app", "healthcheck"}, hc.Test)
			}
			for field, d := range map[string]string{"interval": hc.Interval, "timeout": hc.Timeout, "start_period": hc.StartPeriod} {
				if d != "" {
					_, err := time.ParseDuration(d)
					assert.NoError(t, err, "healthcheck %s", field)
				}
			}
		})
	}
}

func TestComposeSharedSettings(t *testing.T) {
	c, _ := loadCompose(t)
	natsServices := byRole(c, roleNATS)
	require.Len(t, natsServices, 3)
	var wantNATS []string
	for _, n := range natsServices {
		wantNATS = append(wantNATS, n+":4222")
	}
	partitions := map[string][]string{}
	for _, name := range agentbusServices(c) {
		t.Run(name, func(t *testing.T) {
			env := c.Services[name].Environment
			var got []string
			for _, u := range strings.Split(env["AGENTBUS_NATS_URL"], ",") {
				got = append(got, strings.TrimPrefix(strings.TrimSpace(u), "nats://"))
			}
			slices.Sort(got)
			assert.Equal(t, wantNATS, got, "AGENTBUS_NATS_URL must list every NATS node")
			assert.Equal(t, "3", env["AGENTBUS_REPLICAS"], "streams R3 on the 3-node cluster")
			require.Contains(t, env, "AGENTBUS_PARTITIONS")
			partitions[env["AGENTBUS_PARTITIONS"]] = append(partitions[env["AGENTBUS_PARTITIONS"]], name)
		})
	}
	assert.Len(t, partitions, 1, "AGENTBUS_PARTITIONS must be the same in every service: %v", partitions)
}

func TestComposeWorkflowHosts(t *testing.T) {
	c, _ := loadCompose(t)
	hosts := byRole(c, roleWorkflowHost)
	require.Len(t, hosts, 3)
	owner := map[string]string{} // host id → service
	for _, name := range hosts {
		t.Run(name, func(t *testing.T) {
			env := c.Services[name].Environment
			id := env["AGENTBUS_HOST_ID"]
			require.NotEmpty(t, id, "a host id decides partition ownership: give each host its own")
			assert.NotContains(t, id, "$", "a fixed id, not one from the shell")
			if other, dup := owner[id]; dup {
				assert.Failf(t, "duplicate host id", "%s and %s both have AGENTBUS_HOST_ID %q", other, name, id)
			}
			owner[id] = name

			addr := env["AGENTBUS_METRICS_ADDR"]
			require.NotEmpty(t, addr, "the healthcheck asks /readyz on AGENTBUS_METRICS_ADDR")
			port, err := addrPort(addr)
			require.NoError(t, err)
			assert.Positive(t, port, "a fixed port: the healthcheck cannot find a random one")
			assert.NotContains(t, env, "AGENTBUS_ADMIN_KEY", "hosts do not need the admin key")
		})
	}
}

func TestComposeIngressPorts(t *testing.T) {
	c, _ := loadCompose(t)
	tests := []struct {
		name     string
		hostPort string
	}{
		{name: "ingress-1", hostPort: "8080"},
		{name: "ingress-2", hostPort: "8081"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, ok := c.Services[tt.name]
			require.True(t, ok)
			listen, err := addrPort(s.Environment["AGENTBUS_HTTP_ADDR"])
			require.NoError(t, err, "AGENTBUS_HTTP_ADDR")
			assert.Equal(t, 8080, listen)
			var published []string
			for _, p := range s.Ports {
				published = append(published, p.Published+"->"+p.Target)
			}
			assert.Contains(t, published, tt.hostPort+"->"+strconv.Itoa(listen))
			assert.Regexp(t, `^\$\{AGENTBUS_ADMIN_KEY:\?[^}]+\}$`, s.Environment["AGENTBUS_ADMIN_KEY"],
				"the admin key has no default: Compose must refuse to start without it")
		})
	}
}

func TestComposeInterpolation(t *testing.T) {
	_, values := loadCompose(t)
	tests := []struct {
		name      string
		env       map[string]string
		wantUnset []string
	}{
		{name: "admin key set", env: map[string]string{"AGENTBUS_ADMIN_KEY": strings.Repeat("k", 32)}},
		{name: "admin key empty", env: map[string]string{"AGENTBUS_ADMIN_KEY": ""}, wantUnset: []string{"AGENTBUS_ADMIN_KEY"}},
		{name: "nothing set", env: map[string]string{}, wantUnset: []string{"AGENTBUS_ADMIN_KEY"}},
		{name: "optional settings set", env: map[string]string{"AGENTBUS_ADMIN_KEY": strings.Repeat("k", 32), "AGENTBUS_PARTITIONS": "64"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			unset := map[string]bool{}
			for _, v := range values {
				_, err := interpolate(v, tt.env)
				if err == nil {
					continue
				}
				if !assert.ErrorIs(t, err, errUnset, "%q", v) {
					continue
				}
				unset[strings.SplitN(err.Error(), ":", 2)[0]] = true
			}
			assert.ElementsMatch(t, tt.wantUnset, slices.Collect(maps.Keys(unset)))
		})
	}

	t.Run("partitions default", func(t *testing.T) {
		c, _ := loadCompose(t)
		got, err := interpolate(c.Services["workflowhost-1"].Environment["AGENTBUS_PARTITIONS"], nil)
		require.NoError(t, err)
		assert.Equal(t, "16", got, "the binaries' default")
	})
}

func TestComposeDependencies(t *testing.T) {
	c, _ := loadCompose(t)
	for name, s := range c.Services {
		t.Run(name, func(t *testing.T) {
			for dep, cond := range s.DependsOn {
				d, ok := c.Services[dep]
				if !assert.True(t, ok, "depends on unknown service %s", dep) {
					continue
				}
				if cond == "service_healthy" {
					assert.NotNil(t, d.Healthcheck, "waits for %s to be healthy, which has no healthcheck", dep)
				}
			}
			for _, v := range s.Volumes {
				src, _, _ := strings.Cut(v, ":")
				if strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") {
					continue // a bind mount; TestComposeNATSConfig checks the one we have
				}
				assert.Contains(t, c.Volumes, src, "named volume %s is not declared under volumes:", src)
			}
			if role(s) != roleNATS {
				for _, n := range byRole(c, roleNATS) {
					assert.Equal(t, "service_healthy", s.DependsOn[n], "start once %s is healthy", n)
				}
			}
		})
	}
}

// configArg returns the path given to nats-server's --config (or -c).
func configArg(cmd []string) string {
	for i, a := range cmd {
		if (a == "--config" || a == "-c") && i+1 < len(cmd) {
			return cmd[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			return v
		}
	}
	return ""
}

func TestComposeNATSConfig(t *testing.T) {
	c, _ := loadCompose(t)
	nodes := byRole(c, roleNATS)
	require.Len(t, nodes, 3)
	var wantRoutes []string
	for _, n := range nodes {
		wantRoutes = append(wantRoutes, n+":6222")
	}
	names := map[string]string{}
	for _, name := range nodes {
		t.Run(name, func(t *testing.T) {
			s := c.Services[name]
			target := configArg(s.Command)
			require.NotEmpty(t, target, "nats-server must be started with --config")
			var source string
			for _, v := range s.Volumes {
				parts := strings.Split(v, ":")
				if len(parts) >= 2 && parts[1] == target {
					source = parts[0]
				}
			}
			require.NotEmpty(t, source, "no volume mounts the config %s", target)
			raw, err := os.ReadFile(filepath.Join(repoRoot, source))
			require.NoError(t, err, "the NATS config %s mounted into %s", source, name)
			conf := parseNATSConf(string(raw))

			js := conf.block("jetstream")
			require.NotEmpty(t, js, "no jetstream block")
			assert.Regexp(t, syncAlways, js, "JetStream must fsync every write (sync_interval: always)")

			routes := conf.routes()
			slices.Sort(routes)
			assert.Equal(t, wantRoutes, routes, "the cluster block must route to every node")

			// One file for all nodes: the name comes from the environment and must differ.
			assert.Contains(t, string(conf), "$NATS_SERVER_NAME")
			n := s.Environment["NATS_SERVER_NAME"]
			require.NotEmpty(t, n)
			if other, dup := names[n]; dup {
				assert.Failf(t, "duplicate server name", "%s and %s are both %q", other, name, n)
			}
			names[n] = name
		})
	}
}

// TestComposeConfigWithDocker lets Compose validate the file where the docker compose plugin
// exists (it needs no engine for this).
func TestComposeConfigWithDocker(t *testing.T) {
	if _, err := exec.LookPath("docker"); err != nil {
		t.Log("skipped docker compose config: no docker client")
		return
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "compose", "version").CombinedOutput(); err != nil {
		t.Logf("skipped docker compose config: the compose plugin is missing (%v: %s)", err, strings.TrimSpace(string(out)))
		return
	}
	tests := []struct {
		name    string
		key     string
		wantErr bool
	}{
		{name: "with admin key", key: strings.Repeat("k", 32)},
		{name: "without admin key", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.CommandContext(ctx, "docker", "compose", "-f", "docker-compose.yml", "config", "-q")
			cmd.Dir = repoRoot
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "AGENTBUS_") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			if tt.key != "" {
				cmd.Env = append(cmd.Env, "AGENTBUS_ADMIN_KEY="+tt.key)
			}
			out, err := cmd.CombinedOutput()
			if tt.wantErr {
				assert.Error(t, err, "compose must refuse the file without AGENTBUS_ADMIN_KEY")
				return
			}
			assert.NoError(t, err, "%s", out)
		})
	}
}

func TestK8sObjectsAreNamed(t *testing.T) {
	m := loadK8s(t)
	require.NotEmpty(t, m.Objects)
	for _, o := range m.Objects {
		t.Run(o.String(), func(t *testing.T) {
			assert.NotEmpty(t, o.APIVersion, "apiVersion")
			assert.NotEmpty(t, o.Kind, "kind")
			assert.NotEmpty(t, o.Metadata.Name, "metadata.name")
		})
	}
}

func TestK8sKustomization(t *testing.T) {
	m := loadK8s(t)
	notApplied := map[string]bool{"kustomization.yaml": true, "secret.example.yaml": true}
	var want []string
	for _, f := range m.Files {
		if !notApplied[f] {
			want = append(want, f)
		}
	}
	assert.ElementsMatch(t, want, m.Kustomization.Resources,
		"kustomization.yaml must list every manifest but secret.example.yaml (a placeholder key must never be applied)")

	var images []string
	for _, o := range m.Objects {
		if !isWorkload(o.Kind) {
			continue
		}
		for _, c := range workload(t, o).Template.Spec.Containers {
			name, _, _ := strings.Cut(c.Image, ":")
			images = append(images, name)
		}
	}
	for _, img := range m.Kustomization.Images {
		assert.Contains(t, images, img.Name, "kustomization images: %s is used by no container", img.Name)
	}
}

// container returns the one container of a workload.
func onlyContainer(t *testing.T, o k8sObject) container {
	t.Helper()
	cs := workload(t, o).Template.Spec.Containers
	require.Len(t, cs, 1, "%s", o)
	return cs[0]
}

func TestK8sProbes(t *testing.T) {
	m := loadK8s(t)
	tests := []struct {
		name       string
		deployment string
		probe      func(container) *probe
		path       string
		addrVar    string // the setting whose port the probe must reach
	}{
		{name: "workflowhost liveness", deployment: "workflowhost", probe: func(c container) *probe { return c.LivenessProbe }, path: "/healthz", addrVar: "AGENTBUS_METRICS_ADDR"},
		{name: "workflowhost readiness", deployment: "workflowhost", probe: func(c container) *probe { return c.ReadinessProbe }, path: "/readyz", addrVar: "AGENTBUS_METRICS_ADDR"},
		{name: "ingress readiness", deployment: "ingress", probe: func(c container) *probe { return c.ReadinessProbe }, path: "/readyz", addrVar: "AGENTBUS_HTTP_ADDR"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := onlyContainer(t, m.find(t, "Deployment", tt.deployment))
			p := tt.probe(c)
			require.NotNil(t, p, "no probe")
			require.NotNil(t, p.HTTPGet, "want an httpGet probe")
			assert.Equal(t, tt.path, p.HTTPGet.Path)
			port, ok := c.port(p.HTTPGet.Port)
			require.True(t, ok, "probe port %s is not a container port", p.HTTPGet.Port)
			addr, ok := c.env(tt.addrVar)
			require.True(t, ok, "%s must be set in the Deployment, next to the port it opens", tt.addrVar)
			listen, err := addrPort(addr)
			require.NoError(t, err)
			assert.Equal(t, listen, port, "the probe must reach the port %s listens on", tt.addrVar)
		})
	}
}

func TestK8sWorkflowHost(t *testing.T) {
	m := loadK8s(t)
	o := m.find(t, "Deployment", "workflowhost")
	w := workload(t, o)
	require.NotNil(t, w.Replicas)
	assert.Equal(t, 3, *w.Replicas)

	c := onlyContainer(t, o)
	port, ok := c.port("health")
	assert.True(t, ok, "a container port named health")
	assert.Equal(t, 9090, port)

	var hostID string
	for _, e := range c.Env {
		if e.Name == "AGENTBUS_HOST_ID" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			hostID = e.ValueFrom.FieldRef.FieldPath
		}
	}
	assert.Equal(t, "metadata.name", hostID, "AGENTBUS_HOST_ID from the pod name: unique among live pods")
}

func TestK8sReferences(t *testing.T) {
	m := loadK8s(t)
	configMaps := map[string]map[string]string{}
	for _, o := range m.ofKind("ConfigMap") {
		configMaps[o.Metadata.Name] = o.Data
	}
	// Secrets are created by hand (docs/deployment.md); secret.example.yaml shows their keys.
	secrets := map[string]map[string]string{}
	for _, o := range m.ofKind("Secret") {
		keys := map[string]string{}
		for k, v := range o.Data {
			keys[k] = v
		}
		for k, v := range o.StringData {
			keys[k] = v
		}
		secrets[o.Metadata.Name] = keys
	}
	configMapNames := slices.Sorted(maps.Keys(configMaps))
	secretNames := slices.Sorted(maps.Keys(secrets))
	for _, o := range m.Objects {
		if !isWorkload(o.Kind) {
			continue
		}
		spec := workload(t, o).Template.Spec
		t.Run(o.String(), func(t *testing.T) {
			for _, v := range spec.Volumes {
				if v.ConfigMap != nil {
					assert.Contains(t, configMapNames, v.ConfigMap.Name, "volume %s", v.Name)
				}
			}
			for _, c := range append(spec.InitContainers, spec.Containers...) {
				for _, ef := range c.EnvFrom {
					if ef.ConfigMapRef != nil {
						assert.Contains(t, configMapNames, ef.ConfigMapRef.Name, "envFrom of %s", c.Name)
					}
					if ef.SecretRef != nil {
						assert.Contains(t, secretNames, ef.SecretRef.Name, "envFrom of %s", c.Name)
					}
				}
				for _, e := range c.Env {
					if e.ValueFrom == nil {
						continue
					}
					if r := e.ValueFrom.ConfigMapKeyRef; r != nil && !r.Optional {
						assert.Contains(t, slices.Collect(maps.Keys(configMaps[r.Name])), r.Key, "%s of %s: ConfigMap %s", e.Name, c.Name, r.Name)
					}
					if r := e.ValueFrom.SecretKeyRef; r != nil && !r.Optional {
						assert.Contains(t, slices.Collect(maps.Keys(secrets[r.Name])), r.Key, "%s of %s: Secret %s in secret.example.yaml must show it", e.Name, c.Name, r.Name)
					}
				}
			}
		})
	}

	cfg := configMaps["agentbus-config"]
	require.NotNil(t, cfg, "config.yaml: ConfigMap agentbus-config")
	assert.Equal(t, "3", cfg["AGENTBUS_REPLICAS"])
	assert.NotEmpty(t, cfg["AGENTBUS_PARTITIONS"])
	for _, u := range strings.Split(cfg["AGENTBUS_NATS_URL"], ",") {
		host, port, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimSpace(u), "nats://"))
		require.NoError(t, err, "AGENTBUS_NATS_URL %q", u)
		svc := service(t, m.find(t, "Service", host))
		var ports []string
		for _, p := range svc.Ports {
			ports = append(ports, strconv.Itoa(p.Port))
		}
		assert.Contains(t, ports, port, "Service %s has no port %s", host, port)
	}
}

func TestK8sNATS(t *testing.T) {
	m := loadK8s(t)
	o := m.find(t, "StatefulSet", "nats")
	w := workload(t, o)
	require.NotNil(t, w.Replicas)
	assert.Equal(t, 3, *w.Replicas)
	headless := m.find(t, "Service", w.ServiceName)
	var clusterIP struct {
		ClusterIP string `yaml:"clusterIP"`
	}
	require.NoError(t, headless.Spec.Decode(&clusterIP))
	assert.Equal(t, "None", clusterIP.ClusterIP, "serviceName must be a headless Service (pod DNS names)")

	var confMap string
	for _, v := range w.Template.Spec.Volumes {
		if v.ConfigMap != nil {
			confMap = v.ConfigMap.Name
		}
	}
	require.NotEmpty(t, confMap, "the NATS config is mounted from a ConfigMap")
	data := m.find(t, "ConfigMap", confMap).Data
	require.Contains(t, data, "nats.conf")
	conf := parseNATSConf(data["nats.conf"])
	assert.Regexp(t, syncAlways, conf.block("jetstream"), "JetStream must fsync every write (sync_interval: always)")

	var want []string
	for i := range *w.Replicas {
		want = append(want, fmt.Sprintf("%s-%d.%s:6222", o.Metadata.Name, i, w.ServiceName))
	}
	routes := conf.routes()
	slices.Sort(routes)
	assert.Equal(t, want, routes, "the cluster block must route to every pod of the StatefulSet")
}

func TestK8sServicesSelectPods(t *testing.T) {
	m := loadK8s(t)
	var workloads []k8sObject
	for _, o := range m.Objects {
		if isWorkload(o.Kind) {
			workloads = append(workloads, o)
		}
	}
	for _, o := range workloads {
		t.Run(o.String()+" selector", func(t *testing.T) {
			w := workload(t, o)
			require.NotEmpty(t, w.Selector.MatchLabels)
			assert.True(t, subset(w.Selector.MatchLabels, w.Template.Metadata.Labels),
				"selector %v must match the pod template's labels %v", w.Selector.MatchLabels, w.Template.Metadata.Labels)
		})
	}
	for _, svc := range m.ofKind("Service") {
		t.Run(svc.String(), func(t *testing.T) {
			spec := service(t, svc)
			require.NotEmpty(t, spec.Selector, "a Service without a selector selects nothing here")
			var pods []container
			for _, o := range workloads {
				w := workload(t, o)
				if subset(spec.Selector, w.Template.Metadata.Labels) {
					pods = append(pods, w.Template.Spec.Containers...)
				}
			}
			require.NotEmpty(t, pods, "selector %v matches no pod template", spec.Selector)
			for _, p := range spec.Ports {
				target := p.TargetPort
				if target == "" {
					target = intOrString(strconv.Itoa(p.Port))
				}
				found := false
				for _, c := range pods {
					if _, ok := c.port(target); ok {
						found = true
					}
				}
				assert.True(t, found, "port %s: targetPort %s is no container port of the selected pods", p.Name, target)
			}
		})
	}
}

// TestK8sProbePortsExist checks every probe of every container, also those no other test
// names, against the container's ports.
func TestK8sProbePortsExist(t *testing.T) {
	m := loadK8s(t)
	for _, o := range m.Objects {
		if !isWorkload(o.Kind) {
			continue
		}
		for _, c := range workload(t, o).Template.Spec.Containers {
			t.Run(path.Join(o.Metadata.Name, c.Name), func(t *testing.T) {
				for kind, p := range map[string]*probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
					if p == nil || p.HTTPGet == nil {
						continue
					}
					_, ok := c.port(p.HTTPGet.Port)
					assert.True(t, ok, "%s probe port %s is not a container port", kind, p.HTTPGet.Port)
					assert.True(t, strings.HasPrefix(p.HTTPGet.Path, "/"), "%s probe path %q", kind, p.HTTPGet.Path)
				}
			})
		}
	}
}

// TestSmokeScript checks deploy/smoke.sh without running it (it needs Docker): it parses, it is
// executable, it stops at the first error, and it expects the ports and hosts Compose has.
func TestSmokeScript(t *testing.T) {
	const script = "smoke.sh"
	info, err := os.Stat(script)
	require.NoError(t, err)
	assert.NotZero(t, info.Mode()&0o111, "%s must be executable", script)
	raw, err := os.ReadFile(script)
	require.NoError(t, err)
	text := string(raw)
	assert.True(t, strings.HasPrefix(text, "#!/usr/bin/env bash\n") || strings.HasPrefix(text, "#!/bin/bash\n"), "a bash shebang")
	assert.Contains(t, text, "\nset -euo pipefail\n")

	c, _ := loadCompose(t)
	var ports []string
	for _, name := range byRole(c, roleIngress) {
		for _, p := range c.Services[name].Ports {
			ports = append(ports, p.Published)
		}
	}
	m := regexp.MustCompile(`(?m)^PORTS=\(([^)]*)\)`).FindStringSubmatch(text)
	require.NotNil(t, m, "%s sets no PORTS=(…)", script)
	assert.Equal(t, ports, strings.Fields(m[1]), "PORTS: the ingress host ports of docker-compose.yml")
	m = regexp.MustCompile(`(?m)^HOSTS=(\d+)`).FindStringSubmatch(text)
	require.NotNil(t, m, "%s sets no HOSTS=", script)
	assert.Equal(t, strconv.Itoa(len(byRole(c, roleWorkflowHost))), m[1], "HOSTS: the workflow hosts of docker-compose.yml")

	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Log("skipped bash -n: no bash")
		return
	}
	out, err := exec.CommandContext(t.Context(), bash, "-n", script).CombinedOutput()
	assert.NoError(t, err, "bash -n %s: %s", script, out)
}
