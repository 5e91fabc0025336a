package fsutil

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInDir: the one rule for links in a model directory. Files inside it, links
// inside it, and a Hugging Face cache snapshot's links into its repository's blobs/
// are read; a link (of a file or of a folder on the way) out of the directory is
// refused naming the file and where it leads; names that climb out are refused.
func TestInDir(t *testing.T) {
	root := t.TempDir()
	write := func(p, s string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(s), 0o644))
	}
	// The cache's layout: models--org--name/{blobs/HASH, snapshots/REV/FILE -> ../../blobs/HASH}.
	repo := filepath.Join(root, "hub", "models--org--tiny")
	write(filepath.Join(repo, "blobs", "abc123"), `{"model_type": "llama"}`)
	snap := filepath.Join(repo, "snapshots", "rev1")
	require.NoError(t, os.MkdirAll(snap, 0o755))
	require.NoError(t, os.Symlink(filepath.Join("..", "..", "blobs", "abc123"), filepath.Join(snap, "config.json")))
	other := filepath.Join(root, "hub", "models--org--other", "blobs", "def456")
	write(other, "other")
	require.NoError(t, os.Symlink(other, filepath.Join(snap, "tokenizer.json")))

	dir := filepath.Join(root, "model")
	write(filepath.Join(dir, "config.json"), "{}")
	write(filepath.Join(dir, "real", "w.safetensors"), "w")
	require.NoError(t, os.Symlink(filepath.Join("real", "w.safetensors"), filepath.Join(dir, "model.safetensors")))
	secret := filepath.Join(root, "secret")
	write(secret, "root:x:0:0")
	require.NoError(t, os.Symlink(secret, filepath.Join(dir, "tokenizer.json")))
	require.NoError(t, os.Symlink(root, filepath.Join(dir, "up")))
	link := filepath.Join(root, "link-to-model")
	require.NoError(t, os.Symlink(dir, link))

	for _, c := range []struct{ dir, name string }{
		{snap, "config.json"},      // a snapshot's link into its blobs
		{dir, "config.json"},       // a plain file
		{dir, "model.safetensors"}, // a link inside the directory
		{link, "config.json"},      // the directory named through a link
		{dir, "absent.json"},       // left to the open to report
	} {
		p, err := InDir(c.dir, c.name)
		require.NoError(t, err, c)
		assert.Equal(t, filepath.Join(c.dir, c.name), p)
	}
	for _, c := range []struct{ dir, name, want string }{
		{dir, "tokenizer.json", "leads to " + secret},
		{dir, filepath.Join("up", "secret"), "outside"},
		{snap, "tokenizer.json", "outside"}, // another repository's blobs
		{dir, filepath.Join("..", "secret"), "is not a file name inside the directory"},
		{dir, secret, "is not a file name inside the directory"},
	} {
		_, err := InDir(c.dir, c.name)
		require.Error(t, err, c)
		assert.Contains(t, err.Error(), c.want)
		assert.NotContains(t, err.Error(), "root:x", "no contents in the message")
	}
	b, err := ReadFileInDir(snap, "config.json", 1<<10)
	require.NoError(t, err)
	assert.Equal(t, `{"model_type": "llama"}`, string(b))
}

// TestOpenRefusesWithoutBlocking: a FIFO with no writer, a directory and a device are
// refused by type at once.
func TestOpenRefusesWithoutBlocking(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	for path, kind := range map[string]string{fifo: "a named pipe (FIFO)", t.TempDir(): "a directory", "/dev/zero": "a character device"} {
		_, _, err := Open(path)
		var nr *NotRegularError
		require.True(t, errors.As(err, &nr), "%s: %v", path, err)
		assert.Contains(t, err.Error(), kind)
		_, err = ReadFile(path, 1<<10)
		assert.ErrorAs(t, err, &nr)
	}
}
