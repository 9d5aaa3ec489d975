package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// repoRoot is the repository root, seen from this package's directory (go test runs there).
const repoRoot = ".."

// ---- Docker Compose ----

// composeFile is the part of the Compose format the checks read; other fields are ignored.
// YAML merge keys (<<: *anchor) are resolved by the decoder, as Compose resolves them.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string        `yaml:"image"`
	Build       *composeBuild `yaml:"build"`
	Command     stringOrList  `yaml:"command"`
	Environment envMap        `yaml:"environment"`
	Healthcheck *healthcheck  `yaml:"healthcheck"`
	Ports       []composePort `yaml:"ports"`
	Volumes     []string      `yaml:"volumes"`
	DependsOn   dependsOn     `yaml:"depends_on"`
	Hostname    string        `yaml:"hostname"`
}

type composeBuild struct {
	Context    string            `yaml:"context"`
	Dockerfile string            `yaml:"dockerfile"`
	Args       map[string]string `yaml:"args"`
}

type healthcheck struct {
	Test        stringOrList `yaml:"test"`
	Disable     bool         `yaml:"disable"`
	Interval    string       `yaml:"interval"`
	Timeout     string       `yaml:"timeout"`
	StartPeriod string       `yaml:"start_period"`
	Retries     int          `yaml:"retries"`
}

// stringOrList is a Compose field that takes a string or a list of strings (command, test).
// A string is kept as a one-element list.
type stringOrList []string

func (s *stringOrList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*s = stringOrList{n.Value}
		return nil
	}
	var l []string
	if err := n.Decode(&l); err != nil {
		return err
	}
	*s = l
	return nil
}

// envMap is a service's environment in either Compose form: a mapping, or a list of K=V.
type envMap map[string]string

func (e *envMap) UnmarshalYAML(n *yaml.Node) error {
	out := envMap{}
	switch n.Kind {
	case yaml.MappingNode:
		// Decoding into a map resolves merge keys (<<: *agentbus-env).
		var m map[string]any
		if err := n.Decode(&m); err != nil {
			return err
		}
		for k, v := range m {
			if v != nil { // a variable without a value is passed through from the shell
				out[k] = fmt.Sprint(v)
			} else {
				out[k] = ""
			}
		}
	case yaml.SequenceNode:
		for _, item := range n.Content {
			k, v, _ := strings.Cut(item.Value, "=")
			out[k] = v
		}
	default:
		return fmt.Errorf("line %d: environment must be a mapping or a list", n.Line)
	}
	*e = out
	return nil
}

// composePort is one published port, from the short ("127.0.0.1:8080:8080/tcp") or the long
// syntax.
type composePort struct {
	HostIP    string
	Published string
	Target    string
}

func (p *composePort) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.MappingNode {
		var long struct {
			Target    string `yaml:"target"`
			Published string `yaml:"published"`
			HostIP    string `yaml:"host_ip"`
		}
		if err := n.Decode(&long); err != nil {
			return err
		}
		*p = composePort{HostIP: long.HostIP, Published: long.Published, Target: long.Target}
		return nil
	}
	spec, _, _ := strings.Cut(n.Value, "/") // drop the protocol
	parts := strings.Split(spec, ":")
	switch len(parts) {
	case 1:
		*p = composePort{Target: parts[0]}
	case 2:
		*p = composePort{Published: parts[0], Target: parts[1]}
	case 3:
		*p = composePort{HostIP: parts[0], Published: parts[1], Target: parts[2]}
	default:
		return fmt.Errorf("line %d: port %q is not [ip:]published:target", n.Line, n.Value)
	}
	return nil
}

// dependsOn maps each service depended on to its condition ("" in the list form).
type dependsOn map[string]string

func (d *dependsOn) UnmarshalYAML(n *yaml.Node) error {
	out := dependsOn{}
	switch n.Kind {
	case yaml.SequenceNode:
		for _, item := range n.Content {
			out[item.Value] = ""
		}
	case yaml.MappingNode:
		var m map[string]struct {
			Condition string `yaml:"condition"`
		}
		if err := n.Decode(&m); err != nil {
			return err
		}
		for name, c := range m {
			out[name] = c.Condition
		}
	default:
		return fmt.Errorf("line %d: depends_on must be a list or a mapping", n.Line)
	}
	*d = out
	return nil
}

// loadCompose parses docker-compose.yml, and also returns every string value in it (for the
// interpolation check).
func loadCompose(t *testing.T) (composeFile, []string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yml"))
	require.NoError(t, err)
	var c composeFile
	require.NoError(t, yaml.Unmarshal(raw, &c), "parsing docker-compose.yml")
	var root yaml.Node
	require.NoError(t, yaml.Unmarshal(raw, &root))
	return c, scalars(&root, nil)
}

