//go:build unix

package checkpoint

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testsupport"
)

// TestSpecialFiles: a FIFO (which would block the open until a writer came), a device
// that never ends and a directory are refused by name before anything is read, by
// every reader that takes a path.
func TestSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := testsupport.FIFO(t, dir, "fifo.pt")
	for _, path := range []string{fifo, "/dev/zero", dir} {
		_, err := Read(path)
		require.ErrorContains(t, err, path+" is ")
		require.ErrorContains(t, err, ", not a regular file")
		_, _, err = ReadSafetensors(path)
		require.ErrorContains(t, err, path+" is ")
		require.ErrorContains(t, err, ", not a regular file")
	}
	// A shard or an index that is a FIFO.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(`{"weight_map":{"a":"fifo.pt"}}`), 0o644))
	_, _, err := ReadSafetensorsDir(dir, "")
	require.ErrorContains(t, err, fifo+" is a named pipe (FIFO), not a regular file")
	sub := filepath.Join(dir, "sub")
	require.NoError(t, os.Mkdir(sub, 0o755))
	testsupport.FIFO(t, sub, "model.safetensors.index.json")
	_, _, err = ReadSafetensorsDir(sub, "")
	require.ErrorContains(t, err, "model.safetensors.index.json is a named pipe (FIFO), not a regular file")
}
