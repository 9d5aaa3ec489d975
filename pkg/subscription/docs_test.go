package subscription_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/subscription"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

const (
	// subscriptionsDoc is the page whose section verifyingSection holds the snippets.
	subscriptionsDoc = "../../docs/subscriptions.md"
	verifyingSection = "## Verifying a delivery"
	// snippetRunTimeout bounds one snippet's run, a Go build included.
	snippetRunTimeout = 2 * time.Minute
)

// snippetCase is one delivery a snippet is given, and whether it must accept it.
type snippetCase struct {
	name    string
	secret  string
	headers map[string]string
	body    []byte
	// now is the receiver's clock, in Unix seconds.
	now    int64
	accept bool
}

// MarshalJSON is the case as the runners read it; the body in base64, so that its bytes stay
// exact.
func (c snippetCase) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{"secret": c.secret, "headers": c.headers, "body": c.body, "now": c.now})
}

// snippetLang is how one language's snippet is run: the fence languages that name it, and the
// command that runs it on the cases.
type snippetLang struct {
	name   string
	fences []string
	// tool is the program that runs the snippet, looked up in PATH.
	tool string
	run  func(t *testing.T, tool, code string, input []byte) []byte
}

var snippetLangs = []snippetLang{
	{name: "go", fences: []string{"go"}, tool: "go", run: runGoSnippet},
	{name: "python", fences: []string{"python", "python3", "py"}, tool: "python3", run: runPythonSnippet},
	{name: "node", fences: []string{"js", "javascript"}, tool: "node", run: runNodeSnippet},
}

// TestVerificationSnippets runs the Go, Python and Node verification snippets of
// docs/subscriptions.md, as the page shows them, on a delivery captured from a real subscription
// and on the Standard Webhooks specification's example: each must accept the genuine deliveries
// and refuse a changed body, id or timestamp, another secret, and a timestamp more than 5 minutes
// from its clock.
func TestVerificationSnippets(t *testing.T) {
	t.Parallel()
	snippets := docSnippets(t)
	cases := snippetCases(t)
	input, err := json.Marshal(cases)
	require.NoError(t, err)
	for _, lang := range snippetLangs {
		t.Run(lang.name, func(t *testing.T) {
			var code []string
			for _, f := range lang.fences {
				code = append(code, snippets[f]...)
			}
			require.Len(t, code, 1, "%s, %q: want exactly one code block fenced as %s", subscriptionsDoc, verifyingSection, strings.Join(lang.fences, " or "))
			out := lang.run(t, lookTool(t, lang.tool), code[0], input)
			var got []string
			require.NoError(t, json.Unmarshal(out, &got), "the %s snippet's runner printed %q", lang.name, out)
			require.Len(t, got, len(cases), "one result a case")
			for i, c := range cases {
				if c.accept {
					assert.Equal(t, "accepted", got[i], "%s: %s", lang.name, c.name)
				} else {
					assert.True(t, strings.HasPrefix(got[i], "rejected: "), "%s: %s: want rejected, got %q", lang.name, c.name, got[i])
				}
			}
		})
	}
}

// lookTool returns the path of a program that runs a snippet. A missing one fails the test
// where CI is (CI is set, as CI services set it), and skips it elsewhere, saying so: go test
// needs only Go on a developer's machine, as the browser test needs no Chromium.
func lookTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := name + " is not in PATH, so its snippet in docs/subscriptions.md (" + verifyingSection[3:] +
		") was not checked; install it. Where CI is set, as CI services set it, this fails instead of skipping."
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// docSnippets returns the code blocks of the verifying section of docs/subscriptions.md, by
// fence language.
func docSnippets(t *testing.T) map[string][]string {
	t.Helper()
	f, err := os.Open(subscriptionsDoc)
	require.NoError(t, err)
	defer f.Close()
	out := map[string][]string{}
	inSection, lang := false, ""
	var block []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case lang != "" && strings.TrimSpace(line) == "```":
			out[lang] = append(out[lang], strings.Join(block, "\n")+"\n")
			lang, block = "", nil
		case lang != "":
			block = append(block, line)
		case strings.HasPrefix(line, "## "):
			inSection = line == verifyingSection
		case inSection && strings.HasPrefix(line, "```"):
			lang = strings.TrimSpace(strings.TrimPrefix(line, "```"))
			require.NotEmpty(t, lang, "%s: a code block without a language in %q", subscriptionsDoc, verifyingSection)
		}
	}
	require.NoError(t, sc.Err())
	require.Empty(t, lang, "%s: a code block is not closed", subscriptionsDoc)
	require.NotEmpty(t, out, "%s has no code blocks under %q", subscriptionsDoc, verifyingSection)
	return out
}

