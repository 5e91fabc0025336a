package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/internal/testsupport"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/trainer"
)

// Test hooks, read in every process of the test binary (the launcher and its ranks run
// it too): TRAIN_TEST_GPUS fakes the number of visible GPUs; TRAIN_TEST_LATE_RANK makes
// that rank hang before the rendezvous, deaf to SIGTERM, as a stuck process is;
// TRAIN_TEST_SHARDS_DIR makes each rank of sharded training write its shards there
// after Run (shards-RANK.json: each parameter's shape and values).
func init() {
	if dir := os.Getenv("TRAIN_TEST_SHARDS_DIR"); dir != "" {
		afterRun = func(t *trainer.Trainer) error { return writeShards(t, dir) }
	}
	if s := os.Getenv("TRAIN_TEST_GPUS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			panic(err)
		}
		cudaDevices = func() int { return n }
	}
	if s := os.Getenv("TRAIN_TEST_LATE_RANK"); s != "" {
		late, err := strconv.Atoi(s)
		if err != nil {
			panic(err)
		}
		beforeRendezvous = func(rank int) {
			if rank == late {
				fmt.Fprintf(os.Stderr, "test: rank %d hangs before the rendezvous\n", rank)
				time.Sleep(time.Hour)
			}
		}
	}
}

// shardJSON is one shard as writeShards writes it.
type shardJSON struct {
	Shape []int64   `json:"shape"`
	Data  []float32 `json:"data"`
}

// writeShards writes this rank's shards of a sharded run to dir/shards-RANK.json.
func writeShards(t *trainer.Trainer, dir string) error {
	f, ok := t.Strategy().(*trainer.FullyShardedDataParallel)
	if !ok {
		return errors.New("test: TRAIN_TEST_SHARDS_DIR without --fsdp")
	}
	out := map[string]shardJSON{}
	torch.WithScope(func() {
		for name, s := range f.Shards() {
			out[name] = shardJSON{Shape: s.Shape(), Data: s.ToDType(torch.Float32).Float32s()}
		}
	})
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, fmt.Sprintf("shards-%d.json", f.Group.Rank())), b, 0o644)
}

// hfEqualsShardsPy loads hf/last (argv[1]) with transformers and checks that every
// parameter is its shards (argv[3:], one JSON file a rank) put together along dim 0,
// exactly, and that training moved them from the initial model (argv[2]).
const hfEqualsShardsPy = `
import json, math, sys, torch
from transformers import LlamaForCausalLM
got = LlamaForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float32)
init = dict(LlamaForCausalLM.from_pretrained(sys.argv[2], torch_dtype=torch.float32).named_parameters())
ranks = [json.load(open(p)) for p in sys.argv[3:]]
params = dict(got.named_parameters())
assert set(params) == set(ranks[0]), (sorted(set(params) ^ set(ranks[0])))
moved = 0
for name, p in params.items():
    rows = p.shape[0]
    parts = [torch.tensor(r[name]["data"], dtype=torch.float32).reshape(r[name]["shape"]) for r in ranks]
    for part in parts:
        assert part.shape[0] == math.ceil(rows / len(ranks)), (name, part.shape, p.shape)
    whole = torch.cat(parts, 0)[:rows]
    assert torch.equal(whole, p.detach()), (name, (whole - p.detach()).abs().max().item())
    moved += not torch.equal(init[name], p.detach())
assert moved == len(params), f"{moved} of {len(params)} parameters changed in training"
print("ok", len(params))
`

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

// TestLaunchFSDP: --fsdp with --nproc-per-node 2 trains sharded; rank 0 writes the run
// directory without checkpoints, which sharded training does not write yet, and says so.
// Without several ranks --fsdp is refused.
func TestLaunchFSDP(t *testing.T) {
	runs := t.TempDir()
	out, err := child(append([]string{"--nproc-per-node", "2", "--fsdp", "--runs-dir", runs}, small...)...).CombinedOutput()
	require.NoError(t, err, string(out))
	entries, err := os.ReadDir(runs)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	dir := filepath.Join(runs, entries[0].Name())
	// The checkpoint is sharded: a directory of each rank's shards and the metadata.
	assert.FileExists(t, filepath.Join(dir, "checkpoints", "last.pt", "rank-1-of-2.pt"))
	assert.FileExists(t, filepath.Join(dir, "checkpoints", "last.pt", "metadata.pt"))
	hist, err := os.ReadFile(filepath.Join(dir, "history.jsonl"))
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(string(hist), "\n"))

	out, err = child(append([]string{"--fsdp", "--runs-dir", t.TempDir()}, small...)...).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "--fsdp shards across ranks")
}

