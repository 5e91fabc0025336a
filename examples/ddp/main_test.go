package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch/distributed/disttest"
)

func TestMain(m *testing.M) {
	disttest.Main(m, map[string]func() error{
		"ddp": func() error {
			return run(context.Background(), true, 1, 30*time.Second, os.Getenv("GOTRAIN_TEST_RUNDIR"))
		},
	})
}

func TestDDPExampleRunsOnTwoRanks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	for r, c := range disttest.Spawn(t, "ddp", 2, []string{"GOTRAIN_TEST_RUNDIR=" + dir}) {
		require.NoErrorf(t, c.Err, "rank %d:\n%s", r, c.Output)
	}
	require.FileExists(t, filepath.Join(dir, "checkpoints", "last.pt"))
}