// The example of the Standard Webhooks specification.
const (
	specSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	specID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	specTimestamp = 1614265330
	specBody      = `{"test": 2432232314}`
	specSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

// snippetCases are the deliveries the snippets are given: one captured from a subscription's
// delivery and changed in each way that must be refused, and the specification's example.
func snippetCases(t *testing.T) []snippetCase {
	secret, header, body := captureDelivery(t)
	ts, err := strconv.ParseInt(header["Webhook-Timestamp"], 10, 64)
	require.NoError(t, err)
	with := func(name, value string) map[string]string {
		h := map[string]string{}
		for k, v := range header {
			h[k] = v
		}
		if value == "" {
			delete(h, name)
		} else {
			h[name] = value
		}
		return h
	}
	tampered := bytes.Replace(body, []byte("héllo"), []byte("hello"), 1)
	require.NotEqual(t, body, tampered, "the captured body holds the text sent")

	spec := map[string]string{"webhook-id": specID, "webhook-timestamp": strconv.Itoa(specTimestamp), "webhook-signature": specSignature}
	return []snippetCase{
		{name: "a delivery", secret: secret, headers: header, body: body, now: ts, accept: true},
		{name: "a delivery 4 minutes later", secret: secret, headers: header, body: body, now: ts + 4*60, accept: true},
		{name: "a delivery by a clock 4 minutes behind", secret: secret, headers: header, body: body, now: ts - 4*60, accept: true},
		{name: "a signature list with another version and a signature of another secret", secret: secret,
			headers: with("Webhook-Signature", "v2,bm90IGl0 v1,bm90IGl0IGVpdGhlcg== "+header["Webhook-Signature"]), body: body, now: ts, accept: true},
		{name: "a changed body", secret: secret, headers: header, body: tampered, now: ts},
		{name: "6 minutes old", secret: secret, headers: header, body: body, now: ts + 6*60},
		{name: "6 minutes ahead of the clock", secret: secret, headers: header, body: body, now: ts - 6*60},
		{name: "a new timestamp on the old signature", secret: secret, headers: with("Webhook-Timestamp", strconv.FormatInt(ts+600, 10)), body: body, now: ts + 600},
		{name: "another webhook-id", secret: secret, headers: with("Webhook-Id", "msg_other"), body: body, now: ts},
		{name: "another secret", secret: webhooksig.NewStandardSecret(), headers: header, body: body, now: ts},
		{name: "no signature", secret: secret, headers: with("Webhook-Signature", ""), body: body, now: ts},
		{name: "a signature of another version only", secret: secret,
			headers: with("Webhook-Signature", "v2,"+strings.TrimPrefix(header["Webhook-Signature"], "v1,")), body: body, now: ts},
		{name: "the specification's example", secret: specSecret, headers: spec, body: []byte(specBody), now: specTimestamp, accept: true},
		{name: "the specification's example, 6 minutes later", secret: specSecret, headers: spec, body: []byte(specBody), now: specTimestamp + 6*60},
		{name: "the specification's example with another body", secret: specSecret, headers: spec, body: []byte(`{"test": 2432232315}`), now: specTimestamp},
	}
}

// captureDelivery subscribes a receiver, stores a message and returns the subscription's secret
// and the delivery's headers and raw body as the receiver got them.
func captureDelivery(t *testing.T) (secret string, header map[string]string, body []byte) {
	f := newFixture(t, subscription.Config{})
	var (
		mu  sync.Mutex
		got []*http.Request
		raw [][]byte
	)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		got, raw = append(got, r), append(raw, b)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rcv.Close)
	sub, err := f.store.Create(context.Background(), "acme", subscription.New{URL: rcv.URL + "/hooks", Events: []string{subscription.MessageIncoming}})
	require.NoError(t, err)
	f.deliver(t)
	f.say(t, "acme", "verify", "ada", "héllo ✓")
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) > 0
	}, 10*time.Second, 10*time.Millisecond, "no delivery")
	mu.Lock()
	defer mu.Unlock()
	header = map[string]string{}
	for name := range got[0].Header {
		header[name] = got[0].Header.Get(name)
	}
	for _, name := range []string{"Webhook-Id", "Webhook-Timestamp", "Webhook-Signature"} {
		require.NotEmpty(t, header[name], "the delivery's %s", name)
	}
	return sub.Secret, header, raw[0]
}

// runSnippet runs cmd with the cases on stdin and returns its stdout.
func runSnippet(t *testing.T, cmd *exec.Cmd, input []byte) []byte {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(input), &stdout, &stderr
	require.NoError(t, cmd.Run(), "%s\nstderr:\n%s", strings.Join(cmd.Args, " "), stderr.String())
	return stdout.Bytes()
}