// TestLaunchFSDPReshard: --fsdp --fsdp-reshard fine-tunes a Hugging Face Llama on two
// ranks with its layers resharded; the evaluation sample, generated on both ranks a
// layer at a time, is the sample of the same run with whole layers, and hf/last,
// written a layer at a time, loads in gotrain and in transformers with every parameter
// equal to the ranks' final shards put together. Without --fsdp, --fsdp-reshard is
// refused.
func TestLaunchFSDPReshard(t *testing.T) {
	model, pairs, runs, shards := tinyLlamaDir(t), pairsFile(t), t.TempDir(), t.TempDir()
	cmd := child("--nproc-per-node", "2", "--fsdp", "--fsdp-reshard", "--model", model, "--data", pairs, "--batch-size", "4",
		"--optimizer", "adamw", "--lr", "1e-2", "--scheduler", "none", "--threads", "1", "--workers", "1", "--epochs", "1",
		"--runs-dir", runs, "--experiment", "z3")
	cmd.Env = append(cmd.Env, "TRAIN_TEST_SHARDS_DIR="+shards)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	// The sample, generated on both ranks a layer at a time, is the one rank 0 generates
	// alone when the layers stay whole (the same training to the bit).
	whole, err := child("--nproc-per-node", "2", "--fsdp", "--model", model, "--data", pairs, "--batch-size", "4",
		"--optimizer", "adamw", "--lr", "1e-2", "--scheduler", "none", "--threads", "1", "--workers", "1", "--epochs", "1",
		"--runs-dir", runs, "--experiment", "whole").CombinedOutput()
	require.NoError(t, err, string(whole))
	require.NotEmpty(t, linesWith(whole, "continuation: "))
	assert.Equal(t, linesWith(whole, "continuation: "), linesWith(out, "continuation: "))
	last := filepath.Join(runs, "z3", "hf", "last")
	m, err := models.LoadPretrained(last, models.LoadOptions{})
	require.NoError(t, err, "hf/last loads")
	nn.Free(m)
	py := testpy.Run(t, hfEqualsShardsPy, []string{"torch", "transformers"}, last, model,
		filepath.Join(shards, "shards-0.json"), filepath.Join(shards, "shards-1.json"))
	assert.Regexp(t, `^ok \d+$`, strings.TrimSpace(string(py)))

	out, err = child("--fsdp-reshard", "--runs-dir", t.TempDir(), "--synthetic", "64").CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "--fsdp-reshard (fsdp_reshard in a config file) needs fsdp")
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

// stopDeadline is how soon after a signal every process of a launch must be gone.
const stopDeadline = 10 * time.Second

// withEnv returns cmd's environment with kv set (replacing what it had) and the names
// in unset removed.
func withEnv(cmd *exec.Cmd, kv []string, unset ...string) {
	drop := map[string]bool{}
	for _, e := range kv {
		k, _, _ := strings.Cut(e, "=")
		drop[k] = true
	}
	for _, k := range unset {
		drop[k] = true
	}
	var env []string
	for _, e := range cmd.Env {
		if k, _, _ := strings.Cut(e, "="); !drop[k] {
			env = append(env, e)
		}
	}
	cmd.Env = append(env, kv...)
}

