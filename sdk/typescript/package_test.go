package typescript_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/stacktest"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// TestTypeScriptPackage installs the kit as a project of its user does: npm pack makes the
// tarball, and npm install --offline adds it to an empty project (the kit has no runtime
// dependency, so nothing is fetched). From that project, a program compiled against the
// installed package's type declarations imports the kit by its name, serves an agent and
// answers a signed request; and the EchoTS the package ships (its bin, agentbus-echots),
// registered with a whole stack, answers a webhook and a Data method through it.
func TestTypeScriptPackage(t *testing.T) {
	t.Parallel()
	node, npm := build(t), lookTool(t, "npm")
	dir := t.TempDir()
	// build compiled the kit just now: packing need not run prepack's compile again.
	run(t, stepTimeout, npm, "pack", "--ignore-scripts", "--pack-destination", dir)
	tarballs, err := filepath.Glob(filepath.Join(dir, "*.tgz"))
	require.NoError(t, err)
	require.Len(t, tarballs, 1, "npm pack made no tarball or several")

	project := filepath.Join(dir, "project")
	require.NoError(t, os.CopyFS(project, os.DirFS(filepath.Join("testdata", "consumer"))))
	run(t, stepTimeout, npm, "install", "--prefix", project, "--offline", "--no-audit", "--no-fund", "--no-update-notifier", tarballs[0])

	t.Run("imported by name", func(t *testing.T) {
		// The project has no @types/node of its own; the kit's serve its global types.
		run(t, stepTimeout, node, filepath.Join("node_modules", "typescript", "bin", "tsc"), "-p", project,
			"--typeRoots", filepath.Join(mustAbs(t, "node_modules"), "@types"))
		out := run(t, stepTimeout, node, filepath.Join(project, "consumer.js"))
		var got struct {
			Signed   int            `json:"signed"`
			Answer   map[string]any `json:"answer"`
			Unsigned int            `json:"unsigned"`
		}
		require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &got), "consumer.js printed %q", out)
		assert.Equal(t, http.StatusOK, got.Signed)
		assert.Equal(t, map[string]any{"reply": map[string]any{"data": map[string]any{"sum": 5.0}}}, got.Answer)
		assert.Equal(t, http.StatusUnauthorized, got.Unsigned)
	})

	t.Run("EchoTS from the package", func(t *testing.T) {
		bin := filepath.Join(project, "node_modules", ".bin", "agentbus-echots")
		reg := startEchoCommand(t, bin, "--port", "0", "--secret", webhooksig.NewStandardSecret(), "--name", "EchoPkg")
		s := stacktest.Start(t, stacktest.Options{})
		require.Equal(t, http.StatusCreated, api(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/agents", s.Key, reg, nil))
		require.NoError(t, s.WaitLive(t.Context(), "EchoPkg"))

		resp, err := http.Post(s.URL+"/api/user/webhooks/EchoPkg/echo?apikey="+s.Key, "text/plain", strings.NewReader("hello"))
		require.NoError(t, err)
		var hook map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&hook))
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, "hello", hook["body"])

		var ans map[string]any
		require.Equal(t, http.StatusOK, api(t, http.MethodPost, s.URL+"/api/v1/admin/tenants/default/messaging/send?wait=true", s.Key,
			map[string]any{"agentName": "EchoPkg", "activationName": "pkg", "participantId": "ada", "type": "Data", "text": "sum",
				"data": map[string]any{"values": []float64{4, 5, 6}}}, &ans), "%v", ans)
		assert.EqualValues(t, 15, ans["response"].(map[string]any)["data"].(map[string]any)["sum"])
	})
}

func mustAbs(t *testing.T, path string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	require.NoError(t, err)
	return abs
}
