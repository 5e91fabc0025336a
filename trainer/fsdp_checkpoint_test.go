package trainer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/distributed"
	"github.com/gotrain/gotrain/torch/distributed/disttest"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// ckptResult is what a run of the sharded-checkpoint tests reports (rank 0's).
type ckptResult struct {
	TrainLoss, ValLoss []float64
	Weights            []float32
}

// fsdpCkptTrainer builds the sharded checkpoint tests' trainer on the tiny Llama: one
// rank of pg (or one process when pg is nil) of a global batch of 4 (or perRank samples
// per rank), accumulation 2,
// clipping, 2 epochs of 2 steps. stopAt > 0 cancels the run after that optimizer step.
func fsdpCkptTrainer(pg *distributed.ProcessGroup, runDir string, stopAt int64, cancel func(), perRank int) (*trainer.Trainer, nn.Module, error) {
	ds, err := fsdpData()
	if err != nil {
		return nil, nil, err
	}
	lo := data.LoaderOptions{BatchSize: fsdpBatch}
	torch.ManualSeed(seed)
	if pg != nil {
		lo.BatchSize, lo.Rank, lo.WorldSize = fsdpBatch/pg.WorldSize(), pg.Rank(), pg.WorldSize()
	}
	if perRank > 0 {
		lo.BatchSize = perRank
	}
	tr, err := data.NewLoader(ds, lo)
	if err != nil {
		return nil, nil, err
	}
	va, err := data.NewLoader(ds, data.LoaderOptions{BatchSize: 8})
	if err != nil {
		return nil, nil, err
	}
	m, err := fsdpLlama()
	if err != nil {
		return nil, nil, err
	}
	opt, err := optim.NewAdamW(nn.TrainableParameters(m), optim.AdamOptions{LR: 0.01, Betas: [2]float64{0.9, 0.999}, Eps: 1e-8, WeightDecay: 0.1})
	if err != nil {
		return nil, nil, err
	}
	stop := trainer.On(func(_ trainer.Event, t *trainer.Trainer) error {
		if stopAt > 0 && t.GlobalStep == stopAt {
			cancel()
		}
		return nil
	}, trainer.BatchEnd)
	opts := []trainer.Option{trainer.WithDevice("cpu"), trainer.WithOutput(io.Discard), trainer.WithEpochs(2),
		trainer.WithSeed(seed), trainer.WithAccumulation(2), trainer.WithGradClip(0.05), trainer.WithThreads(1),
		trainer.WithTrainStep(llamaLMStep), trainer.WithMonitor("val_loss", trainer.Min), trainer.WithCallbacks(stop)}
	if pg != nil {
		// ReshardAfterForward: the layers' parameters are freed between steps, when the
		// checkpoints are written, and saved from their shards.
		opts = append(opts, trainer.WithStrategy(&trainer.FullyShardedDataParallel{Group: pg, ReshardAfterForward: true}))
	}
	if stopAt > 0 { // save_every: every step's save is a collective too
		opts = append(opts, trainer.WithSaveEvery(1))
	}
	if runDir != "" {
		opts = append(opts, trainer.WithRunDir(runDir))
	}
	tt, err := trainer.New(m, tr, va, nil, opt, opts...)
	if err != nil {
		nn.Free(m)
		return nil, nil, err
	}
	return tt, m, nil
}

// ckptResultOf reads a finished run's losses and the model's weights.
func ckptResultOf(tt *trainer.Trainer, m nn.Module) ckptResult {
	var r ckptResult
	for _, h := range tt.History {
		r.TrainLoss = append(r.TrainLoss, h.TrainLoss)
		r.ValLoss = append(r.ValLoss, h.ValLoss)
	}
	torch.WithScope(func() {
		for _, p := range nn.Parameters(m) {
			r.Weights = append(r.Weights, p.Float32s()...)
		}
	})
	return r
}

