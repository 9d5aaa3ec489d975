//go:build unix

package remote_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// TestReadmeRemoteAgentExample runs the README's remote-agent example as the shell script it
// is, against a whole stack: it starts EchoPy, registers it and, at once, sends it a message
// that waits for the reply. Only the port and the file the registration is written to are
// changed, so that runs do not collide. Without python3 the test is skipped, unless CI is set;
// without bash or curl it is skipped.
func TestReadmeRemoteAgentExample(t *testing.T) {
	for _, tool := range []string{"python3", "curl", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			if tool == "python3" && os.Getenv("CI") != "" {
				t.Fatalf("%s is needed to run the README's remote-agent example (CI is set)", tool)
			}
			t.Skipf("no %s: the README's remote-agent example is not run", tool)
		}
	}
	_, here, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(here), "..", "..")
	script := readmeBlock(t, filepath.Join(root, "README.md"), "With the standalone running:")
	require.Contains(t, script, "8701", "the example's port")
	require.Contains(t, script, "/tmp/echopy.json", "the example's registration file")
	script = strings.ReplaceAll(script, "8701", strconv.Itoa(freePort(t)))
	script = strings.ReplaceAll(script, "/tmp/echopy.json", filepath.Join(t.TempDir(), "echopy.json"))

	// The hosts' retry backoff of a standalone: EchoPy may take a moment to listen, and the
	// stack's test default retries within milliseconds.
	s := stacktest.Start(t, stacktest.Options{Host: agent.HostConfig{RetryBackoff: agent.DefaultRetryBackoff}})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "B="+s.URL, "KEY="+s.Key, "PYTHONDONTWRITEBYTECODE=1")
	// EchoPy runs in the background, in the script's process group, which the test ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// EchoPy keeps the output pipes open after bash exits: Wait stops waiting for them.
	cmd.WaitDelay = time.Second
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) })
	if err := cmd.Wait(); err != nil && !errors.Is(err, exec.ErrWaitDelay) {
		t.Fatalf("the example failed: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}

	// The curls print the registration's answer and the send's; EchoPy prints its registration
	// when it starts.
	var registered, sent map[string]any
	for dec := json.NewDecoder(&stdout); ; {
		var v map[string]any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "the example's output; stderr:\n%s", stderr.String())
		switch {
		case v["messageId"] != nil || v["type"] != nil:
			sent = v
		case v["createdAt"] != nil:
			registered = v
		}
	}
	require.NotNil(t, registered, "no registration's answer; stderr:\n%s", stderr.String())
	assert.Equal(t, "EchoPy", registered["name"])
	require.NotNil(t, sent, "no send's answer; stderr:\n%s", stderr.String())
	require.Contains(t, sent, "response", "the send's answer: %v", sent)
	assert.Equal(t, "default:EchoPy:Supervisor Workflow:py", sent["workflowId"])
	assert.Equal(t, map[string]any{"sum": float64(5)}, sent["response"].(map[string]any)["data"], "the send's answer: %v", sent)
}

// readmeBlock returns the first ```sh block of the file after the text intro.
func readmeBlock(t *testing.T, path, intro string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(b), intro)
	require.True(t, ok, "%s does not say %q", path, intro)
	_, after, ok = strings.Cut(after, "```sh\n")
	require.True(t, ok, "no sh block after %q", intro)
	block, _, ok := strings.Cut(after, "\n```")
	require.True(t, ok, "the sh block after %q does not end", intro)
	return block + "\n"
}

// freePort returns a TCP port of the loopback interface that nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