// scalars collects the values of every scalar in n that is not a mapping key.
func scalars(n *yaml.Node, out []string) []string {
	switch n.Kind {
	case yaml.ScalarNode:
		return append(out, n.Value)
	case yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			out = scalars(n.Content[i], out)
		}
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			out = scalars(c, out)
		}
	}
	return out
}

// errUnset is a ${VAR:?message} or ${VAR?message} reference to a variable that is unset (or,
// with the colon, empty): Compose refuses the file with the message.
var errUnset = errors.New("required variable is not set")

// varRef is one ${…} or $NAME reference of Compose's interpolation syntax.
var varRef = regexp.MustCompile(`\$(?:\$|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^{}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))`)

// interpolate substitutes variables from env the way Compose does, for the forms Compose
// documents: $VAR, ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, ${VAR?error},
// ${VAR:+replacement}, ${VAR+replacement} and $$. Nested references are not supported.
func interpolate(s string, env map[string]string) (string, error) {
	var errs []error
	out := varRef.ReplaceAllStringFunc(s, func(ref string) string {
		if ref == "$$" {
			return "$"
		}
		m := varRef.FindStringSubmatch(ref)
		name, op, arg := m[1], m[2], m[3]
		if name == "" {
			name = m[4]
		}
		v, set := env[name]
		nonEmpty := set && v != ""
		switch op {
		case "":
			return v
		case ":-":
			if nonEmpty {
				return v
			}
			return arg
		case "-":
			if set {
				return v
			}
			return arg
		case ":?", "?":
			if (op == ":?" && !nonEmpty) || (op == "?" && !set) {
				errs = append(errs, fmt.Errorf("%s: %w: %s", name, errUnset, arg))
			}
			return v
		case ":+":
			if nonEmpty {
				return arg
			}
			return ""
		default: // "+"
			if set {
				return arg
			}
			return ""
		}
	})
	// What the pattern did not take is a "$" that starts no valid reference (such as "${A" or
	// "${A:-${B}}"), which Compose would refuse or read differently.
	if rest := varRef.ReplaceAllString(s, ""); strings.Contains(rest, "$") {
		errs = append(errs, fmt.Errorf("%q: a $ that is not a supported variable reference (write $$ for a literal $)", s))
	}
	return out, errors.Join(errs...)
}

// ---- NATS server configuration ----

// natsConf is a NATS server configuration file's text without its comments.
type natsConf string

func parseNATSConf(text string) natsConf {
	var b strings.Builder
	for _, line := range strings.Split(text, "\n") {
		// '#' starts a comment anywhere; "//" only at the start of a line, since URLs contain it.
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		if strings.HasPrefix(strings.TrimSpace(line), "//") {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return natsConf(b.String())
}

// block returns the body of the top-level block `name { … }`, or "" if there is none.
func (c natsConf) block(name string) string {
	loc := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(name) + `\s*[:=]?\s*\{`).FindStringIndex(string(c))
	if loc == nil {
		return ""
	}
	depth := 0
	for i := loc[1] - 1; i < len(c); i++ {
		switch c[i] {
		case '{':
			depth++
		case '}':
			if depth--; depth == 0 {
				return string(c[loc[1]:i])
			}
		}
	}
	return ""
}

var syncAlways = regexp.MustCompile(`(?m)^\s*sync_interval\s*[:=]\s*"?always"?\s*$`)

// routeRE finds the host:port of each route URL.
var routeRE = regexp.MustCompile(`nats-route://([^\s,\]"']+)|nats://([^\s,\]"']+)`)

// routes returns the host:port of every route of the cluster block.
func (c natsConf) routes() []string {
	var out []string
	for _, m := range routeRE.FindAllStringSubmatch(c.block("cluster"), -1) {
		out = append(out, m[1]+m[2])
	}
	return out
}

// ---- Kubernetes ----

// k8sObject is one manifest; Spec is decoded by kind when a check needs it.
type k8sObject struct {
	APIVersion string            `yaml:"apiVersion"`
	Kind       string            `yaml:"kind"`
	Metadata   k8sMeta           `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
	Spec       yaml.Node         `yaml:"spec"`

	File string `yaml:"-"`
}

type k8sMeta struct {
	Name   string            `yaml:"name"`
	Labels map[string]string `yaml:"labels"`
}

func (o k8sObject) String() string { return fmt.Sprintf("%s %s/%s", o.File, o.Kind, o.Metadata.Name) }

// workloadSpec is the spec of a Deployment or StatefulSet.
type workloadSpec struct {
	Replicas    *int   `yaml:"replicas"`
	ServiceName string `yaml:"serviceName"`
	Selector    struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"selector"`
	Template struct {
		Metadata k8sMeta `yaml:"metadata"`
		Spec     podSpec `yaml:"spec"`
	} `yaml:"template"`
}

type podSpec struct {
	Containers     []container `yaml:"containers"`
	InitContainers []container `yaml:"initContainers"`
	Volumes        []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
		Secret *struct {
			SecretName string `yaml:"secretName"`
		} `yaml:"secret"`
	} `yaml:"volumes"`
}

