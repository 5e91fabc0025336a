package fsutil

import (
	"io"
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

// TestWriteInDirReplacesLinks: inside an output directory a file that is a symlink is
// replaced by a regular file of the new contents and the link's target is left as it
// was; a path the caller names (WriteFileAtomic) is still written through its link.
func TestWriteInDirReplacesLinks(t *testing.T) {
	defer syscall.Umask(syscall.Umask(0o022))
	dir, other := t.TempDir(), t.TempDir()
	outside := filepath.Join(other, "outside")
	require.NoError(t, os.WriteFile(outside, []byte("keep"), 0o600))
	for _, target := range []string{outside, filepath.Join(other, "dangling"), "relative-dangling"} {
		link := filepath.Join(dir, "config.json")
		os.Remove(link)
		require.NoError(t, os.Symlink(target, link))
		require.NoError(t, WriteFileInDir(dir, "config.json", []byte("new")))
		fi, err := os.Lstat(link)
		require.NoError(t, err)
		assert.True(t, fi.Mode().IsRegular(), "the link %s was written through", target)
		assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm(), "a replaced link's file gets a new file's permissions")
		b, err := os.ReadFile(link)
		require.NoError(t, err)
		assert.Equal(t, "new", string(b))
		_, err = os.Lstat(filepath.Join(other, "dangling"))
		assert.True(t, os.IsNotExist(err), "a dangling link's target was created")
	}
	b, err := os.ReadFile(outside)
	require.NoError(t, err)
	assert.Equal(t, "keep", string(b))

	// Staged and aborted, nothing changes; staged and committed, the link is replaced.
	link := filepath.Join(dir, "model.safetensors")
	require.NoError(t, os.Symlink(outside, link))
	st, err := StageInDir(dir, "model.safetensors", func(w io.Writer) error { _, err := w.Write([]byte("w")); return err })
	require.NoError(t, err)
	st.Abort()
	fi, err := os.Lstat(link)
	require.NoError(t, err)
	assert.NotZero(t, fi.Mode()&os.ModeSymlink)
	st, err = StageInDir(dir, "model.safetensors", func(w io.Writer) error { _, err := w.Write([]byte("w")); return err })
	require.NoError(t, err)
	require.NoError(t, st.Commit())
	fi, err = os.Lstat(link)
	require.NoError(t, err)
	assert.True(t, fi.Mode().IsRegular())
	b, err = os.ReadFile(outside)
	require.NoError(t, err)
	assert.Equal(t, "keep", string(b))

	// An existing regular file keeps its permissions.
	require.NoError(t, os.Chmod(link, 0o600))
	require.NoError(t, WriteFileInDir(dir, "model.safetensors", []byte("again")))
	fi, err = os.Stat(link)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	// The named path's rule: the link is kept and its target replaced.
	named := filepath.Join(dir, "named")
	require.NoError(t, os.Symlink(outside, named))
	require.NoError(t, WriteFileAtomic(named, []byte("through")))
	fi, err = os.Lstat(named)
	require.NoError(t, err)
	assert.NotZero(t, fi.Mode()&os.ModeSymlink)
	b, err = os.ReadFile(outside)
	require.NoError(t, err)
	assert.Equal(t, "through", string(b))

	for _, name := range []string{"", ".", "..", "sub/x", "../x"} {
		assert.ErrorContains(t, WriteFileInDir(dir, name, nil), "not a plain file name", name)
	}
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range ents {
		assert.NotContains(t, e.Name(), ".tmp-", "a temporary file was left behind")
	}
}
