package fsutil

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWriteFileAtomicReplacesAndLeavesNoTemporary: a new file gets what os.Create
// gives (0666 less the umask), and a replaced one ends with no temporary file left.
func TestWriteFileAtomicReplacesAndLeavesNoTemporary(t *testing.T) {
	defer syscall.Umask(syscall.Umask(0o022))
	dir := t.TempDir()
	p := filepath.Join(dir, "config.json")
	require.NoError(t, WriteFileAtomic(p, []byte("old")))
	require.NoError(t, WriteFileAtomic(p, []byte("new")))
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, "new", string(b))
	fi, err := os.Stat(p)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm())
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, ents, 1, "a temporary file was left behind")

	assert.Error(t, WriteFileAtomic(filepath.Join(dir, "missing", "x"), nil))
}

func TestLinkAtomicKeepsTheLinkedVersion(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "last.pt"), filepath.Join(dir, "best.pt")
	require.NoError(t, WriteFileAtomic(src, []byte("epoch 1")))
	require.NoError(t, LinkAtomic(src, dst))
	require.NoError(t, WriteFileAtomic(src, []byte("epoch 2"))) // replaced by a rename
	b, err := os.ReadFile(dst)
	require.NoError(t, err)
	assert.Equal(t, "epoch 1", string(b))
	assert.Error(t, LinkAtomic(filepath.Join(dir, "absent"), dst))
}
