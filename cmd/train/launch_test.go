package main

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
)

var small = []string{"--synthetic", "512", "--epochs", "1", "--workers", "1", "--log-every", "100", "--threads", "1"}

// TestLaunchTwoRanks: --nproc-per-node 2 trains the default CNN on two local processes
// and rank 0 alone writes one run directory.
func TestLaunchTwoRanks(t *testing.T) {
	runs := t.TempDir()
	cmd := child(append([]string{"--nproc-per-node", "2", "--runs-dir", runs}, small...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "distributed: 2 ranks")
	entries, err := os.ReadDir(runs)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	dir := filepath.Join(runs, entries[0].Name())
	assert.FileExists(t, filepath.Join(dir, "checkpoints", "last.pt"))
	assert.FileExists(t, filepath.Join(dir, "config.json"))
	hist, err := os.ReadFile(filepath.Join(dir, "history.jsonl"))
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(string(hist), "\n"))
	assert.Equal(t, 1, strings.Count(string(out), "Epoch 1 |"), "only rank 0 prints")
}

// TestBadLaunchEnvironment: a bad torchrun environment or a busy port fails before
// training with an error that says what is wrong, and writes nothing.
func TestBadLaunchEnvironment(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	port := strconv.Itoa(busy.Addr().(*net.TCPAddr).Port)
	for name, c := range map[string]struct {
		env  []string
		args []string
		want string
	}{
		"rank >= world size": {env: []string{"RANK=2", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500"}, want: "RANK must be below WORLD_SIZE"},
		"no master addr":     {env: []string{"RANK=0", "WORLD_SIZE=2", "MASTER_PORT=29500"}, want: "MASTER_ADDR is not set"},
		"unknown backend":    {args: []string{"--nproc-per-node", "2", "--dist-backend", "mpi", "--dist-timeout", "10s"}, want: `backend "mpi" is not gloo, nccl`},
		"nccl on the cpu":    {env: []string{"RANK=0", "WORLD_SIZE=1", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port}, args: []string{"--dist-backend", "nccl", "--device", "cpu"}, want: "NCCL"},
		"port in use":        {args: []string{"--nproc-per-node", "2", "--master-port", port, "--dist-timeout", "3s"}, want: "could not host the rendezvous store on 127.0.0.1:" + port},
	} {
		t.Run(name, func(t *testing.T) {
			runs := t.TempDir()
			cmd := child(append(append([]string{"--runs-dir", runs}, c.args...), small...)...)
			cmd.Env = append(cmd.Env, c.env...)
			out, err := cmd.CombinedOutput()
			require.Error(t, err, string(out))
			assert.Contains(t, string(out), c.want)
			assert.NotContains(t, string(out), "Epoch 1 |")
			entries, err := os.ReadDir(runs)
			require.NoError(t, err)
			assert.Empty(t, entries)
		})
	}
}

// TestLaunchSIGINTThenResumeIsExact: a SIGINT to the launcher in the middle of epoch 2
// stops both ranks at the same step (they agree on it before every step), rank 0 writes
// last.pt, and --resume with the same world size ends bitwise equal to an uninterrupted
// two-rank run.
func TestLaunchSIGINTThenResumeIsExact(t *testing.T) {
	runs := t.TempDir()
	args := []string{"--nproc-per-node", "2", "--runs-dir", runs, "--synthetic", "4096", "--model", "mlp", "--epochs", "3",
		"--batch-size", "32", "--workers", "1", "--deterministic", "--seed", "5", "--log-every", "1", "--threads", "1"}
	out, err := child(append(args, "--experiment", "ref")...).CombinedOutput()
	require.NoError(t, err, string(out))

	log := interruptAt(t, child(append(args, "--experiment", "cut")...), "epoch 2 batch 10/")
	assert.Contains(t, log, "--resume")
	assert.NotContains(t, log, "lost rank", "the ranks must stop together")
	last := filepath.Join(runs, "cut", "checkpoints", "last.pt")
	v, err := checkpoint.Read(last)
	require.NoError(t, err)
	b, err := checkpoint.GetInt(v, "batch_in_epoch")
	require.NoError(t, err)
	require.Positive(t, b, "stopped mid-epoch")

	out, err = child("--nproc-per-node", "2", "--resume", last).CombinedOutput()
	require.NoError(t, err, string(out))
	sameState(t, filepath.Join(runs, "ref", "checkpoints", "last.pt"), last)
}
