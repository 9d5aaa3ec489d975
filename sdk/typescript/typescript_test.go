// Package typescript_test builds the TypeScript kit for remote agents (sdk/typescript) and runs
// its tests with Node's test runner, so that go test covers it like the Go code. It is not the
// kit's test suite itself: that is test/*.test.ts, which runs the kit's server over real HTTP.
package typescript_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const (
	// installTimeout bounds npm ci, which downloads the compiler when its cache is cold.
	installTimeout = 5 * time.Minute
	// stepTimeout bounds compiling and running the tests.
	stepTimeout = 3 * time.Minute
	// lockStamp, in node_modules, holds the SHA-256 of the package-lock.json that npm ci
	// installed, so that npm ci runs only when the lock changed.
	lockStamp = "node_modules/.agentbus-lock-sha256"
	// minNode is the oldest Node.js major version the kit supports.
	minNode = 20
)

// TestTypeScriptKit installs the kit's pinned compiler (npm ci, only when node_modules is
// missing or was installed from another package-lock.json), compiles the kit, its example and
// its tests to dist/, and runs the tests with node --test.
func TestTypeScriptKit(t *testing.T) {
	t.Parallel()
	node := build(t)
	tests := compiledTests(t)
	out := run(t, stepTimeout, node, append([]string{"--test", "--test-reporter=tap"}, tests...)...)
	pass, fail := tapCount(out, "pass"), tapCount(out, "fail")
	require.Zero(t, fail, "node --test reported failures:\n%s", out)
	require.Positive(t, pass, "node --test ran no test:\n%s", out)
	t.Logf("node --test: %d tests passed in %d files", pass, len(tests))
}

// built records that this test binary compiled the kit: the tests that need dist/ build it once.
var built sync.Mutex

var builtNode string

// build installs the pinned compiler when needed and compiles the kit, its example and its tests
// to dist/, once per test binary, and returns the node binary.
func build(t testing.TB) string {
	built.Lock()
	defer built.Unlock()
	if builtNode != "" {
		return builtNode
	}
	node, npm := lookTool(t, "node"), lookTool(t, "npm")
	checkNodeVersion(t, node)
	// Reading the sources here makes go test's cache depend on them: a cached pass is reused only
	// while they are unchanged.
	lock := sourcesHash(t)
	if stale(lock) {
		run(t, installTimeout, npm, "ci", "--no-audit", "--no-fund", "--prefer-offline")
		require.NoError(t, os.WriteFile(lockStamp, []byte(lock), 0o600))
	}
	run(t, stepTimeout, node, filepath.Join("node_modules", "typescript", "bin", "tsc"), "-p", ".")
	builtNode = node
	return node
}

// lookTool returns the path of a program the test needs. A missing one fails the test where CI
// is (CI is set, as CI services set it), and skips it elsewhere, saying so: go test needs only Go
// on a developer's machine.
func lookTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	skipOrFail(t, name+" is not in PATH, so the TypeScript kit (sdk/typescript) was not built or tested; install Node.js "+
		strconv.Itoa(minNode)+" or later with npm.")
	return ""
}

// checkNodeVersion skips (or, where CI is set, fails) the test on a Node.js older than minNode.
func checkNodeVersion(t testing.TB, node string) {
	t.Helper()
	out, err := exec.Command(node, "--version").Output()
	require.NoError(t, err, "node --version")
	m := regexp.MustCompile(`^v(\d+)\.`).FindSubmatch(bytes.TrimSpace(out))
	require.NotNil(t, m, "node --version printed %q", out)
	if major, _ := strconv.Atoi(string(m[1])); major < minNode {
		skipOrFail(t, "node is "+strings.TrimSpace(string(out))+"; the TypeScript kit (sdk/typescript) needs Node.js "+
			strconv.Itoa(minNode)+" or later, so it was not built or tested.")
	}
}

func skipOrFail(t testing.TB, msg string) {
	t.Helper()
	msg += " Where CI is set, as CI services set it, this fails instead of skipping."
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// sourcesHash reads the kit's sources and returns the SHA-256 of package-lock.json.
func sourcesHash(t testing.TB) string {
	t.Helper()
	for _, dir := range []string{"src", "examples", "test"} {
		require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			_, err = os.ReadFile(path)
			return err
		}))
	}
	for _, f := range []string{"package.json", "tsconfig.json"} {
		_, err := os.ReadFile(f)
		require.NoError(t, err)
	}
	b, err := os.ReadFile("package-lock.json")
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// stale reports whether node_modules is missing or was installed from another lock.
func stale(lock string) bool {
	b, err := os.ReadFile(lockStamp)
	return err != nil || strings.TrimSpace(string(b)) != lock
}

// compiledTests returns the compiled test files of test/*.test.ts, so that a test removed from
// test/ but still compiled in dist/ does not run.
func compiledTests(t testing.TB) []string {
	t.Helper()
	srcs, err := filepath.Glob(filepath.Join("test", "*.test.ts"))
	require.NoError(t, err)
	require.NotEmpty(t, srcs, "no test/*.test.ts")
	out := make([]string, len(srcs))
	for i, s := range srcs {
		out[i] = filepath.Join("dist", strings.TrimSuffix(s, ".ts")+".js")
	}
	return out
}

// run runs a command in the kit's directory and returns its combined output, failing the test
// with that output when the command fails.
func run(t testing.TB, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "NODE_PATH=")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %s (after %s):\n%s", filepath.Base(name), strings.Join(args, " "), time.Since(start).Round(time.Millisecond), out)
	return string(out)
}

// tapCount returns the "# pass N" or "# fail N" of a TAP report; 0 when there is none.
func tapCount(out, what string) int {
	m := regexp.MustCompile(`(?m)^# ` + what + ` (\d+)$`).FindStringSubmatch(out)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
