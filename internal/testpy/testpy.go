// Package testpy runs the project virtualenv's Python from Go tests, so that tests
// compare gotrain against the real PyTorch (and torchvision, tensorboard) rather than
// against hand-typed numbers.
//
// The interpreter is $GOTRAIN_PYTHON, or .venv/bin/python at the module root. When it
// is missing, or lacks a module a test needs, the test is skipped, except under CI=true,
// where that is a failure: CI must prove interop, not skip it.
package testpy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	findOnce sync.Once
	found    string
)

// Root returns the module root (the directory holding go.mod) above the working directory.
func Root() string {
	dir, err := os.Getwd()
	if err != nil {
		return "."
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}

func interpreter() string {
	findOnce.Do(func() {
		if p := os.Getenv("GOTRAIN_PYTHON"); p != "" {
			if _, err := os.Stat(p); err == nil {
				found = p
				return
			}
		}
		p := filepath.Join(Root(), ".venv", "bin", "python")
		if _, err := os.Stat(p); err == nil {
			found = p
		}
	})
	return found
}

func unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("testpy: %s (CI=true: interop tests may not skip; run scripts/setup.sh)", why)
	}
	t.Skipf("testpy: %s; run scripts/setup.sh", why)
}

// Python returns the interpreter path after checking that it can import each module in
// modules (for example "torch", "torchvision"). It skips the test, or fails it under CI=true,
// when it cannot.
func Python(t testing.TB, modules ...string) string {
	t.Helper()
	py := interpreter()
	if py == "" {
		unavailable(t, "no Python interpreter (.venv/bin/python or $GOTRAIN_PYTHON)")
	}
	if len(modules) > 0 {
		cmd := exec.Command(py, "-c", "import "+strings.Join(modules, ", "))
		if out, err := cmd.CombinedOutput(); err != nil {
			unavailable(t, "Python cannot import "+strings.Join(modules, ", ")+": "+strings.TrimSpace(string(out)))
		}
	}
	return py
}

// Run runs a Python script (its source in script) with args, after checking that the
// modules import, and returns its standard output. A non-zero exit fails the test with
// the script's standard error.
func Run(t testing.TB, script string, modules []string, args ...string) []byte {
	t.Helper()
	py := Python(t, modules...)
	cmd := exec.Command(py, append([]string{"-c", script}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("testpy: python script failed: %v\n%s", err, stderr.String())
	}
	return stdout.Bytes()
}
