package fsutil

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testsupport"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok.json")
	require.NoError(t, os.WriteFile(ok, []byte(`{"a": 1}`), 0o644))
	b, err := ReadFile(ok, 100)
	require.NoError(t, err)
	assert.Equal(t, `{"a": 1}`, string(b))

	_, err = ReadFile(ok, 3)
	assert.ErrorContains(t, err, "more than the 3")
	fifo := testsupport.FIFO(t, dir, "fifo")
	for _, p := range []string{fifo, dir, "/dev/zero"} {
		_, err := ReadFile(p, 100)
		assert.ErrorContains(t, err, "not a regular file", p)
	}
	_, err = ReadFile(filepath.Join(dir, "absent"), 100)
	assert.ErrorIs(t, err, os.ErrNotExist)
}