type container struct {
	Name  string `yaml:"name"`
	Image string `yaml:"image"`
	Env   []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
			SecretKeyRef    *keyRef `yaml:"secretKeyRef"`
			ConfigMapKeyRef *keyRef `yaml:"configMapKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	EnvFrom []struct {
		ConfigMapRef *struct {
			Name string `yaml:"name"`
		} `yaml:"configMapRef"`
		SecretRef *struct {
			Name string `yaml:"name"`
		} `yaml:"secretRef"`
	} `yaml:"envFrom"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	StartupProbe   *probe `yaml:"startupProbe"`
}

type keyRef struct {
	Name     string `yaml:"name"`
	Key      string `yaml:"key"`
	Optional bool   `yaml:"optional"`
}

type probe struct {
	HTTPGet *struct {
		Path string      `yaml:"path"`
		Port intOrString `yaml:"port"`
	} `yaml:"httpGet"`
}

// intOrString is a port given by number or by name, kept as written.
type intOrString string

func (p *intOrString) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a port number or name", n.Line)
	}
	*p = intOrString(n.Value)
	return nil
}

// port returns the container port p names: a number as is, a name through the container's ports.
func (c container) port(p intOrString) (int, bool) {
	if n, err := strconv.Atoi(string(p)); err == nil {
		for _, cp := range c.Ports {
			if cp.ContainerPort == n {
				return n, true
			}
		}
		return n, false
	}
	for _, cp := range c.Ports {
		if cp.Name == string(p) {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// env returns the literal value of the container's variable name and whether it is set so.
func (c container) env(name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom == nil {
			return e.Value, true
		}
	}
	return "", false
}

type serviceSpec struct {
	Selector map[string]string `yaml:"selector"`
	Ports    []struct {
		Name       string      `yaml:"name"`
		Port       int         `yaml:"port"`
		TargetPort intOrString `yaml:"targetPort"`
	} `yaml:"ports"`
}

type kustomization struct {
	Resources []string `yaml:"resources"`
	Images    []struct {
		Name string `yaml:"name"`
	} `yaml:"images"`
}

// k8sManifests holds everything in deploy/k8s.
type k8sManifests struct {
	Files         []string // the .yaml files, by base name
	Objects       []k8sObject
	Kustomization kustomization
}

const k8sDir = "k8s"

func loadK8s(t *testing.T) k8sManifests {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	require.NoError(t, err)
	more, err := filepath.Glob(filepath.Join(k8sDir, "*.yml"))
	require.NoError(t, err)
	files = append(files, more...)
	require.NotEmpty(t, files)
	var m k8sManifests
	for _, f := range files {
		base := filepath.Base(f)
		m.Files = append(m.Files, base)
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		if base == "kustomization.yaml" {
			require.NoError(t, yaml.Unmarshal(raw, &m.Kustomization), "parsing %s", f)
			continue
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		for i := 0; ; i++ {
			var o k8sObject
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, "parsing document %d of %s", i+1, f)
			if o.APIVersion == "" && o.Kind == "" && o.Metadata.Name == "" && o.Spec.Kind == 0 {
				continue // an empty document, such as one between two "---"
			}
			o.File = base
			m.Objects = append(m.Objects, o)
		}
	}
	return m
}

// find returns the object of that kind and name.
func (m k8sManifests) find(t *testing.T, kind, name string) k8sObject {
	t.Helper()
	for _, o := range m.Objects {
		if o.Kind == kind && o.Metadata.Name == name {
			return o
		}
	}
	require.Failf(t, "missing object", "no %s %q in %s", kind, name, k8sDir)
	return k8sObject{}
}

func (m k8sManifests) ofKind(kind string) []k8sObject {
	var out []k8sObject
	for _, o := range m.Objects {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

func isWorkload(kind string) bool {
	return kind == "Deployment" || kind == "StatefulSet" || kind == "DaemonSet"
}

// workload decodes the spec of a Deployment or StatefulSet.
func workload(t *testing.T, o k8sObject) workloadSpec {
	t.Helper()
	var s workloadSpec
	require.NoError(t, o.Spec.Decode(&s), "decoding the spec of %s", o)
	return s
}

func service(t *testing.T, o k8sObject) serviceSpec {
	t.Helper()
	var s serviceSpec
	require.NoError(t, o.Spec.Decode(&s), "decoding the spec of %s", o)
	return s
}

// subset reports whether every label of sel is in labels.
func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// addrPort returns the port of a host:port listen address.
func addrPort(addr string) (int, error) {
	i := strings.LastIndex(addr, ":")
	if i < 0 {
		return 0, fmt.Errorf("%q has no port", addr)
	}
	return strconv.Atoi(addr[i+1:])
}