// TestLaunchMoreRanksThanGPUs: more ranks than visible GPUs on CUDA is an error before
// anything starts, naming the counts and CUDA_VISIBLE_DEVICES; a rank started by
// another launcher (torchrun's environment) whose LOCAL_RANK has no GPU fails at start
// with the same message, before its rendezvous.
func TestLaunchMoreRanksThanGPUs(t *testing.T) {
	port := strconv.Itoa(freeTestPort(t))
	for name, c := range map[string]struct {
		env   []string
		unset []string
		args  []string
		want  []string
	}{
		"launcher, one GPU": {env: []string{"TRAIN_TEST_GPUS=1", "CUDA_VISIBLE_DEVICES=0"}, args: []string{"--nproc-per-node", "2", "--device", "cuda"},
			want: []string{`--nproc-per-node 2: 2 ranks on this node need one GPU each, but 1 GPU is visible (CUDA_VISIBLE_DEVICES="0")`, "at most 1 rank(s) per node (--nproc-per-node 1)", "--device cpu"}},
		"launcher, nccl, no GPU": {env: []string{"TRAIN_TEST_GPUS=0"}, unset: []string{"CUDA_VISIBLE_DEVICES"}, args: []string{"--nproc-per-node", "3", "--dist-backend", "nccl"},
			want: []string{"--nproc-per-node 3: 3 ranks on this node need one GPU each, but 0 GPUs are visible (CUDA_VISIBLE_DEVICES is not set)"}},
		"launcher, auto device, two GPUs": {env: []string{"TRAIN_TEST_GPUS=2", "CUDA_VISIBLE_DEVICES=0,1"}, args: []string{"--nproc-per-node", "4"},
			want: []string{`4 ranks on this node need one GPU each, but 2 GPUs are visible (CUDA_VISIBLE_DEVICES="0,1")`}},
		"torchrun rank": {env: []string{"TRAIN_TEST_GPUS=1", "CUDA_VISIBLE_DEVICES=0", "RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2",
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port}, args: []string{"--device", "cuda", "--rdzv-timeout", "25s"},
			want: []string{`rank 1 (LOCAL_RANK 1) has no GPU: 2 ranks on this node need one GPU each, but 1 GPU is visible (CUDA_VISIBLE_DEVICES="0")`}},
	} {
		t.Run(name, func(t *testing.T) {
			runs := t.TempDir()
			cmd := child(append(append([]string{"--runs-dir", runs}, c.args...), small...)...)
			withEnv(cmd, c.env, c.unset...)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, string(out))
			assert.Equal(t, 1, ee.ExitCode(), string(out))
			for _, w := range c.want {
				assert.Contains(t, string(out), w)
			}
			assert.NotContains(t, string(out), "launched", "no rank may start")
			assert.NotContains(t, string(out), "waiting for", "no rendezvous may start")
			entries, err := os.ReadDir(runs)
			require.NoError(t, err)
			assert.Empty(t, entries)
		})
	}
}

func freeTestPort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// launched is a launcher started by a test, with its output read line by line.
// proc is a child run of the train binary (child) whose combined output is read line by
// line as it comes: kept whole for output, and handed to whoever waits on line.
type proc struct {
	t    *testing.T
	cmd  *exec.Cmd
	mu   sync.Mutex
	log  strings.Builder
	line chan string
	done chan error // the child's Wait, once its output has ended
}

// startProc starts the train binary with args and env set; the child is killed when the
// test ends.
func startProc(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, cmd: child(args...), line: make(chan string, 1024), done: make(chan error, 1)}
	withEnv(p.cmd, env)
	out, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	p.cmd.Stderr = p.cmd.Stdout
	require.NoError(t, p.cmd.Start())
	t.Cleanup(func() { p.cmd.Process.Kill() })
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.line <- sc.Text():
			default:
			}
		}
		close(p.line)
		p.done <- p.cmd.Wait()
	}()
	return p
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// waitFor returns the first line containing marker, failing the test if the output ends
// first.
func (p *proc) waitFor(marker string) string {
	p.t.Helper()
	for line := range p.line {
		if strings.Contains(line, marker) {
			return line
		}
	}
	p.t.Fatalf("the child ended without printing %q:\n%s", marker, p.output())
	return ""
}

// launched is a run of the launcher and the pids of the ranks it started.
type launched struct {
	*proc
	pids []int
}

func startLaunch(t *testing.T, env []string, args ...string) *launched {
	t.Helper()
	l := &launched{proc: startProc(t, env, args...)}
	t.Cleanup(func() {
		// Whatever the test's outcome, nothing it started outlives it.
		for _, p := range l.pids {
			syscall.Kill(p, syscall.SIGKILL)
		}
	})
	l.waitFor("train: launched ")
	return l
}

var pidsRE = regexp.MustCompile(`pids ([0-9 ]+)\)`)

// waitFor returns the first line containing marker (the ranks' pids from the
// launcher's first line), failing the test if the output ends first.
func (l *launched) waitFor(marker string) string {
	l.t.Helper()
	for line := range l.line {
		if m := pidsRE.FindStringSubmatch(line); m != nil && l.pids == nil {
			for _, f := range strings.Fields(m[1]) {
				p, err := strconv.Atoi(f)
				require.NoError(l.t, err)
				l.pids = append(l.pids, p)
			}
		}
		if strings.Contains(line, marker) {
			return line
		}
	}
	l.t.Fatalf("the launch ended without printing %q:\n%s", marker, l.output())
	return ""
}