// snippetCommand is a command in dir, bounded by snippetRunTimeout.
func snippetCommand(t *testing.T, dir, tool string, args ...string) *exec.Cmd {
	ctx, cancel := context.WithTimeout(context.Background(), snippetRunTimeout)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Dir = dir
	return cmd
}

var packageClause = regexp.MustCompile(`(?m)^package \w+$`)

// goSnippetMain runs the Go snippet's Verify on each case read from stdin.
const goSnippetMain = `package main

import (
	"encoding/json"
	"net/http"
	"os"
	"time"
)

func main() {
	var cases []struct {
		Secret  string
		Headers map[string]string
		Body    []byte
		Now     int64
	}
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		panic(err)
	}
	out := []string{}
	for _, c := range cases {
		h := http.Header{}
		for k, v := range c.Headers {
			h.Set(k, v)
		}
		if err := Verify(c.Secret, h, c.Body, time.Unix(c.Now, 0)); err != nil {
			out = append(out, "rejected: "+err.Error())
		} else {
			out = append(out, "accepted")
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		panic(err)
	}
}
`

// runGoSnippet builds the snippet, made package main, with goSnippetMain in a module of its
// own that may use the standard library only (no workspace, no module proxy).
func runGoSnippet(t *testing.T, tool, code string, input []byte) []byte {
	require.Regexp(t, packageClause, code, "the Go snippet starts with a package clause")
	dir := t.TempDir()
	for name, text := range map[string]string{
		"go.mod":    "module snippet\n\ngo 1.22\n",
		"verify.go": packageClause.ReplaceAllString(code, "package main"),
		"runner.go": goSnippetMain,
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600))
	}
	cmd := snippetCommand(t, dir, tool, append(append([]string{"run"}, testBuildFlags()...), ".")...)
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOPROXY=off", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
	return runSnippet(t, cmd, input)
}

// testBuildFlags are the flags of go build that this test binary was built with (the race
// detector, -gcflags, -ldflags), so that go run of the snippet finds the standard library's
// packages already compiled by the go test that built it, instead of compiling them again
// (about 27 s of CPU from an empty build cache).
func testBuildFlags() []string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	var flags []string
	for _, s := range info.Settings {
		switch {
		case s.Key == "-race" && s.Value == "true":
			flags = append(flags, "-race")
		case (s.Key == "-gcflags" || s.Key == "-ldflags") && s.Value != "":
			flags = append(flags, s.Key+"="+s.Value)
		}
	}
	return flags
}

// pythonSnippetRunner runs the Python snippet's verify on each case read from stdin.
const pythonSnippetRunner = `
import base64 as _base64, json as _json, sys as _sys

_out = []
for _c in _json.load(_sys.stdin):
    try:
        verify(_c["secret"], _c["headers"], _base64.b64decode(_c["body"]), now=_c["now"])
        _out.append("accepted")
    except ValueError as _e:
        _out.append("rejected: " + str(_e))
print(_json.dumps(_out))
`

// runPythonSnippet runs the snippet with pythonSnippetRunner appended, isolated from the
// environment and without site-packages: the standard library only.
func runPythonSnippet(t *testing.T, tool, code string, input []byte) []byte {
	dir := t.TempDir()
	file := filepath.Join(dir, "verify.py")
	require.NoError(t, os.WriteFile(file, []byte(code+pythonSnippetRunner), 0o600))
	return runSnippet(t, snippetCommand(t, dir, tool, "-I", "-S", file), input)
}

// nodeSnippetRunner runs the Node snippet's verify on each case read from stdin.
const nodeSnippetRunner = `
{
  const out = [];
  for (const c of JSON.parse(require("node:fs").readFileSync(0, "utf8"))) {
    try {
      verify(c.secret, c.headers, Buffer.from(c.body, "base64"), c.now);
      out.push("accepted");
    } catch (e) {
      out.push("rejected: " + e.message);
    }
  }
  console.log(JSON.stringify(out));
}
`

// runNodeSnippet runs the snippet with nodeSnippetRunner appended, in a directory without
// node_modules: built-in modules only.
func runNodeSnippet(t *testing.T, tool, code string, input []byte) []byte {
	dir := t.TempDir()
	file := filepath.Join(dir, "verify.js")
	require.NoError(t, os.WriteFile(file, []byte(code+nodeSnippetRunner), 0o600))
	cmd := snippetCommand(t, dir, tool, file)
	cmd.Env = append(os.Environ(), "NODE_PATH=")
	return runSnippet(t, cmd, input)
}
