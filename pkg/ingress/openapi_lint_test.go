package ingress_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// lintDir holds the pinned OpenAPI linter (package.json, package-lock.json), its configuration
// (redocly.yaml) and the places where a rule is ignored, each with its reason
// (.redocly.lint-ignore.yaml). Under testdata, the go command never looks into its
// node_modules.
var lintDir = filepath.Join("testdata", "openapi-lint")

const (
	// lintInstallTimeout bounds npm ci, which downloads the linter when npm's cache is cold.
	lintInstallTimeout = 5 * time.Minute
	// lintTimeout bounds one run of the linter.
	lintTimeout = 2 * time.Minute
	// lintLockStamp, in node_modules, holds the SHA-256 of the package-lock.json that npm ci
	// installed, so that npm ci runs only when the lock changed.
	lintLockStamp = "node_modules/.agentbus-lock-sha256"
)

// TestOpenAPILint lints the OpenAPI document with Redocly CLI and its recommended rules. Any
// problem fails it, warnings too; so does an entry of the ignore file that no longer matches a
// problem. It installs the linter with npm ci when node_modules is missing or was installed
// from another package-lock.json. Without Node.js and npm it skips, unless CI is set.
func TestOpenAPILint(t *testing.T) {
	t.Parallel()
	node, npm := lintTool(t, "node"), lintTool(t, "npm")
	checkLintNode(t, node)
	// Reading the configuration here makes go test's cache depend on it; the document is
	// embedded in the package, so the test binary changes with it.
	_, err := os.ReadFile(filepath.Join(lintDir, "redocly.yaml"))
	require.NoError(t, err)
	ignore, err := os.ReadFile(filepath.Join(lintDir, ".redocly.lint-ignore.yaml"))
	require.NoError(t, err)
	lock, err := os.ReadFile(filepath.Join(lintDir, "package-lock.json"))
	require.NoError(t, err)
	sum := sha256.Sum256(lock)
	if stamp := filepath.Join(lintDir, lintLockStamp); lintStale(stamp, hex.EncodeToString(sum[:])) {
		out, errOut, err := runLint(lintInstallTimeout, npm, "ci", "--no-audit", "--no-fund", "--prefer-offline")
		require.NoError(t, err, "npm ci in %s:\n%s%s", lintDir, out, errOut)
		require.NoError(t, os.WriteFile(stamp, []byte(hex.EncodeToString(sum[:])), 0o600))
	}

	cli := filepath.Join("node_modules", "@redocly", "cli", "bin", "cli.js")
	out, errOut, runErr := runLint(lintTimeout, node, cli, "lint", "--format=json")
	var report struct {
		Totals struct {
			Errors   int `json:"errors"`
			Warnings int `json:"warnings"`
			Ignored  int `json:"ignored"`
		} `json:"totals"`
	}
	require.NoError(t, json.Unmarshal(out, &report), "redocly lint --format=json (%v) printed:\n%s%s", runErr, out, errOut)
	if report.Totals.Errors+report.Totals.Warnings > 0 {
		readable, _, _ := runLint(lintTimeout, node, cli, "lint", "--format=stylish")
		t.Fatalf("redocly lint: %d errors, %d warnings; fix them, or ignore one in %s with its reason "+
			"(docs/openapi.md#the-lint):\n%s", report.Totals.Errors, report.Totals.Warnings, lintDir, readable)
	}
	entries := len(regexp.MustCompile(`(?m)^\s+- '#/`).FindAll(ignore, -1))
	require.Equal(t, entries, report.Totals.Ignored,
		"%s lists %d places and the linter ignored %d problems: remove the entries that match no problem anymore", lintDir, entries, report.Totals.Ignored)
	t.Logf("redocly lint (recommended): no problems; %d ignored, as %s lists", report.Totals.Ignored, lintDir)
}

// lintTool returns the path of a program the lint needs. A missing one fails the test where CI
// is set (as CI services set it), and skips it elsewhere, saying so: go test needs only Go on a
// developer's machine.
func lintTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		skipOrFailLint(t, name+" is not in PATH, so the OpenAPI document was not linted; install Node.js 20.19 or later with npm.")
	}
	return p
}

// checkLintNode skips (or, where CI is set, fails) the test on a Node.js the pinned Redocly CLI
// does not run on: its engines are >=20.19.0 <21 or >=22.12.0.
func checkLintNode(t *testing.T, node string) {
	t.Helper()
	out, err := exec.Command(node, "--version").Output()
	require.NoError(t, err, "node --version")
	m := regexp.MustCompile(`^v(\d+)\.(\d+)\.`).FindSubmatch(bytes.TrimSpace(out))
	require.NotNil(t, m, "node --version printed %q", out)
	major, _ := strconv.Atoi(string(m[1]))
	minor, _ := strconv.Atoi(string(m[2]))
	if !(major == 20 && minor >= 19 || major == 22 && minor >= 12 || major > 22) {
		skipOrFailLint(t, "node is "+strings.TrimSpace(string(out))+"; Redocly CLI needs Node.js 20.19 or later (22.12 or later from 22 on), so the OpenAPI document was not linted.")
	}
}

func skipOrFailLint(t *testing.T, msg string) {
	t.Helper()
	msg += " Where CI is set, as CI services set it, this fails instead of skipping."
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// lintStale reports whether node_modules is missing or was installed from another lock.
func lintStale(stamp, lock string) bool {
	b, err := os.ReadFile(stamp)
	return err != nil || strings.TrimSpace(string(b)) != lock
}

// runLint runs a command in lintDir and returns its standard output and standard error. Redocly
// sends no telemetry and looks for no update.
func runLint(timeout time.Duration, name string, args ...string) (stdout, stderr []byte, _ error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = lintDir
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "NODE_PATH=", "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true")
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	out, err := cmd.Output()
	return out, errBuf.Bytes(), err
}