// rank0Failed waits for the launcher to report that rank 0 exited with status 1, ends
// the launch within stopDeadline, requires the launcher's exit status 1 and returns its
// output.
func (l *launched) rank0Failed() string {
	l.t.Helper()
	l.waitFor("rank 0 exited with status 1")
	status := l.end(time.Now().Add(stopDeadline))
	out := l.output()
	assert.Equal(l.t, 1, status, out)
	return out
}

// signal sends s to the launcher and returns the deadline for everything to be gone.
func (l *launched) signal(s syscall.Signal) time.Time {
	require.NoError(l.t, l.cmd.Process.Signal(s))
	return time.Now().Add(stopDeadline)
}

// end waits for the launcher until deadline, requires that every rank is gone by then
// too, and returns the launcher's exit status.
func (l *launched) end(deadline time.Time) int {
	l.t.Helper()
	var err error
	select {
	case err = <-l.done:
	case <-time.After(time.Until(deadline)):
		l.t.Fatalf("the launcher still runs %v after the signal:\n%s", stopDeadline, l.output())
	}
	requireGone(l.t, l.pids, deadline)
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	require.ErrorAs(l.t, err, &ee)
	return ee.ExitCode()
}

// requireGone waits until none of pids is a live process (a zombie counts as gone),
// failing when one still is at deadline.
func requireGone(t *testing.T, pids []int, deadline time.Time) {
	t.Helper()
	require.NotEmpty(t, pids)
	for {
		var alive []int
		for _, p := range pids {
			if processLive(p) {
				alive = append(alive, p)
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("rank processes %v outlived the launcher's stop", alive)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func processLive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	// The state follows the command name in parentheses: "Z" is a zombie, "X" dead.
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || i+2 >= len(stat) || (stat[i+2] != 'Z' && stat[i+2] != 'X')
}

// noTemporaryFiles requires that no checkpoint is half-written under dir: no temporary
// file of checkpoint.Write, no staging directory of a sharded save, and every .pt file
// reads back whole.
func noTemporaryFiles(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		require.NoError(t, err)
		assert.NotContains(t, d.Name(), ".tmp", "left behind: %s", path)
		assert.False(t, strings.HasSuffix(d.Name(), ".sharded-staging"), "left behind: %s", path)
		if !d.IsDir() && strings.HasSuffix(path, ".pt") {
			_, err := checkpoint.Read(path)
			assert.NoError(t, err, "%s must be whole", path)
		}
		return nil
	})
}

var launchArgs = []string{"--synthetic", "4096", "--model", "mlp", "--batch-size", "32", "--workers", "1", "--log-every", "1", "--threads", "1"}

// TestLaunchRankNeverJoins: a rank that never reaches the rendezvous makes rank 0 fail
// at the rendezvous timeout, naming it; the launcher reports rank 0's failure and kills
// the hung rank, which ignores SIGTERM.
func TestLaunchRankNeverJoins(t *testing.T) {
	runs := t.TempDir()
	l := startLaunch(t, []string{"TRAIN_TEST_LATE_RANK=1"},
		append([]string{"--nproc-per-node", "2", "--runs-dir", runs, "--epochs", "1", "--rdzv-timeout", "3s"}, launchArgs...)...)
	out := l.rank0Failed()
	assert.Contains(t, out, "rendezvous timed out after 3 s at 127.0.0.1:")
	assert.Contains(t, out, "1 of 2 ranks arrived; rank 1 did not arrive")
	assert.Contains(t, out, "rank(s) 1 did not stop within")
	assert.NotContains(t, out, "Epoch 1 |")
}

// TestLaunchSIGTERMDuringRendezvous: SIGTERM while rank 0 waits for a rank that hangs
// before joining stops both within the deadline: rank 0 at once, the hung one by the
// kill after the grace period; the launcher exits 130 and nothing was written.
func TestLaunchSIGTERMDuringRendezvous(t *testing.T) {
	runs := t.TempDir()
	l := startLaunch(t, []string{"TRAIN_TEST_LATE_RANK=1"},
		append([]string{"--nproc-per-node", "2", "--runs-dir", runs, "--epochs", "1", "--rdzv-timeout", "60s"}, launchArgs...)...)
	// Both ranks are in place: rank 0 in the rendezvous, rank 1 in its hang.
	for seen := map[string]bool{}; len(seen) < 2; {
		line := l.waitFor(" ")
		for _, m := range []string{"rank 0 waiting for 2 ranks", "rank 1 hangs before the rendezvous"} {
			if strings.Contains(line, m) {
				seen[m] = true
			}
		}
	}
	status := l.end(l.signal(syscall.SIGTERM))
	out := l.output()
	assert.Equal(t, 130, status, out)
	assert.Contains(t, out, "rank 0: interrupted (")
	assert.Contains(t, out, "during the rendezvous")
	assert.Contains(t, out, "interrupted (terminated): all 2 ranks stopped (rank(s) 1 killed); no checkpoint was written in this run")
	noTemporaryFiles(t, runs)
}

// TestLaunchSIGTERMDuringTraining: SIGTERM in the middle of an epoch stops both ranks
// at the same step within the deadline; rank 0 writes last.pt, and the launcher exits
// 130 with the command that resumes.
func TestLaunchSIGTERMDuringTraining(t *testing.T) {
	runs := t.TempDir()
	l := startLaunch(t, nil, append([]string{"--nproc-per-node", "2", "--runs-dir", runs, "--experiment", "cut", "--epochs", "2"}, launchArgs...)...)
	l.waitFor("epoch 1 batch 5/")
	status := l.end(l.signal(syscall.SIGTERM))
	out := l.output()
	assert.Equal(t, 130, status, out)
	last := filepath.Join(runs, "cut", "checkpoints", "last.pt")
	assert.Contains(t, out, "interrupted (terminated): all 2 ranks stopped; state saved to "+last+
		"; resume with: go run ./cmd/train --nproc-per-node 2 --resume "+last)
	noTemporaryFiles(t, runs)
	v, err := checkpoint.Read(last)
	require.NoError(t, err)
	b, err := checkpoint.GetInt(v, "batch_in_epoch")
	require.NoError(t, err)
	assert.Positive(t, b, "stopped mid-epoch")
}

// TestLaunchSIGTERMDuringCheckpointWrite: SIGTERM while rank 0 is in the middle of
// writing a checkpoint (held there with SIGSTOP from the moment its temporary file
// appears). If the write can finish, it does, and the ranks then stop as after any
// SIGTERM; if it outlasts the grace period, rank 0 is killed and its temporary file
// removed. Either way every process is gone within the deadline, the launcher exits
// 130, and no temporary or partial checkpoint is left.
func TestLaunchSIGTERMDuringCheckpointWrite(t *testing.T) {
	for _, resumeWriter := range []bool{true, false} {
		t.Run(map[bool]string{true: "write finishes", false: "writer killed"}[resumeWriter], func(t *testing.T) {
			runs := t.TempDir()
			ckpts := filepath.Join(runs, "cut", "checkpoints")
			require.NoError(t, os.MkdirAll(ckpts, 0o755))
			created := watchCreates(t, ckpts)
			l := startLaunch(t, nil, append([]string{"--nproc-per-node", "2", "--runs-dir", runs, "--experiment", "cut", "--epochs", "4",
				"--synthetic", "1024"}, launchArgs...)...)
			require.Len(t, l.pids, 2)
			writer := l.pids[0]
			var tmp string
			for tmp == "" {
				select {
				case name := <-created:
					if !strings.Contains(name, ".tmp-") {
						continue
					}
					require.NoError(t, syscall.Kill(writer, syscall.SIGSTOP))
					if _, err := os.Stat(filepath.Join(ckpts, name)); err != nil {
						// That write ended before rank 0 stopped: catch the next one.
						require.NoError(t, syscall.Kill(writer, syscall.SIGCONT))
						continue
					}
					tmp = name
				case <-time.After(25 * time.Second):
					t.Fatalf("no checkpoint write was seen:\n%s", l.output())
				}
			}
			deadline := l.signal(syscall.SIGTERM)
			if resumeWriter {
				time.Sleep(time.Second)
				require.NoError(t, syscall.Kill(writer, syscall.SIGCONT))
			}
			status := l.end(deadline)
			out := l.output()
			assert.Equal(t, 130, status, out)
			noTemporaryFiles(t, runs)
			last := filepath.Join(ckpts, "last.pt")
			if resumeWriter {
				assert.NotContains(t, out, "killing them")
				assert.Contains(t, out, "state saved to "+last+"; resume with: go run ./cmd/train --nproc-per-node 2 --resume "+last)
			} else {
				assert.Contains(t, out, "did not stop within")
				assert.Contains(t, out, fmt.Sprintf("removed %s, which killed rank 0 was writing", filepath.Join(ckpts, tmp)))
			}
		})
	}
}

// watchCreates reports the names of files created in dir (inotify), from now on.
func watchCreates(t *testing.T, dir string) <-chan string {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	require.NoError(t, err)
	_, err = syscall.InotifyAddWatch(fd, dir, syscall.IN_CREATE)
	require.NoError(t, err)
	f := os.NewFile(uintptr(fd), "inotify")
	t.Cleanup(func() { f.Close() })
	names := make(chan string, 256)
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := f.Read(buf)
			if err != nil {
				return
			}
			for off := 0; off+syscall.SizeofInotifyEvent <= n; {
				ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)]
				select {
				case names <- strings.TrimRight(string(name), "\x00"):
				default:
				}
				off += syscall.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}()
	return names
}

