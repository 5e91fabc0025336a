package trainer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/tensorboard"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// residentTrainer trains the CNN (batch norm, dropout) with fused Adam over 200 samples
// held Resident, in batches of 16 (the last one 8), logging every 5 batches.
func residentTrainer(t *testing.T, shuffle bool, opts ...trainer.Option) *trainer.Trainer {
	r := rand.New(rand.NewPCG(1, 2))
	xs := make([]float32, 200*28*28)
	for i := range xs {
		xs[i] = float32(r.NormFloat64())
	}
	ys := make([]int64, 200)
	for i := range ys {
		ys[i] = int64(r.IntN(10))
	}
	ds, err := data.NewTensorDataset(xs, []int64{1, 28, 28}, ys, nil, nil)
	require.NoError(t, err)
	l, err := data.NewLoader(ds, data.LoaderOptions{BatchSize: 16, Resident: true, Shuffle: shuffle, Seed: seed})
	require.NoError(t, err)
	torch.ManualSeed(seed)
	m := models.SmallCNN(10)
	opt, err := optim.NewAdam(nn.Parameters(m), optim.AdamOptions{LR: 1e-3, Fused: true})
	require.NoError(t, err)
	all := append([]trainer.Option{trainer.WithDevice("cpu"), trainer.WithOutput(io.Discard), trainer.WithEpochs(2),
		trainer.WithSeed(seed), trainer.WithLogEvery(5)}, opts...)
	tt, err := trainer.New(m, l, nil, &nn.CrossEntropyLoss{}, opt, all...)
	require.NoError(t, err)
	return tt
}

// paramValues are the model's parameters and buffers, for comparing two runs to the bit.
func paramValues(m nn.Module) [][]float32 {
	var out [][]float32
	torch.WithScope(func() {
		for _, p := range nn.Parameters(m) {
			out = append(out, p.Float32s())
		}
	})
	return out
}

// TestStepsPerCall: runs of steps in one call (WithStepsPerCall) give the epochs' losses,
// the parameters and the step counts of steps run one per call, to the bit, shuffled or
// not, whether a run ends at a logging point, at the epoch's end or at its own length.
func TestStepsPerCall(t *testing.T) {
	for _, shuffle := range []bool{false, true} {
		var refLoss []float64
		var refParams [][]float32
		var refLogged []string
		for _, n := range []int{1, 3, 16} {
			// Logged comes at the same batches with the same readings.
			var logged []string
			rec := trainer.On(func(e trainer.Event, tt *trainer.Trainer) error {
				logged = append(logged, fmt.Sprintf("%d/%d step %d loss %v last %v", tt.Epoch, tt.BatchInEpoch, tt.GlobalStep,
					tt.TrainMetrics["train_loss"], tt.LastLoss))
				return nil
			}, trainer.Logged)
			tt := residentTrainer(t, shuffle, trainer.WithStepsPerCall(n), trainer.WithCallbacks(rec))
			require.NoError(t, tt.Run(context.Background()))
			require.True(t, tt.OneCallStep())
			assert.Equal(t, n, tt.StepsPerCall(), "shuffle=%v", shuffle)
			assert.Equal(t, int64(26), tt.GlobalStep)
			losses := []float64{tt.History[0].TrainLoss, tt.History[1].TrainLoss}
			if n == 1 {
				refLoss, refParams, refLogged = losses, paramValues(tt.Model), logged
				require.Len(t, logged, 6, "logging points at batches 5, 10 and 13 of each epoch")
				continue
			}
			assert.Equal(t, refLogged, logged, "shuffle=%v n=%d: Logged", shuffle, n)
			assert.Equal(t, refLoss, losses, "shuffle=%v n=%d: losses", shuffle, n)
			assert.Equal(t, refParams, paramValues(tt.Model), "shuffle=%v n=%d: parameters", shuffle, n)
		}
	}
}

