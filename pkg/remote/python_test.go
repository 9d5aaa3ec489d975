package remote_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/conformance"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// startPythonEcho runs sdk/python/examples/echo.py on a free port with the secret and returns
// its registration, as it prints it. Without python3 the test is skipped, unless CI is set.
func startPythonEcho(t testing.TB, secret string, args ...string) map[string]any {
	t.Helper()
	reg, _ := startPythonEchoProcess(t, secret, args...)
	return reg
}

// startPythonEchoProcess is startPythonEcho that also returns the Echo's process.
func startPythonEchoProcess(t testing.TB, secret string, args ...string) (map[string]any, *os.Process) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3 is needed to run the Python Echo (CI is set)")
		}
		t.Skip("no python3: the Python Echo is not run")
	}
	_, here, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(here), "..", "..", "sdk", "python", "examples", "echo.py")
	cmd := exec.Command(py, append([]string{"-I", "-S", "-B", script, "--port", "0", "--secret", secret}, args...)...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	if os.Getenv("AGENTBUS_TEST_LOG") == "" {
		cmd.Stderr = nil
	}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	var reg map[string]any
	require.NoError(t, json.NewDecoder(out).Decode(&reg), "reading EchoPy's registration")
	return reg, cmd.Process
}

// TestPythonEcho registers the Python kit's Echo and calls it through the whole stack: a webhook,
// Data methods with state, a chat, and a reminder that comes back as a post.
func TestPythonEcho(t *testing.T) {
	secret := webhooksig.NewStandardSecret()
	reg := startPythonEcho(t, secret)
	s := stacktest.Start(t, stacktest.Options{})
	status, _ := call(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/agents", s.Key, reg, nil)
	require.Equal(t, http.StatusCreated, status)
	require.NoError(t, s.WaitLive(t.Context(), "EchoPy"))

	var hook map[string]any
	status, _ = call(t, http.MethodPost, s.URL+"/api/user/webhooks/EchoPy/echo?apikey="+s.Key+"&x=1", "", map[string]any{"hello": "world"}, &hook)
	require.Equal(t, http.StatusOK, status, "%v", hook)
	assert.Equal(t, map[string]any{"x": "1"}, hook["params"])

	dataCall := func(activation, method string, data any) map[string]any {
		var ans map[string]any
		status, _ := call(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/messaging/send?wait=true", s.Key,
			map[string]any{"agentName": "EchoPy", "activationName": activation, "participantId": "ada", "type": "Data", "text": method, "data": data}, &ans)
		require.Equal(t, http.StatusOK, status, "%v", ans)
		return ans["response"].(map[string]any)
	}
	assert.EqualValues(t, 5.5, dataCall("py", "sum", map[string]any{"values": []float64{2, 3.5}})["data"].(map[string]any)["sum"])
	for want := 1; want <= 2; want++ {
		assert.EqualValues(t, want, dataCall("py", "count", map[string]any{})["data"].(map[string]any)["count"])
	}

	var chat map[string]any
	status, _ = call(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/messaging/send?wait=true", s.Key,
		map[string]any{"agentName": "EchoPy", "activationName": "py", "participantId": "ada", "type": "Chat", "text": "hello"}, &chat)
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, "You said: hello", chat["response"].(map[string]any)["text"])

	dataCall("py", "remind", map[string]any{"text": "stretch", "ms": 300})
	var page struct {
		Messages []map[string]any `json:"messages"`
	}
	require.Eventually(t, func() bool {
		call(t, http.MethodGet, s.URL+"/api/v1/admin/tenants/default/messaging/history?agentName=EchoPy&activationName=py&participantId=ada&pageSize=5", s.Key, nil, &page)
		for _, m := range page.Messages {
			if m["text"] == "stretch" && m["direction"] == float64(1) && strings.HasSuffix(fmt.Sprint(m["requestId"]), ".post.1") {
				return true
			}
		}
		return false
	}, 10*time.Second, 50*time.Millisecond, "the reminder's post arrives: %v", &page)
}

// TestPythonEchoConforms runs Check against EchoPy (conformance.CheckRemoteEcho).
func TestPythonEchoConforms(t *testing.T) {
	raw := startPythonEcho(t, webhooksig.NewStandardSecret())
	conformance.CheckRemoteEcho(t, raw)
}

// TestPythonEchoInPlaceOfEcho: a stack without the Go Echo (AGENTBUS_ECHO=false) serves the
// Python kit's Echo registered under the name Echo.
func TestPythonEchoInPlaceOfEcho(t *testing.T) {
	reg := startPythonEcho(t, webhooksig.NewStandardSecret(), "--name", "Echo")
	s := stacktest.Start(t, stacktest.Options{NoAgents: true})
	require.Equal(t, "Echo", reg["name"])
	status, _ := call(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/agents", s.Key, reg, nil)
	require.Equal(t, http.StatusCreated, status)
	require.NoError(t, s.WaitLive(t.Context(), "Echo"))
	var ans map[string]any
	status, _ = call(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/messaging/send?wait=true", s.Key,
		map[string]any{"agentName": "Echo", "activationName": "shop", "participantId": "ada", "type": "Data", "text": "sum", "data": map[string]any{"values": []float64{1, 2, 3.5}}}, &ans)
	require.Equal(t, http.StatusOK, status, "%v", ans)
	assert.EqualValues(t, 6.5, ans["response"].(map[string]any)["data"].(map[string]any)["sum"])
}

// TestPythonEchoConformance runs the conformance suite (pkg/conformance) against the Python kit's
// Echo registered as Echo on a stack without the Go Echo.
func TestPythonEchoConformance(t *testing.T) {
	reg := startPythonEcho(t, webhooksig.NewStandardSecret(), "--name", "Echo")
	s := stacktest.Start(t, stacktest.Options{NoAgents: true})
	status, _ := call(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/agents", s.Key, reg, nil)
	require.Equal(t, http.StatusCreated, status)
	require.NoError(t, s.WaitLive(t.Context(), "Echo"))
	conformance.Run(t, conformance.Target{URL: s.URL, Key: s.Key, Tenant: "default", Without: conformance.RemoteEcho})
}
