// Package python_test runs the tests of the Python kit for remote agents (sdk/python) with
// go test ./..., so that the kit is checked wherever the Go code is. It holds no Go code of its
// own.
package python_test

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pythonTestTimeout bounds the Python suite; it takes a few seconds.
const pythonTestTimeout = 3 * time.Minute

// TestPythonKit runs the kit's unittest suite, as sdk/python/README.md runs it, from the
// repository's root, isolated from the environment and without site-packages: the kit uses the
// standard library only.
func TestPythonKit(t *testing.T) {
	python := lookPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), pythonTestTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-I", "-S", "-B", "-m", "unittest", "discover", "-s", "sdk/python", "-v")
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "python3 -m unittest discover -s sdk/python -v:\n%s", out)
	t.Logf("%s", out)
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
		"or newer. Where CI is set, as CI services set it, this fails instead of skipping."
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}
