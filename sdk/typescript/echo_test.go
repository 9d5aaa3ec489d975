package typescript_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/conformance"
	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// startEcho runs the compiled EchoTS on a free port with the secret and returns its
// registration, as it prints it.
func startEcho(t testing.TB, node, secret string, args ...string) map[string]any {
	t.Helper()
	return startEchoCommand(t, node, append([]string{filepath.Join("dist", "examples", "echo.js"), "--port", "0", "--secret", secret}, args...)...)
}

// startEchoCommand runs an EchoTS with the command line given and returns its registration, as
// it prints it; the process is stopped when the test ends.
func startEchoCommand(t testing.TB, name string, args ...string) map[string]any {
	t.Helper()
	cmd := exec.Command(name, args...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	if os.Getenv("AGENTBUS_TEST_LOG") != "" {
		cmd.Stderr = os.Stderr
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
	require.NoError(t, json.NewDecoder(out).Decode(&reg), "reading EchoTS's registration")
	return reg
}

// api calls the stack with a key and a JSON body and decodes the JSON answer into out.
func api(t testing.TB, method, url, key string, body, out any) int {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest(method, url, bytes.NewReader(b))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if out != nil && len(rb) > 0 {
		require.NoError(t, json.Unmarshal(rb, out), "%s", rb)
	}
	return resp.StatusCode
}

// TestTypeScriptEcho registers the TypeScript kit's Echo and calls it through the whole stack: a
// webhook, Data methods with state, and a chat.
func TestTypeScriptEcho(t *testing.T) {
	t.Parallel()
	node := build(t)
	reg := startEcho(t, node, webhooksig.NewStandardSecret())
	s := stacktest.Start(t, stacktest.Options{})
	require.Equal(t, http.StatusCreated, api(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/agents", s.Key, reg, nil))
	require.NoError(t, s.WaitLive(t.Context(), "EchoTS"))

	resp, err := http.Post(s.URL+"/api/user/webhooks/EchoTS/echo?apikey="+s.Key+"&x=1", "text/plain", bytes.NewReader([]byte("hello")))
	require.NoError(t, err)
	var hook map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&hook))
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, map[string]any{"x": "1"}, hook["params"])
	assert.Equal(t, "hello", hook["body"])
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))

	send := func(typ, text string, data any) map[string]any {
		var ans map[string]any
		status := api(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/messaging/send?wait=true", s.Key,
			map[string]any{"agentName": "EchoTS", "activationName": "ts", "participantId": "ada", "type": typ, "text": text, "data": data}, &ans)
		require.Equal(t, http.StatusOK, status, "%v", ans)
		return ans["response"].(map[string]any)
	}
	assert.EqualValues(t, 5.5, send("Data", "sum", map[string]any{"values": []float64{2, 3.5}})["data"].(map[string]any)["sum"])
	for want := 1; want <= 2; want++ {
		assert.EqualValues(t, want, send("Data", "count", map[string]any{})["data"].(map[string]any)["count"])
	}
	assert.Equal(t, "You said: hello", send("Chat", "hello", nil)["text"])
	assert.EqualValues(t, 3, send("Data", "flaky", map[string]any{"attempts": 3})["data"].(map[string]any)["attempt"], "retried twice")
}

// TestTypeScriptEchoConforms runs remote.Check against EchoTS (conformance.CheckRemoteEcho).
func TestTypeScriptEchoConforms(t *testing.T) {
	t.Parallel()
	raw := startEcho(t, build(t), webhooksig.NewStandardSecret())
	conformance.CheckRemoteEcho(t, raw)
}

// TestTypeScriptEchoConformance runs the conformance suite (pkg/conformance) against the
// TypeScript kit's Echo registered as Echo on a stack without the Go Echo.
func TestTypeScriptEchoConformance(t *testing.T) {
	t.Parallel()
	reg := startEcho(t, build(t), webhooksig.NewStandardSecret(), "--name", "Echo")
	s := stacktest.Start(t, stacktest.Options{NoAgents: true})
	require.Equal(t, "Echo", reg["name"])
	require.Equal(t, http.StatusCreated, api(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/agents", s.Key, reg, nil))
	require.NoError(t, s.WaitLive(t.Context(), "Echo"))
	conformance.Run(t, conformance.Target{URL: s.URL, Key: s.Key, Tenant: "default", Without: conformance.RemoteEcho})
}