// TestLaunchRankFailureStopsTheJob: a rank that dies (SIGKILL) ends the job: the
// launcher names it, stops the other rank and exits with the dead rank's status.
func TestLaunchRankFailureStopsTheJob(t *testing.T) {
	runs := t.TempDir()
	l := startLaunch(t, nil, append([]string{"--nproc-per-node", "2", "--runs-dir", runs, "--epochs", "2"}, launchArgs...)...)
	l.waitFor("epoch 1 batch 3/")
	require.NoError(t, syscall.Kill(l.pids[1], syscall.SIGKILL))
	status := l.end(time.Now().Add(stopDeadline))
	out := l.output()
	assert.Equal(t, 128+int(syscall.SIGKILL), status, out)
	assert.Contains(t, out, "rank 1 was killed by signal 9 (killed); the other ranks were stopped")
	noTemporaryFiles(t, runs)
}

// TestLaunchKilledLauncherLeavesNoRank: even a launcher killed with SIGKILL, which can
// pass nothing on, leaves no rank behind (Linux's parent-death signal).
func TestLaunchKilledLauncherLeavesNoRank(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux's")
	}
	runs := t.TempDir()
	l := startLaunch(t, nil, append([]string{"--nproc-per-node", "2", "--runs-dir", runs, "--epochs", "2"}, launchArgs...)...)
	l.waitFor("epoch 1 batch 3/")
	require.NoError(t, l.cmd.Process.Kill())
	requireGone(t, l.pids, time.Now().Add(stopDeadline))
}

