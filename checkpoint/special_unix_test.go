//go:build unix

package checkpoint

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSpecialFiles: a FIFO (which would block the open until a writer came), a device
// that never ends and a directory are refused by name before anything is read, by
// every reader that takes a path.
func TestSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.pt")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	for _, path := range []string{fifo, "/dev/zero", dir} {
		_, err := Read(path)
		require.ErrorContains(t, err, path+" is not a regular file")
		_, _, err = ReadSafetensors(path)
		require.ErrorContains(t, err, path+" is not a regular file")
	}
}
