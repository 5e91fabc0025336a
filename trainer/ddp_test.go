package trainer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/distributed"
	"github.com/gotrain/gotrain/torch/distributed/disttest"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

func TestMain(m *testing.M) {
	disttest.Main(m, map[string]func() error{"ddp": ddpChild, "items": itemsChild, "fsdp": fsdpChild, "fsdp-ckpt": fsdpCkptChild,
		"fsdp-export": fsdpExportChild, "fsdp-families": fsdpFamiliesChild})
}

// ddpResult is what a DDP child reports: its final weights, a checksum of the weights
// at every batch and the epochs' losses.
type ddpResult struct {
	Weights   []float32
	Checksums []float64
	TrainLoss []float64
	ValLoss   []float64
}

const ddpBatch = 32

// ddpRun trains the test MLP with SGD on 256 synthetic samples: one process with batch
// 2*ddpBatch when pg is nil, else one rank of two with batch ddpBatch. The environment
// may add a run directory (GOTRAIN_TEST_RUNDIR), a resume checkpoint
// (GOTRAIN_TEST_RESUME) and a rank that dies mid-epoch 2 (GOTRAIN_TEST_DIE).
func ddpRun(pg *distributed.ProcessGroup, runDir, resume string) (*trainer.Trainer, ddpResult, error) {
	var res ddpResult
	all, err := data.Synthetic(320, 10, []int64{1, 28, 28}, seed)
	if err != nil {
		return nil, res, err
	}
	parts, err := data.RandomSplit(all, []int{256, 64}, seed)
	if err != nil {
		return nil, res, err
	}
	lo := data.LoaderOptions{BatchSize: 2 * ddpBatch, Shuffle: true, Seed: seed}
	opts := []trainer.Option{trainer.WithDevice("cpu"), trainer.WithOutput(io.Discard), trainer.WithEpochs(3),
		trainer.WithSeed(seed), trainer.WithRunDir(runDir)}
	if pg != nil {
		lo.BatchSize, lo.Rank, lo.WorldSize = ddpBatch, pg.Rank(), pg.WorldSize()
		opts = append(opts, trainer.WithDistributed(pg))
		// Rank 1 starts from different weights: the broadcast in New must fix that.
		torch.ManualSeed(int64(seed + pg.Rank()))
	} else {
		torch.ManualSeed(seed)
	}
	tr, err := data.NewLoader(parts[0], lo)
	if err != nil {
		return nil, res, err
	}
	va, err := data.NewLoader(parts[1], data.LoaderOptions{BatchSize: 16})
	if err != nil {
		return nil, res, err
	}
	m := models.MLP(784, 16, 10)
	opt, err := optim.NewSGD(nn.Parameters(m), optim.SGDOptions{LR: 0.1, Momentum: 0.9})
	if err != nil {
		return nil, res, err
	}
	die := -1
	if s := os.Getenv("GOTRAIN_TEST_DIE"); s != "" {
		die, _ = strconv.Atoi(s)
	}
	record := trainer.CallbackFunc(func(e trainer.Event, t *trainer.Trainer) error {
		if e != trainer.BatchEnd {
			return nil
		}
		if pg != nil && pg.Rank() == die && t.Epoch == 1 && t.BatchInEpoch == 2 {
			os.Exit(3)
		}
		sum := 0.0
		torch.WithScope(func() {
			for _, p := range nn.Parameters(t.Model) {
				sum += p.ToDType(torch.Float64).Sum().Item()
			}
		})
		res.Checksums = append(res.Checksums, sum)
		return nil
	})
	opts = append(opts, trainer.WithCallbacks(record))
	tt, err := trainer.New(m, tr, va, &nn.CrossEntropyLoss{}, opt, opts...)
	if err != nil {
		return nil, res, err
	}
	if resume != "" {
		if err := tt.LoadCheckpoint(resume); err != nil {
			return nil, res, err
		}
	}
	if err := tt.Run(context.Background()); err != nil {
		return tt, res, err
	}
	res.Weights, res.TrainLoss, res.ValLoss = outcome(m, tt)
	return tt, res, nil
}

// outcome is what a test run compares: m's weights, flattened in parameter order, and
// tt's losses by epoch.
func outcome(m nn.Module, tt *trainer.Trainer) (weights []float32, train, val []float64) {
	torch.WithScope(func() {
		for _, p := range nn.Parameters(m) {
			weights = append(weights, p.Float32s()...)
		}
	})
	for _, r := range tt.History {
		train, val = append(train, r.TrainLoss), append(val, r.ValLoss)
	}
	return weights, train, val
}

