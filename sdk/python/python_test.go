// Package python_test runs the tests of the Python kit for remote agents (sdk/python) with
// go test ./..., so that the kit is checked wherever the Go code is. It holds no Go code of its
// own.
package python_test

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pythonTestTimeout bounds each step: making the virtual environment, installing the kit, and
// the suite, which takes a few seconds.
const pythonTestTimeout = 3 * time.Minute

// TestPythonKit installs the kit as its README does, with pip install --no-build-isolation and
// no package index, into a virtual environment of its own, and runs the kit's unittest suite
// with that environment's Python from a copy of tests/ and examples/ outside the source tree:
// the suite imports the installed package only, so a module or file the package leaves out
// fails it. The environment has the standard library and the kit and nothing else.
func TestPythonKit(t *testing.T) {
	python := lookPython(t)
	readSources(t)
	dir := t.TempDir()
	venv := filepath.Join(dir, "venv")
	run(t, ".", python, "-m", "venv", "--without-pip", venv)
	venvPython := filepath.Join(venv, "bin", "python")
	site := strings.TrimSpace(run(t, ".", venvPython, "-I", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"))

	// The build runs with the Python that has pip and setuptools; the wheel goes into the
	// environment's site-packages.
	run(t, ".", python, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps",
		"--disable-pip-version-check", "--no-input", "--quiet", "--target", site, ".")
	imported := strings.TrimSpace(run(t, ".", venvPython, "-I", "-B", "-c", "import agentbus_agent; print(agentbus_agent.__file__)"))
	require.Equal(t, filepath.Join(site, "agentbus_agent", "__init__.py"), imported)

	kit := filepath.Join(dir, "kit")
	for _, sub := range []string{"tests", "examples"} {
		require.NoError(t, os.CopyFS(filepath.Join(kit, sub), os.DirFS(sub)))
	}
	out := run(t, kit, venvPython, "-I", "-B", "-m", "unittest", "discover", "-s", "tests", "-t", ".", "-v")
	t.Logf("%s", out)
}

// readSources reads the package's sources, which only pip reads otherwise, so that go test's
// cache depends on them: a cached pass is reused only while they are unchanged. (The copy of
// tests/ and examples/ reads those.)
func readSources(t *testing.T) {
	t.Helper()
	for _, dir := range []string{"agentbus_agent", "build_backend"} {
		require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			_, err = os.ReadFile(path)
			return err
		}))
	}
	for _, f := range []string{"pyproject.toml", "MANIFEST.in", "README.md"} {
		_, err := os.ReadFile(f)
		require.NoError(t, err)
	}
}

// run runs a command in dir with a time limit and without the caller's PYTHON* variables, and
// returns its combined output, failing the test with that output when the command fails. No
// Python it starts writes bytecode: the build backend would leave it in the source tree.
func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pythonTestTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PYTHON") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "PYTHONDONTWRITEBYTECODE=1")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %s (after %s):\n%s", filepath.Base(name), strings.Join(args, " "),
		time.Since(start).Round(time.Millisecond), out)
	return string(out)
}

// lookPython returns the path of python3. A missing one fails the test where CI is (CI is
// set, as CI services set it), and skips it elsewhere, saying so: go test needs only Go on a
// developer's machine.
func lookPython(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err == nil {
		return p
	}
	msg := "python3 is not in PATH, so the Python kit's tests (sdk/python) did not run; install Python 3.11 " +
		"or newer with pip and setuptools. Where CI is set, as CI services set it, this fails instead of skipping."
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}
