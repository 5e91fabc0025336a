package tokenizer

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLoadDirHostileFiles: a tokenizer.json or tokenizer_config.json that is a named
// pipe, a device, a directory or a link out of the model directory is refused naming
// the file, without blocking (the reader opened a FIFO before it checked the type and
// waited for a writer forever) and without reading it: under 64 KB allocated besides
// what loading the directory's tokenizer.json alone allocates (a link to /dev/zero read
// whole would not end).
func TestLoadDirHostileFiles(t *testing.T) {
	plain := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(plain, "tokenizer.json"), tinyFile(t, nil), 0o644))
	alone := allocated(func() { _, err := LoadDir(plain); require.NoError(t, err) })
	secret := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(secret, tinyFile(t, nil), 0o600))
	for _, c := range []struct {
		name, file string
		make       func(p string) error
		want       string
	}{
		{"tokenizer.json a FIFO", "tokenizer.json", func(p string) error { return syscall.Mkfifo(p, 0o644) }, "named pipe (FIFO), not a regular file"},
		{"tokenizer_config.json a FIFO", "tokenizer_config.json", func(p string) error { return syscall.Mkfifo(p, 0o644) }, "named pipe (FIFO), not a regular file"},
		{"tokenizer.json a link to /dev/zero", "tokenizer.json", func(p string) error { return os.Symlink("/dev/zero", p) }, "leads to /dev/zero, outside"},
		{"tokenizer_config.json a directory", "tokenizer_config.json", func(p string) error { return os.Mkdir(p, 0o755) }, "a directory, not a regular file"},
		{"tokenizer.json a link outside", "tokenizer.json", func(p string) error { return os.Symlink(secret, p) }, "leads to " + secret + ", outside"},
		{"tokenizer_config.json a link outside", "tokenizer_config.json", func(p string) error { return os.Symlink(secret, p) }, "leads to " + secret + ", outside"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if c.file != "tokenizer.json" {
				require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), tinyFile(t, nil), 0o644))
			}
			p := filepath.Join(dir, c.file)
			require.NoError(t, c.make(p))
			var err error
			done := make(chan struct{})
			var got uint64
			go func() {
				defer close(done)
				got = allocated(func() { _, err = LoadDir(dir) })
			}()
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Fatal("LoadDir has not returned after a minute: the read blocked")
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), p)
			assert.Contains(t, err.Error(), c.want)
			assert.Less(t, got, alone+64<<10, "bytes allocated (tokenizer.json alone: %d)", alone)
		})
	}
}
