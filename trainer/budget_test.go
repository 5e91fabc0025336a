package trainer_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// weightsOf returns the model's parameters, flattened, for bitwise comparisons.
func weightsOf(tt *trainer.Trainer) []float32 {
	var w []float32
	torch.WithScope(func() {
		for _, p := range nn.Parameters(tt.Model) {
			w = append(w, p.Float32s()...)
		}
	})
	return w
}

// TestStepBudget: 256 samples in batches of 64 are 4 steps an epoch. A budget of 10
// steps with an evaluation every 4 ends mid-epoch 3 at step 10, with records at steps
// 4, 8 and 10; epochs still end (twice), and a second Run has nothing to train.
func TestStepBudget(t *testing.T) {
	var events []trainer.Event
	log := trainer.On(func(e trainer.Event, tt *trainer.Trainer) error {
		events = append(events, e)
		return nil
	}, trainer.Evaluated, trainer.EpochEnd)
	var out bytes.Buffer
	tt := mlpTrainer(t, true, trainer.WithMaxSteps(10), trainer.WithEvalEvery(4), trainer.WithCallbacks(log), trainer.WithOutput(&out))
	require.NoError(t, tt.Run(context.Background()))
	assert.EqualValues(t, 10, tt.GlobalStep)
	assert.Equal(t, 2, tt.Epoch, "two whole epochs")
	assert.Equal(t, 2, tt.BatchInEpoch, "and two batches of the third")
	var steps []int64
	var epochs []int
	for _, r := range tt.History {
		steps, epochs = append(steps, r.Step), append(epochs, r.Epoch)
		assert.False(t, math.IsNaN(r.ValLoss), "validation ran at step %d", r.Step)
	}
	assert.Equal(t, []int64{4, 8, 10}, steps)
	assert.Equal(t, []int{1, 2, 3}, epochs, "the epoch in progress at each evaluation")
	assert.Equal(t, []trainer.Event{trainer.Evaluated, trainer.EpochEnd, trainer.Evaluated, trainer.EpochEnd, trainer.Evaluated}, events)
	assert.Contains(t, out.String(), "Epoch 3 step 10 | train_loss: ")

	out.Reset()
	require.NoError(t, tt.Run(context.Background()))
	assert.EqualValues(t, 10, tt.GlobalStep)
	assert.Contains(t, out.String(), "nothing to train")
}

// TestStepBudgetWithoutEvalEvery: a budget alone evaluates at each epoch's end and where
// it ends, mid-epoch.
func TestStepBudgetWithoutEvalEvery(t *testing.T) {
	tt := mlpTrainer(t, true, trainer.WithMaxSteps(6))
	require.NoError(t, tt.Run(context.Background()))
	require.Len(t, tt.History, 2)
	assert.Equal(t, []int64{4, 6}, []int64{tt.History[0].Step, tt.History[1].Step})
	assert.Equal(t, 1, tt.Epoch)

	// At an epoch's end the budget's evaluation is the epoch's own.
	tt = mlpTrainer(t, true, trainer.WithMaxSteps(8))
	require.NoError(t, tt.Run(context.Background()))
	require.Len(t, tt.History, 2)
	assert.Equal(t, 2, tt.Epoch)
	assert.Equal(t, 0, tt.BatchInEpoch)
}

// TestStepBudgetResumes: a step-budgeted run interrupted mid-epoch, or stopped by a
// smaller budget at a step checkpoint (WithSaveEvery), resumes to the same weights, to
// the bit, as the run that was never stopped.
func TestStepBudgetResumes(t *testing.T) {
	budget := func(dir string, steps int, extra ...trainer.Option) *trainer.Trainer {
		return mlpTrainer(t, true, append([]trainer.Option{trainer.WithMaxSteps(steps), trainer.WithEvalEvery(4),
			trainer.WithSaveEvery(3), trainer.WithRunDir(dir), trainer.WithOutput(io.Discard)}, extra...)...)
	}
	whole := budget(t.TempDir(), 10)
	require.NoError(t, whole.Run(context.Background()))
	want := weightsOf(whole)

	// SIGINT-like: cancelled after step 7, mid-epoch 2 (no evaluation or save there).
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := trainer.On(func(_ trainer.Event, tt *trainer.Trainer) error {
		if tt.GlobalStep == 7 {
			cancel()
		}
		return nil
	}, trainer.AfterOptimizerStep)
	err := budget(dir, 10, trainer.WithCallbacks(stop)).Run(ctx)
	var ie *trainer.InterruptedError
	require.True(t, errors.As(err, &ie), "got %v", err)
	resumed := budget(dir, 10)
	require.NoError(t, resumed.LoadCheckpoint(filepath.Join(dir, "checkpoints", "last.pt")))
	assert.EqualValues(t, 7, resumed.GlobalStep)
	require.NoError(t, resumed.Run(context.Background()))
	assert.Equal(t, want, weightsOf(resumed), "resumed from an interruption at step 7")
	assert.Equal(t, len(whole.History), len(resumed.History))

	// A budget of 6 ends at step 6 with a checkpoint (its evaluation); a budget of 10
	// goes on from it.
	dir = t.TempDir()
	require.NoError(t, budget(dir, 6).Run(context.Background()))
	more := budget(dir, 10)
	require.NoError(t, more.LoadCheckpoint(filepath.Join(dir, "checkpoints", "last.pt")))
	assert.EqualValues(t, 6, more.GlobalStep)
	require.NoError(t, more.Run(context.Background()))
	assert.Equal(t, want, weightsOf(more), "resumed from the step-6 checkpoint")

	// history.jsonl has one line per evaluation, each with its step.
	b, err := os.ReadFile(filepath.Join(dir, "history.jsonl"))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Len(t, lines, 4, "steps 4, 6 (the first budget's end), 8, 10")
	assert.Contains(t, lines[1], `"step":6`)
	assert.Contains(t, lines[3], `"step":10`)
}

func TestStepBudgetRejectsNegatives(t *testing.T) {
	for _, o := range []trainer.Option{trainer.WithMaxSteps(-1), trainer.WithEvalEvery(-2), trainer.WithSaveEvery(-3)} {
		tr, va := loaders(t, 64)
		m := nn.NewLinear(784, 10)
		opt, err := optim.NewSGD(nn.Parameters(m), optim.SGDOptions{LR: 0.1})
		require.NoError(t, err)
		_, err = trainer.New(m, tr, va, &nn.CrossEntropyLoss{}, opt, trainer.WithDevice("cpu"), trainer.WithOutput(io.Discard), o)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "must be >= 0")
	}
}