// TestLaunchHungRankIsNamed: a rank that hangs during training (SIGSTOP) makes the
// other's next collective fail at --dist-timeout with an error naming it; the launcher
// ends the job and kills the hung rank.
func TestLaunchHungRankIsNamed(t *testing.T) {
	runs := t.TempDir()
	l := startLaunch(t, nil, append([]string{"--nproc-per-node", "2", "--runs-dir", runs, "--epochs", "20", "--dist-timeout", "4s"}, launchArgs...)...)
	l.waitFor("epoch 1 batch 3/")
	require.NoError(t, syscall.Kill(l.pids[1], syscall.SIGSTOP))
	out := l.rank0Failed()
	assert.Contains(t, out, "failed on rank 0 of 2: lost rank 1")
	assert.Contains(t, out, "rank 0 exited with status 1; the other ranks were stopped (rank(s) 1 killed)")
	noTemporaryFiles(t, runs)
}

// TestLaunchFSDPSIGINTThenResumeIsExact: under --fsdp, a SIGINT to the launcher in the
// middle of epoch 2 stops both ranks at the same step, each writes its shards of the
// sharded checkpoints/last.pt (rank 0 the metadata too), and --resume with the same
// world size ends with every rank's shards, their optimizer state and the progress
// bitwise equal to an uninterrupted two-rank run's.
func TestLaunchFSDPSIGINTThenResumeIsExact(t *testing.T) {
	runs := t.TempDir()
	args := []string{"--nproc-per-node", "2", "--fsdp", "--runs-dir", runs, "--synthetic", "1024", "--model", "mlp", "--epochs", "2",
		"--batch-size", "16", "--workers", "1", "--deterministic", "--seed", "5", "--log-every", "1", "--threads", "1"}
	out, err := child(append(args, "--experiment", "ref")...).CombinedOutput()
	require.NoError(t, err, string(out))

	log := interruptAt(t, child(append(args, "--experiment", "cut")...), "epoch 2 batch 10/")
	assert.Contains(t, log, "--resume")
	assert.NotContains(t, log, "lost rank", "the ranks must stop together")
	last := filepath.Join(runs, "cut", "checkpoints", "last.pt")
	meta, err := checkpoint.Read(filepath.Join(last, "metadata.pt"))
	require.NoError(t, err)
	b, err := checkpoint.GetInt(meta, "batch_in_epoch")
	require.NoError(t, err)
	require.Positive(t, b, "stopped mid-epoch")
	staged, err := filepath.Glob(filepath.Join(runs, "cut", "checkpoints", ".*"))
	require.NoError(t, err)
	assert.Empty(t, staged, "no staging directory is left")
	one := filepath.Join(runs, "one")
	require.NoError(t, os.CopyFS(one, os.DirFS(filepath.Join(runs, "cut"))))

	out, err = child("--nproc-per-node", "2", "--resume", last).CombinedOutput()
	require.NoError(t, err, string(out))
	refLast := filepath.Join(runs, "ref", "checkpoints", "last.pt")
	sameShardedState(t, refLast, last, 2)

	// The same checkpoint resumes in one process without sharding (the full tensors put
	// together), in its run directory, whose sharded last.pt becomes a single file. The
	// epoch goes on after the same count of samples (b batches of 16 on 2 ranks: 2b
	// batches of 16 on one), and its first step's loss is at the loaded model's level,
	// far below a fresh model's; epoch 1's record is the checkpoint's.
	out, err = child("--resume", filepath.Join(one, "checkpoints", "last.pt"), "--fsdp=false").CombinedOutput()
	require.NoError(t, err, string(out))
	first := regexp.MustCompile(`epoch 2 batch (\d+)/64, loss: ([0-9.]+)`).FindStringSubmatch(string(out))
	require.NotNil(t, first, string(out))
	assert.Equal(t, strconv.FormatInt(2*b+1, 10), first[1], "the first batch after the resume")
	loss, err := strconv.ParseFloat(first[2], 64)
	require.NoError(t, err)
	assert.Less(t, loss, 0.05, "the loss right after the resume is the loaded model's")
	single, err := checkpoint.Read(filepath.Join(one, "checkpoints", "last.pt"))
	require.NoError(t, err, "a single file now:\n%s", out)
	refMeta, err := checkpoint.Read(filepath.Join(refLast, "metadata.pt"))
	require.NoError(t, err)
	got, err := checkpoint.GetList(single, "history")
	require.NoError(t, err)
	want, err := checkpoint.GetList(refMeta, "history")
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Len(t, want, 2)
	for _, key := range []string{"train_loss", "val_loss"} {
		g0, _ := checkpoint.GetFloat(got[0], key)
		w0, _ := checkpoint.GetFloat(want[0], key)
		assert.Equal(t, w0, g0, "epoch 1's %s is the checkpoint's", key)
	}
}

