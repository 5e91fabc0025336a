package main

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
)

func TestMain(m *testing.M) {
	if os.Getenv("TRAIN_RUN_MAIN") == "1" {
		if v := os.Getenv("TRAIN_TEST_MAX_LINE_BYTES"); v != "" {
			maxLMLineBytes, _ = strconv.Atoi(v) // TestFineTuneScaledInputs' lowered line limit
		}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func child(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "TRAIN_RUN_MAIN=1")
	return cmd
}

var common = []string{"--synthetic", "4096", "--model", "mlp", "--epochs", "3", "--batch-size", "32", "--workers", "2",
	"--deterministic", "--seed", "11", "--scheduler", "step", "--log-every", "1", "--threads", "1"}

// sameState requires two checkpoints to hold bitwise-equal model, optimizer and scheduler
// state: every tensor's bytes and every scalar.
func sameState(t *testing.T, a, b string) {
	va, err := checkpoint.Read(a)
	require.NoError(t, err)
	vb, err := checkpoint.Read(b)
	require.NoError(t, err)
	for _, key := range []string{"model_state_dict", "optimizer_state_dict", "scheduler_state_dict", "epoch", "global_step", "history"} {
		x, err := checkpoint.Get(va, key)
		require.NoError(t, err)
		y, err := checkpoint.Get(vb, key)
		require.NoError(t, err)
		requireSame(t, key, x, y)
	}
}

func requireSame(t *testing.T, path string, x, y any) {
	t.Helper()
	switch a := x.(type) {
	case *checkpoint.Tensor:
		b, ok := y.(*checkpoint.Tensor)
		require.True(t, ok, path)
		require.Equal(t, a.Shape, b.Shape, path)
		require.True(t, bytes.Equal(a.Bytes(), b.Bytes()), "%s: tensor bytes differ", path)
	case *checkpoint.Dict:
		b, ok := y.(*checkpoint.Dict)
		require.True(t, ok, path)
		require.Equal(t, a.Keys(), b.Keys(), path)
		for _, k := range a.Keys() {
			if s, _ := k.(string); strings.HasPrefix(path, "history") && (s == "elapsed_sec" || s == "samples_per_sec" || s == "data_wait_frac") {
				continue // wall-clock measurements differ between runs
			}
			ea, _ := a.Get(k)
			eb, _ := b.Get(k)
			requireSame(t, fmt.Sprintf("%s.%v", path, k), ea, eb)
		}
	case []any:
		b, ok := y.([]any)
		require.True(t, ok, path)
		require.Len(t, b, len(a), path)
		for i := range a {
			requireSame(t, fmt.Sprintf("%s[%d]", path, i), a[i], b[i])
		}
	case checkpoint.Tuple:
		requireSame(t, path, []any(a), []any(y.(checkpoint.Tuple)))
	case float64:
		b, ok := y.(float64)
		require.True(t, ok, path)
		require.Equal(t, math.Float64bits(a), math.Float64bits(b), "%s: %v vs %v", path, a, b)
	default:
		require.Equal(t, x, y, path)
	}
}

// TestSIGINTThenResumeIsExact interrupts a run with SIGINT in the middle of epoch 2,
// resumes it with --resume, and requires the final state to equal an uninterrupted
// run's bit for bit.
func TestSIGINTThenResumeIsExact(t *testing.T) {
	dir := t.TempDir()
	ref := child(append(common, "--runs-dir", dir, "--experiment", "ref")...)
	out, err := ref.CombinedOutput()
	require.NoError(t, err, string(out))

	log := interruptAt(t, child(append(common, "--runs-dir", dir, "--experiment", "cut")...), "epoch 2 batch 10/")
	assert.Contains(t, log, "--resume")
	last := filepath.Join(dir, "cut", "checkpoints", "last.pt")
	v, err := checkpoint.Read(last)
	require.NoError(t, err)
	b, err := checkpoint.GetInt(v, "batch_in_epoch")
	require.NoError(t, err)
	epoch, _ := checkpoint.GetInt(v, "epoch")
	t.Logf("interrupted at epoch %d batch %d", epoch+1, b)

	start := time.Now()
	res := child("--resume", last)
	out, err = res.CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "resumed from")
	t.Logf("resumed run took %s", time.Since(start).Round(time.Millisecond))
	sameState(t, filepath.Join(dir, "ref", "checkpoints", "last.pt"), last)
}

func TestBadFlags(t *testing.T) {
	out, err := child("--model", "transformer", "--synthetic", "64").CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), `unknown model "transformer"`)
	out, err = child("--amp", "fp16", "--device", "cpu", "--synthetic", "64", "--runs-dir", t.TempDir()).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "fp16 needs a CUDA device")
	out, err = child("--resume", filepath.Join(t.TempDir(), "missing.pt")).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "missing.pt")
	// A scheduler refusing its arguments is an error, not a panic's stack.
	out, err = child("--optimizer", "adagrad", "--scheduler", "onecycle", "--synthetic", "64", "--runs-dir", t.TempDir()).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "OneCycleLR: cycle_momentum needs an optimizer with momentum or betas")
	assert.NotContains(t, string(out), "goroutine")
}

// TestFusedAdamIsTheDefault: cmd/train's Adam and AdamW use the fused kernel unless
// --adam-kernel foreach, and the choice is in the optimizer's param groups as PyTorch's
// "fused" option (True, or None for the default implementation).
func TestFusedAdamIsTheDefault(t *testing.T) {
	for _, c := range []struct {
		opt   string
		fused bool
		want  any
	}{{"adam", true, true}, {"adamw", true, true}, {"adam", false, nil}} {
		cfg := defaultConfig()
		cfg.Optimizer, cfg.AdamKernel = c.opt, map[bool]string{true: "fused", false: "foreach"}[c.fused]
		torch.WithScope(func() {
			o, err := optimizer(cfg, []*torch.Tensor{torch.Zeros([]int64{2}, torch.Float32, torch.CPU).SetRequiresGrad(true)})
			require.NoError(t, err)
			g, err := checkpoint.GetList(o.StateDict(), "param_groups")
			require.NoError(t, err)
			f, err := checkpoint.Get(g[0], "fused")
			require.NoError(t, err)
			assert.Equal(t, c.want, f, "%s fused=%v", c.opt, c.fused)
		})
	}
	assert.Equal(t, "fused", defaultConfig().AdamKernel)
}

// interruptAt runs cmd, sends it SIGINT when it prints a line containing marker, and
// requires it to end as an interrupted run does (exit status 130). It returns what cmd
// printed.
func interruptAt(t *testing.T, cmd *exec.Cmd, marker string) string {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	var log strings.Builder
	sc := bufio.NewScanner(stdout)
	sent := false
	for sc.Scan() {
		line := sc.Text()
		log.WriteString(line + "\n")
		if !sent && strings.Contains(line, marker) {
			require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
			sent = true
		}
	}
	err = cmd.Wait()
	require.True(t, sent, "never printed %q:\n%s", marker, log.String())
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "the interrupted run must fail:\n%s", log.String())
	assert.Equal(t, 130, ee.ExitCode(), log.String())
	return log.String()
}
