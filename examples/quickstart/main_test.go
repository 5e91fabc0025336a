package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestQuickstartRuns(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, run(context.Background(), true, 2, 512, dir))
	_, err := os.Stat(filepath.Join(dir, "checkpoints", "last.pt"))
	require.NoError(t, err)
}