// sameShardedState requires the sharded checkpoints a and b, of world ranks, to hold the
// same training state: the metadata's progress and unsharded state, and every rank's
// shards and their optimizer state, bitwise.
func sameShardedState(t *testing.T, a, b string, world int) {
	t.Helper()
	files := []string{"metadata.pt"}
	for r := range world {
		files = append(files, fmt.Sprintf("rank-%d-of-%d.pt", r, world))
	}
	for _, f := range files {
		va, err := checkpoint.Read(filepath.Join(a, f))
		require.NoError(t, err)
		vb, err := checkpoint.Read(filepath.Join(b, f))
		require.NoError(t, err)
		keys := []string{"model_state_dict", "optimizer_state_dict"}
		if f == "metadata.pt" {
			keys = append(keys, "scheduler_state_dict", "epoch", "global_step", "history", "sharded")
		}
		for _, key := range keys {
			x, err := checkpoint.Get(va, key)
			require.NoError(t, err, "%s: %s", f, key)
			y, err := checkpoint.Get(vb, key)
			require.NoError(t, err, "%s: %s", f, key)
			requireSame(t, key, x, y)
		}
	}
}

// hfLoadsPy loads the directory argv[1] with transformers, requiring every weight of the
// model to come from the files and every tensor of the files to be used.
const hfLoadsPy = `
import sys
from transformers import AutoModelForCausalLM
m, info = AutoModelForCausalLM.from_pretrained(sys.argv[1], output_loading_info=True)
bad = {k: v for k, v in info.items() if v}
assert not bad, bad
print("ok", sum(p.numel() for p in m.parameters()))
`