// TestStepsPerCallWhen: the Trainer runs steps in runs only where nothing between them
// could see the difference.
func TestStepsPerCallWhen(t *testing.T) {
	noop := func(trainer.Event, *trainer.Trainer) error { return nil }
	cases := []struct {
		name string
		opts []trainer.Option
		want int
	}{
		{"default", nil, trainer.DefaultStepsPerCall},
		{"callbacks at epochs", []trainer.Option{trainer.WithCallbacks(trainer.On(noop, trainer.TrainBegin, trainer.EpochBegin, trainer.EpochEnd, trainer.TrainEnd))}, trainer.DefaultStepsPerCall},
		{"a callback at Logged", []trainer.Option{trainer.WithCallbacks(trainer.On(noop, trainer.Logged))}, trainer.DefaultStepsPerCall},
		{"a run directory", []trainer.Option{trainer.WithRunDir(t.TempDir())}, trainer.DefaultStepsPerCall},
		{"a callback at BatchEnd", []trainer.Option{trainer.WithCallbacks(&trainer.LRMonitor{})}, 1},
		{"a callback at AfterOptimizerStep", []trainer.Option{trainer.WithCallbacks(trainer.On(noop, trainer.AfterOptimizerStep))}, 1},
		{"a per-step scheduler", []trainer.Option{func(tt *trainer.Trainer) error {
			s, err := optim.NewStepLR(tt.Optimizer, 2, 0.5)
			if err != nil {
				return err
			}
			return trainer.WithScheduler(s, trainer.PerStep)(tt)
		}}, 1},
		{"steps not in one call", []trainer.Option{trainer.WithOneCallStep(false)}, 1},
		{"one step per call", []trainer.Option{trainer.WithStepsPerCall(1)}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tt := residentTrainer(t, false, append(c.opts, trainer.WithEpochs(1))...)
			require.NoError(t, tt.Run(context.Background()))
			assert.Equal(t, c.want, tt.StepsPerCall())
		})
	}
	// A loader that is not Resident hands out batches one by one.
	tt := mlpTrainer(t, false, trainer.WithStepsPerCall(8))
	require.NoError(t, tt.Run(context.Background()))
	assert.True(t, tt.OneCallStep())
	assert.Equal(t, 1, tt.StepsPerCall())
}

// TestStepsPerCallResume: a run interrupted at a logging point of its second epoch, in
// runs of steps, resumes from its checkpoint to the same parameters and losses as a run
// that was never interrupted: resumes stay exact.
func TestStepsPerCallResume(t *testing.T) {
	ref := residentTrainer(t, true, trainer.WithRunDir(t.TempDir()))
	require.NoError(t, ref.Run(context.Background()))
	require.Equal(t, trainer.DefaultStepsPerCall, ref.StepsPerCall())

	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := trainer.On(func(e trainer.Event, tt *trainer.Trainer) error {
		if tt.Epoch == 1 && tt.BatchInEpoch == 5 {
			cancel()
		}
		return nil
	}, trainer.Logged)
	first := residentTrainer(t, true, trainer.WithRunDir(dir), trainer.WithCallbacks(stop))
	err := first.Run(ctx)
	var ie *trainer.InterruptedError
	require.True(t, errors.As(err, &ie), "got %v", err)
	assert.Equal(t, trainer.DefaultStepsPerCall, first.StepsPerCall())

	resumed := residentTrainer(t, true, trainer.WithRunDir(dir))
	require.NoError(t, resumed.LoadCheckpoint(ie.Checkpoint))
	assert.Equal(t, 1, resumed.Epoch)
	assert.Equal(t, 5, resumed.BatchInEpoch)
	require.NoError(t, resumed.Run(context.Background()))
	assert.Equal(t, paramValues(ref.Model), paramValues(resumed.Model), "parameters")
	assert.Equal(t, ref.GlobalStep, resumed.GlobalStep)
	require.Len(t, resumed.History, 2)
	assert.Equal(t, ref.History[1].TrainLoss, resumed.History[1].TrainLoss, "the resumed epoch reports the same average")
}

// TestStepsPerCallTensorBoard: a run directory's TensorBoard writer logs the step loss at
// each logging point (Logged), so with runs of steps it writes what one step per call
// writes: the same steps and values.
func TestStepsPerCallTensorBoard(t *testing.T) {
	lossSteps := func(n int) []string {
		dir := t.TempDir()
		tt := residentTrainer(t, true, trainer.WithRunDir(dir), trainer.WithStepsPerCall(n))
		require.NoError(t, tt.Run(context.Background()))
		assert.Equal(t, n, tt.StepsPerCall())
		files, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
		require.Len(t, files, 1)
		f, err := os.Open(files[0])
		require.NoError(t, err)
		defer f.Close()
		events, err := tensorboard.ReadEvents(f)
		require.NoError(t, err)
		var out []string
		for _, e := range events {
			for _, v := range e.Values {
				if v.Tag == "train/loss_step" {
					out = append(out, fmt.Sprintf("%d %v", e.Step, v.Scalar))
				}
			}
		}
		return out
	}
	one := lossSteps(1)
	assert.Len(t, one, 6, "3 logging points an epoch")
	assert.Equal(t, one, lossSteps(trainer.DefaultStepsPerCall))
}