// fsdpCkptChild is one rank. GOTRAIN_CKPT_MODE "write": a run without checkpoints to
// the end (the reference), then a run into GOTRAIN_TEST_OUT/run stopped after step 3
// (mid-epoch 2), which saves checkpoints/last.pt on every rank. "resume": a run resumed
// from that checkpoint to the end, and a load with batches of 1 per rank, whose position
// in the epoch must be the same count of samples. Rank 0 writes its results as MODE-W.json.
func fsdpCkptChild() error {
	pg, err := disttest.Join(30 * time.Second)
	if err != nil {
		return err
	}
	defer pg.Close()
	out, mode := os.Getenv("GOTRAIN_TEST_OUT"), os.Getenv("GOTRAIN_CKPT_MODE")
	res := map[string]ckptResult{}
	last := filepath.Join(out, "run", "checkpoints", "last.pt")
	switch mode {
	case "write":
		tt, m, err := fsdpCkptTrainer(pg, "", 0, nil, 0)
		if err != nil {
			return err
		}
		if err := tt.Run(context.Background()); err != nil {
			return err
		}
		res["ref"] = ckptResultOf(tt, m)
		nn.Free(m)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// Only rank 0 is given the run directory: every rank writes its shards there.
		runDir := ""
		if pg.Rank() == 0 {
			runDir = filepath.Join(out, "run")
		}
		tt, m, err = fsdpCkptTrainer(pg, runDir, 3, cancel, 0)
		if err != nil {
			return err
		}
		defer nn.Free(m)
		var ie *trainer.InterruptedError
		if err := tt.Run(ctx); !errors.As(err, &ie) {
			return fmt.Errorf("the stopped run ended with %v, want an InterruptedError", err)
		}
		if ie.Checkpoint != last {
			return fmt.Errorf("rank %d: the interruption saved %q, want %q", pg.Rank(), ie.Checkpoint, last)
		}
	case "resume":
		tt, m, err := fsdpCkptTrainer(pg, "", 0, nil, 0)
		if err != nil {
			return err
		}
		defer nn.Free(m)
		if err := tt.LoadCheckpoint(last); err != nil {
			return err
		}
		if tt.GlobalStep != 3 || tt.Epoch != 1 || tt.BatchInEpoch != 2 {
			return fmt.Errorf("resumed at epoch %d batch %d step %d, want 1, 2, 3", tt.Epoch, tt.BatchInEpoch, tt.GlobalStep)
		}
		if err := tt.Run(context.Background()); err != nil {
			return err
		}
		res["resumed"] = ckptResultOf(tt, m)
		// With 1 sample per rank instead of 2, the epoch's 8 samples seen are 4 batches.
		tt, m1, err := fsdpCkptTrainer(pg, "", 0, nil, 1)
		if err != nil {
			return err
		}
		defer nn.Free(m1)
		if err := tt.LoadCheckpoint(last); err != nil {
			return err
		}
		if tt.GlobalStep != 3 || tt.Epoch != 1 || tt.BatchInEpoch != 4 {
			return fmt.Errorf("resumed with batches of 1 at epoch %d batch %d step %d, want 1, 4, 3", tt.Epoch, tt.BatchInEpoch, tt.GlobalStep)
		}
	default:
		return fmt.Errorf("GOTRAIN_CKPT_MODE %q", mode)
	}
	if pg.Rank() != 0 {
		return nil
	}
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, fmt.Sprintf("%s-%d.json", mode, pg.WorldSize())), b, 0o644)
}

func readCkptResults(t *testing.T, path string) map[string]ckptResult {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var r map[string]ckptResult
	require.NoError(t, json.Unmarshal(b, &r))
	return r
}

// sameCurve asserts that a resumed run's losses and final weights are those of the
// uninterrupted reference, within float tolerance: the global batch (4 samples) is the
// same on every world size, so only the order of the reductions differs.
func sameCurve(t *testing.T, ref, got ckptResult, who string) {
	t.Helper()
	require.Len(t, got.TrainLoss, len(ref.TrainLoss), who)
	for e := range ref.TrainLoss {
		assert.InDelta(t, ref.TrainLoss[e], got.TrainLoss[e], 1e-4, "%s: train loss of epoch %d", who, e+1)
		assert.InDelta(t, ref.ValLoss[e], got.ValLoss[e], 1e-4, "%s: val loss of epoch %d", who, e+1)
	}
	require.Len(t, got.Weights, len(ref.Weights), who)
	for i := range ref.Weights {
		require.InDelta(t, ref.Weights[i], got.Weights[i], 1e-4, "%s: weight %d", who, i)
	}
}