// TestLaunchFSDPReshardStreamed: --fsdp --fsdp-reshard fine-tunes, on two ranks with
// the layers resharded, a Mixtral (with its load-balancing loss) and a LoRA adapter on a
// Llama; the sample, and hf/last's weights files (the Mixtral's streamed a layer at a
// time with the experts cut one by one, the adapter's tensors copied as each layer is
// gathered), are byte for byte those of the same run with whole layers (which saves
// with SavePretrained or the adapter's Save), and transformers loads the Mixtral with no
// weight missing or left over.
func TestLaunchFSDPReshardStreamed(t *testing.T) {
	mixtral := filepath.Join(t.TempDir(), "tiny-mixtral")
	out := testpy.Run(t, tinyMixtralPy, []string{"torch", "transformers"}, mixtral)
	require.Equal(t, "ok", strings.TrimSpace(string(out)))
	addTinyTokenizer(t, mixtral)
	pairs := pairsFile(t)
	for _, c := range []struct {
		name, model, files string
		args               []string
	}{
		{"moe", mixtral, "model.safetensors", nil},
		{"lora", tinyLlamaDir(t), "adapter_", []string{"--lora-r", "4", "--lora-alpha", "8", "--lora-targets", "all-linear"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			runs := t.TempDir()
			run := func(name string, more ...string) (string, map[string][]byte) {
				args := append([]string{"--nproc-per-node", "2", "--fsdp", "--model", c.model, "--data", pairs, "--batch-size", "4",
					"--optimizer", "adamw", "--lr", "1e-2", "--scheduler", "none", "--threads", "1", "--workers", "1", "--epochs", "1",
					"--runs-dir", runs, "--experiment", name}, append(c.args, more...)...)
				out, err := child(args...).CombinedOutput()
				require.NoError(t, err, string(out))
				sample := linesWith(out, "continuation: ")
				require.NotEmpty(t, sample, string(out))
				files := map[string][]byte{}
				for f, b := range testsupport.DirFiles(t, filepath.Join(runs, name, "hf", "last")) {
					if strings.HasPrefix(f, c.files) {
						files[f] = b
					}
				}
				require.NotEmpty(t, files)
				return strings.Join(sample, "\n"), files
			}
			wholeSample, whole := run("whole")
			sample, streamed := run("resharded", "--fsdp-reshard")
			assert.Equal(t, wholeSample, sample)
			require.Equal(t, len(whole), len(streamed))
			for name, b := range whole {
				require.Equal(t, b, streamed[name], name)
			}
			if c.name == "moe" {
				py := testpy.Run(t, hfLoadsPy, []string{"torch", "transformers"}, filepath.Join(runs, "resharded", "hf", "last"))
				assert.Regexp(t, `^ok \d+$`, strings.TrimSpace(string(py)))
			}
		})
	}
}

// TestLaunchFSDPReshardGPT: --model gpt (GPT-2 blocks, now resharded) under --fsdp
// --fsdp-reshard on two ranks, every rank generating the epoch's sample with the blocks
// gathered one at a time, prints the samples of the same run with whole blocks.
func TestLaunchFSDPReshardGPT(t *testing.T) {
	corpus, runs := smallCorpus(t, 20_000), t.TempDir()
	samples := func(name string, more ...string) []string {
		args := append([]string{"--nproc-per-node", "2", "--fsdp", "--model", "gpt", "--data", corpus, "--block-size", "32",
			"--batch-size", "16", "--epochs", "2", "--threads", "1", "--workers", "1", "--seed", "3", "--runs-dir", runs,
			"--experiment", name}, more...)
		out, err := child(args...).CombinedOutput()
		require.NoError(t, err, string(out))
		lines := linesWith(out, "sample: ")
		require.Len(t, lines, 2, string(out))
		return lines
	}
	assert.Equal(t, samples("whole"), samples("resharded", "--fsdp-reshard"))
}

// linesWith returns the lines of out that contain marker, trimmed.
func linesWith(out []byte, marker string) (lines []string) {
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, marker) {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	return lines
}
