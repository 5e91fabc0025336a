//go:build unix

package checkpoint

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/fsutil"
)

// tempFiles lists the temporary files writers of path left in its directory.
func tempFiles(t *testing.T, path string) []string {
	t.Helper()
	left, err := filepath.Glob(filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*"))
	require.NoError(t, err)
	return left
}

// TestWritePanicCleansUp: a write that panics half-way (here the value's writer,
// after a megabyte) propagates the panic and leaves no temporary file, no open
// descriptor, and the old file unchanged; so does a write that fails.
func TestWritePanicCleansUp(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ck.pt")
	require.NoError(t, Write(path, killCheckpoint(1)))
	fds := openFiles(t)
	require.PanicsWithValue(t, "boom", func() {
		_ = fsutil.WriteAtomic(path, func(w io.Writer) error {
			_, err := w.Write(make([]byte, 3<<20))
			require.NoError(t, err)
			panic("boom")
		})
	})
	require.Empty(t, tempFiles(t, path))
	require.Equal(t, fds, openFiles(t), "the temporary file's descriptor leaked")
	err := fsutil.WriteAtomic(path, func(w io.Writer) error { return errors.New("failed") })
	require.EqualError(t, err, "failed")
	require.Empty(t, tempFiles(t, path))
	i, err := verifyKillCheckpoint(path)
	require.NoError(t, err)
	require.EqualValues(t, 1, i)
}

func openFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(fds)
}

// TestWriteUmask: a new checkpoint gets 0666 less the umask, as os.Create gives;
// rewriting keeps an existing file's permissions.
func TestWriteUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "ck.pt")
	require.NoError(t, Write(path, killCheckpoint(1)))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	st := filepath.Join(dir, "m.safetensors")
	require.NoError(t, WriteSafetensors(st, NewDict(), nil))
	fi, err = os.Stat(st)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	syscall.Umask(0o022)
	require.NoError(t, os.Chmod(path, 0o640))
	require.NoError(t, Write(path, killCheckpoint(2)))
	fi, err = os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o640), fi.Mode().Perm())
	fresh := filepath.Join(dir, "fresh.pt")
	require.NoError(t, Write(fresh, killCheckpoint(3)))
	fi, err = os.Stat(fresh)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o644), fi.Mode().Perm())
}

// TestWriteThroughSymlink: writing to a symlink (relative, absolute, a chain of them,
// or dangling) replaces the file it points to, atomically next to it, and keeps the
// link.
func TestWriteThroughSymlink(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "runs")
	require.NoError(t, os.Mkdir(sub, 0o755))
	target := filepath.Join(sub, "epoch3.pt")
	require.NoError(t, Write(target, killCheckpoint(3)))
	last := filepath.Join(dir, "last.pt")
	require.NoError(t, os.Symlink("runs/epoch3.pt", last))
	chain := filepath.Join(dir, "latest.pt")
	require.NoError(t, os.Symlink(last, chain))

	for i, link := range []string{last, chain} {
		require.NoError(t, Write(link, killCheckpoint(int64(10+i))))
		fi, err := os.Lstat(link)
		require.NoError(t, err)
		require.NotZero(t, fi.Mode()&os.ModeSymlink, "the link was replaced")
		got, err := verifyKillCheckpoint(target)
		require.NoError(t, err)
		require.EqualValues(t, 10+i, got)
		require.Empty(t, tempFiles(t, target))
		require.Empty(t, tempFiles(t, link))
	}

	dangling := filepath.Join(dir, "next.pt")
	require.NoError(t, os.Symlink("runs/epoch4.pt", dangling))
	require.NoError(t, Write(dangling, killCheckpoint(4)))
	got, err := verifyKillCheckpoint(filepath.Join(sub, "epoch4.pt"))
	require.NoError(t, err)
	require.EqualValues(t, 4, got)

	loop := filepath.Join(dir, "loop.pt")
	require.NoError(t, os.Symlink("loop.pt", loop))
	require.ErrorContains(t, Write(loop, killCheckpoint(5)), "symlinks")
}