// TestFSDPShardedCheckpointReshards: 4 Gloo ranks of sharded training (resharded after
// forward), stopped in the
// middle of epoch 2, write a sharded checkpoint (every rank its shards); it resumes on 2
// ranks (each reading the rows of its new shards from the 4 files) and in one process
// without sharding (full tensors put together), and both finish with the losses of both
// epochs and the final weights of an uninterrupted 4-rank run, within float tolerance:
// the epoch goes on from the same count of samples (8 of 16), and the global batch is the
// same, so only the reductions' order differs. The Python loader (scripts/load_sharded.py,
// with the real torch) puts the same full model and optimizer state together as Go.
func TestFSDPShardedCheckpointReshards(t *testing.T) {
	out := t.TempDir()
	for _, c := range []struct {
		mode  string
		world int
	}{{"write", 4}, {"resume", 2}} {
		res := disttest.Spawn(t, "fsdp-ckpt", c.world, []string{"GOTRAIN_TEST_OUT=" + out, "GOTRAIN_CKPT_MODE=" + c.mode})
		for r, x := range res {
			require.NoErrorf(t, x.Err, "%s on %d ranks: rank %d:\n%s", c.mode, c.world, r, x.Output)
		}
	}
	last := filepath.Join(out, "run", "checkpoints", "last.pt")
	entries, err := os.ReadDir(last)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{"metadata.pt", "rank-0-of-4.pt", "rank-1-of-4.pt", "rank-2-of-4.pt", "rank-3-of-4.pt"}, names)
	left, err := filepath.Glob(filepath.Join(out, "run", "checkpoints", ".*"))
	require.NoError(t, err)
	assert.Empty(t, left, "no staging or previous directory is left")
	// best_model.pth (epoch 1's) is a sharded directory too.
	assert.FileExists(t, filepath.Join(out, "run", "checkpoints", "best_model.pth", "rank-3-of-4.pt"))

	ref := readCkptResults(t, filepath.Join(out, "write-4.json"))["ref"]
	sameCurve(t, ref, readCkptResults(t, filepath.Join(out, "resume-2.json"))["resumed"], "resumed on 2 ranks")

	tt, m, err := fsdpCkptTrainer(nil, "", 0, nil, 0)
	require.NoError(t, err)
	defer nn.Free(m)
	require.NoError(t, tt.LoadCheckpoint(last))
	full := filepath.Join(out, "full.pt")
	require.NoError(t, tt.SaveCheckpoint(full))
	require.NoError(t, tt.Run(context.Background()))
	sameCurve(t, ref, ckptResultOf(tt, m), "resumed in one process")

	scripts, err := filepath.Abs(filepath.Join("..", "scripts"))
	require.NoError(t, err)
	py := testpy.Run(t, loadShardedPy, []string{"torch"}, scripts, last, full)
	assert.Regexp(t, `^ok \d+ \d+$`, strings.TrimSpace(string(py)))
}

// loadShardedPy reassembles the sharded checkpoint with scripts/load_sharded.py and
// compares it with the single-file checkpoint Go wrote from the same state.
const loadShardedPy = `
import sys
sys.path.insert(0, sys.argv[1])
import torch
from load_sharded import load_sharded
model, optim, meta = load_sharded(sys.argv[2])
want = torch.load(sys.argv[3], map_location="cpu", weights_only=True)
wm, wo = want["model_state_dict"], want["optimizer_state_dict"]
assert set(model) == set(wm), (sorted(model), sorted(wm))
for k, v in wm.items():
    assert model[k].shape == v.shape and torch.equal(model[k], v), k
assert set(optim["state"]) == set(wo["state"])
n = 0
for i, st in wo["state"].items():
    assert set(optim["state"][i]) == set(st), i
    for k, v in st.items():
        got = optim["state"][i][k]
        assert (torch.equal(got, v) if torch.is_tensor(v) else got == v), (i, k)
        n += 1
assert optim["param_groups"] == wo["param_groups"]
assert meta["world_size"] == 4 and want["global_step"] == meta["global_step"] == 3
print("ok", len(model), n)
`