func ddpChild() error {
	pg, err := disttest.Join(10 * time.Second)
	if err != nil {
		return err
	}
	defer pg.Close()
	runDir := os.Getenv("GOTRAIN_TEST_RUNDIR")
	_, res, err := ddpRun(pg, runDir, os.Getenv("GOTRAIN_TEST_RESUME"))
	if err != nil {
		return err
	}
	return writeRankResult(pg, "rank", res)
}

// writeRankResult writes v, a child's result, as JSON for spawnRanks: <name><rank>.json
// in GOTRAIN_TEST_OUT.
func writeRankResult(pg *distributed.ProcessGroup, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(os.Getenv("GOTRAIN_TEST_OUT"), fmt.Sprintf("%s%d.json", name, pg.Rank())), b, 0o644)
}

// spawnRanks runs child on world ranks (disttest.Spawn) with GOTRAIN_TEST_OUT a new
// directory and env, requires every rank to succeed, and returns the directory and the
// ranks' results (writeRankResult's, under name).
func spawnRanks[T any](t *testing.T, child, name string, world int, env ...string) (string, []T) {
	t.Helper()
	out := t.TempDir()
	res := disttest.Spawn(t, child, world, append([]string{"GOTRAIN_TEST_OUT=" + out}, env...))
	for r, c := range res {
		require.NoErrorf(t, c.Err, "rank %d:\n%s", r, c.Output)
	}
	ranks := make([]T, world)
	for r := range ranks {
		b, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("%s%d.json", name, r)))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &ranks[r]))
	}
	return out, ranks
}

// TestDDPEqualsLargerBatch: two ranks with batch B end with the weights of one process
// with batch 2B over the same data order (DistributedSampler gives rank r the indices
// r::2 of the epoch's permutation, so the ranks' i-th batches together are the big
// loader's i-th batch), and the ranks agree on the weights after every step.
func TestDDPEqualsLargerBatch(t *testing.T) {
	_, single, err := ddpRun(nil, "", "")
	require.NoError(t, err)

	_, ranks := spawnRanks[ddpResult](t, "ddp", "rank", 2)
	require.Equal(t, ranks[0].Checksums, ranks[1].Checksums, "the ranks' weights differ at some step")
	require.Len(t, ranks[0].Checksums, 3*256/(2*ddpBatch))
	require.Len(t, ranks[0].Weights, len(single.Weights))
	for i := range single.Weights {
		require.InDelta(t, single.Weights[i], ranks[0].Weights[i], 1e-5, "weight %d", i)
	}
	assert.Equal(t, ranks[0].Weights, ranks[1].Weights)
	for e := range single.TrainLoss {
		assert.InDelta(t, single.TrainLoss[e], ranks[0].TrainLoss[e], 1e-5, "train loss of epoch %d", e+1)
		assert.InDelta(t, single.ValLoss[e], ranks[0].ValLoss[e], 1e-5, "val loss of epoch %d", e+1)
		assert.Equal(t, ranks[0].TrainLoss[e], ranks[1].TrainLoss[e])
	}
}

// TestDDPLostRank: rank 1 dies in epoch 2; rank 0 fails with an error naming it within
// the timeout, its last checkpoint (epoch 1) is intact, and two ranks resume from it.
func TestDDPLostRank(t *testing.T) {
	runDir := filepath.Join(t.TempDir(), "run")
	out := t.TempDir()
	began := time.Now()
	res := disttest.Spawn(t, "ddp", 2, []string{"GOTRAIN_TEST_OUT=" + out, "GOTRAIN_TEST_RUNDIR=" + runDir, "GOTRAIN_TEST_DIE=1"})
	assert.Less(t, time.Since(began), time.Minute)
	var exit *exec.ExitError
	require.ErrorAs(t, res[1].Err, &exit)
	assert.Equal(t, 3, exit.ExitCode(), res[1].Output)
	require.Error(t, res[0].Err, res[0].Output)
	assert.Contains(t, res[0].Output, "lost rank 1")
	t.Log(res[0].Output)

	last := filepath.Join(runDir, "checkpoints", "last.pt")
	_, ranks := spawnRanks[ddpResult](t, "ddp", "rank", 2, "GOTRAIN_TEST_RESUME="+last)
	assert.Equal(t, ranks[0].Weights, ranks[1].Weights)
	require.Len(t, ranks[0].TrainLoss, 3)
	assert.False(t, math.IsNaN(ranks[0].TrainLoss[2]))
	// The resumed run ends where an uninterrupted one does.
	_, single, err := ddpRun(nil, "", "")
	require.NoError(t, err)
	for i := range single.Weights {
		require.InDelta(t, single.Weights[i], ranks[0].Weights[i], 1e-5, "weight %d", i)
	}
}
