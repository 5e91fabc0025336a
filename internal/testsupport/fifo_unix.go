//go:build unix

package testsupport

import (
	"path/filepath"
	"syscall"
	"testing"
)

// FIFO makes a named pipe called name in dir and returns its path, failing the test
// when it cannot. Opening it for reading blocks until a writer comes, which is what
// readers that take a path must refuse before they open it.
func FIFO(t testing.TB, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatalf("making the FIFO %s: %v", path, err)
	}
	return path
}
