package trainer_test

import (
	"context"
	"io"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// mlpTrainer is a small MLP on 256 synthetic samples (4 batches of 64) with SGD.
func mlpTrainer(t *testing.T, val bool, opts ...trainer.Option) *trainer.Trainer {
	tr, va := loaders(t, 256)
	if !val {
		va = nil
	}
	torch.ManualSeed(seed)
	m := models.MLP(784, 16, 10)
	opt, err := optim.NewSGD(nn.Parameters(m), optim.SGDOptions{LR: 0.05})
	require.NoError(t, err)
	all := append([]trainer.Option{trainer.WithDevice("cpu"), trainer.WithOutput(io.Discard), trainer.WithEpochs(1), trainer.WithSeed(seed)}, opts...)
	tt, err := trainer.New(m, tr, va, &nn.CrossEntropyLoss{}, opt, all...)
	require.NoError(t, err)
	return tt
}

// TestNoHostReadsBetweenLogPoints counts the Trainer's device-to-host reads: the default
// step reads nothing back per step, and a logging point reads its metrics in one go.
func TestNoHostReadsBetweenLogPoints(t *testing.T) {
	for _, c := range []struct {
		k    int
		clip float64
	}{{1, 0}, {2, 0}, {1, 0.5}} {
		k := c.k
		// A logging point reads the sums, and with clipping the gradient norms too.
		perLog := int64(1)
		if c.clip > 0 {
			perLog = 2
		}
		type mark struct {
			reads int64
			log   bool
		}
		var marks []mark
		count := trainer.CallbackFunc(func(e trainer.Event, tt *trainer.Trainer) error {
			if e == trainer.BatchEnd {
				marks = append(marks, mark{torch.HostReads(), tt.LogPoint})
			}
			return nil
		})
		tt := mlpTrainer(t, false, trainer.WithLogEvery(3), trainer.WithAccumulation(k), trainer.WithGradClip(c.clip), trainer.WithCallbacks(count))
		require.NoError(t, tt.Run(context.Background()))
		require.Len(t, marks, 4)
		logs := 0
		for i := 1; i < len(marks); i++ {
			d := marks[i].reads - marks[i-1].reads
			if marks[i].log {
				logs++
				assert.Equal(t, perLog, d, "accumulation %d clip %v: reads at a logging point (batch %d)", k, c.clip, i+1)
			} else {
				assert.Zero(t, d, "accumulation %d clip %v: batch %d read tensor values back to Go", k, c.clip, i+1)
			}
		}
		assert.Equal(t, 2, logs, "batches 3 and 4 (the last) are logging points")
		assert.False(t, marks[0].log)
	}
}

// nilForward is a model whose Forward has a bug.
type nilForward struct {
	nn.Base
	inner *nn.Linear
}

func (m *nilForward) Forward(x *torch.Tensor) *torch.Tensor { return m.inner.Forward(x.Flatten(1, -1)) }

// TestUserPanicKeepsItsStack: a nil dereference in the user's Forward reaches the caller
// of Run as a panic whose stack shows where it happened; it is not turned into an error.
func TestUserPanicKeepsItsStack(t *testing.T) {
	tr, _ := loaders(t, 64)
	m := &nilForward{}
	p := torch.Zeros([]int64{1}, torch.Float32, torch.CPU).SetRequiresGrad(true).Escape()
	defer p.Free()
	opt, err := optim.NewSGD([]*torch.Tensor{p}, optim.SGDOptions{LR: 0.1})
	require.NoError(t, err)
	tt, err := trainer.New(m, tr, nil, &nn.CrossEntropyLoss{}, opt, trainer.WithDevice("cpu"), trainer.WithOutput(io.Discard))
	require.NoError(t, err)
	var got any
	var stack string
	var runErr error
	func() {
		defer func() {
			got = recover()
			stack = string(debug.Stack())
		}()
		runErr = tt.Run(context.Background())
	}()
	require.NoError(t, runErr)
	require.NotNil(t, got, "the nil dereference must panic through Run, not come back as an error")
	_, ok := got.(runtime.Error)
	require.True(t, ok, "a runtime error, got %T %v", got, got)
	assert.Contains(t, stack, "nilForward).Forward", "the stack shows the user's Forward")
}

// TestShapeMismatchIsAnError: misuse inside a step (a *torch.Error) comes back from Run
// as an error naming the op and the batch.
func TestShapeMismatchIsAnError(t *testing.T) {
	tr, _ := loaders(t, 64)
	m := models.MLP(100, 8, 10) // the data has 784 features
	opt, err := optim.NewSGD(nn.Parameters(m), optim.SGDOptions{LR: 0.1})
	require.NoError(t, err)
	tt, err := trainer.New(m, tr, nil, &nn.CrossEntropyLoss{}, opt, trainer.WithDevice("cpu"), trainer.WithOutput(io.Discard))
	require.NoError(t, err)
	err = tt.Run(context.Background())
	require.Error(t, err)
	var te *torch.Error
	require.ErrorAs(t, err, &te)
	assert.Contains(t, err.Error(), "epoch 1 batch 1")
	assert.Contains(t, err.Error(), te.Op)
	assert.NotEmpty(t, te.Op)
	t.Log(err)
}

// TestCustomStep: a user's step sees the batch's fields and its metrics are recorded;
// an accuracy computed by the user equals the default step's val_acc.
func TestCustomStep(t *testing.T) {
	ce := &nn.CrossEntropyLoss{}
	step := func(model nn.Layer, b data.Batch) (*torch.Tensor, trainer.Metrics) {
		out := model.Forward(b.Get(data.Input))
		y := b.Get(data.Label)
		top1 := out.Argmax(1, false).Eq(y).ToDType(torch.Float32).Mean()
		return ce.Forward(out, y), trainer.Metrics{"top1": top1, "logit_mean": out.Mean()}
	}
	custom := mlpTrainer(t, true, trainer.WithTrainStep(step), trainer.WithMonitor("val_top1", trainer.Max))
	require.NoError(t, custom.Run(context.Background()))
	plain := mlpTrainer(t, true)
	require.NoError(t, plain.Run(context.Background()))

	r := custom.History[0]
	require.Contains(t, r.Metrics, "val_top1")
	require.Contains(t, r.Metrics, "train_top1")
	require.Contains(t, r.Metrics, "val_logit_mean")
	assert.Equal(t, plain.History[0].ValAcc, r.Metrics["val_top1"])
	assert.Equal(t, plain.History[0].TrainLoss, r.TrainLoss, "the same loss, the same training")
	assert.Equal(t, r.Metrics["val_top1"], custom.BestMetric)
	assert.True(t, isNaN(r.ValAcc), "a step without \"acc\" records no val_acc")
}

func isNaN(f float64) bool { return f != f }

// TestEventsOfAStep: the events a window of two micro-batches and a validation pass
// fire, in order.
func TestEventsOfAStep(t *testing.T) {
	var got []trainer.Event
	rec := trainer.CallbackFunc(func(e trainer.Event, tt *trainer.Trainer) error {
		if len(got) < 19 {
			got = append(got, e)
		}
		return nil
	})
	tt := mlpTrainer(t, true, trainer.WithAccumulation(2), trainer.WithCallbacks(rec))
	require.NoError(t, tt.Run(context.Background()))
	// Every batch of these 4 is a logging point (Config.LogEvery 0: a tenth of the epoch).
	// The batch that completes a window ends after its optimizer step.
	window := []trainer.Event{trainer.BeforeBackward, trainer.BatchEnd, trainer.Logged, trainer.BeforeBackward,
		trainer.BeforeOptimizerStep, trainer.AfterOptimizerStep, trainer.BatchEnd, trainer.Logged}
	want := append(append([]trainer.Event{trainer.TrainBegin, trainer.EpochBegin}, window...), window...)
	want = append(want, trainer.ValidationBatchEnd)
	assert.Equal(t, want, got)
}

// TestEventOrderInEveryStepPath: one recorder, listening to the events a path can serve,
// sees the same events at the same steps, with the same state, whether each step runs
// op by op, in one call into libtorch, or in runs of steps in one call.
func TestEventOrderInEveryStepPath(t *testing.T) {
	type seen struct {
		Event      trainer.Event
		Step       int64
		Batch      int
		LogPoint   bool
		LastLoss   float64
		TrainCount int
	}
	record := func(events ...trainer.Event) (*[]seen, trainer.Callback) {
		var got []seen
		return &got, trainer.On(func(e trainer.Event, tt *trainer.Trainer) error {
			got = append(got, seen{e, tt.GlobalStep, tt.BatchInEpoch, tt.LogPoint, tt.LastLoss, len(tt.TrainMetrics)})
			return nil
		}, events...)
	}
	run := func(events []trainer.Event, opts ...trainer.Option) ([]seen, *trainer.Trainer) {
		got, cb := record(events...)
		tt := residentTrainer(t, true, append(opts, trainer.WithCallbacks(cb))...)
		require.NoError(t, tt.Run(context.Background()))
		return *got, tt
	}
	// Everything but the two events only op-by-op steps serve.
	stepEvents := []trainer.Event{trainer.TrainBegin, trainer.EpochBegin, trainer.BatchEnd, trainer.Logged,
		trainer.AfterOptimizerStep, trainer.EpochEnd, trainer.TrainEnd}
	perOp, tt := run(stepEvents, trainer.WithOneCallStep(false))
	require.False(t, tt.OneCallStep())
	oneCall, tt := run(stepEvents, trainer.WithStepsPerCall(1))
	require.True(t, tt.OneCallStep())
	assert.Equal(t, perOp, oneCall, "op by op and in one call")
	require.NotEmpty(t, perOp)

	// Runs of steps serve everyone who does not listen to each step.
	runEvents := []trainer.Event{trainer.TrainBegin, trainer.EpochBegin, trainer.Logged, trainer.EpochEnd, trainer.TrainEnd}
	perOp, _ = run(runEvents, trainer.WithOneCallStep(false))
	runs, tt := run(runEvents, trainer.WithStepsPerCall(16))
	require.Equal(t, 16, tt.StepsPerCall())
	assert.Equal(t, perOp, runs, "op by op and in runs of steps")
}

// TestEarlyStoppingWithoutRunDir: early stopping is a policy, not a file writer.
func TestEarlyStoppingWithoutRunDir(t *testing.T) {
	tr, va := loaders(t, 256)
	m := models.MLP(784, 8, 10)
	opt, err := optim.NewSGD(nn.Parameters(m), optim.SGDOptions{LR: 0.05})
	require.NoError(t, err)
	// The loss falls, so watched as a maximised metric it never improves on epoch 1.
	tt, err := trainer.New(m, tr, va, &nn.CrossEntropyLoss{}, opt, trainer.WithDevice("cpu"), trainer.WithOutput(io.Discard),
		trainer.WithEpochs(5), trainer.WithEarlyStopping(1), trainer.WithMonitor("train_loss", trainer.Max))
	require.NoError(t, err)
	require.NoError(t, tt.Run(context.Background()))
	assert.Equal(t, 2, tt.Epoch, "epoch 2 did not improve on epoch 1")
	assert.Contains(t, tt.StopReason(), "early stopping")
}

// TestLoadRejectsUnclaimedKeys: state that no part of the trainer restores is an error
// naming it, not silently dropped.
func TestLoadRejectsUnclaimedKeys(t *testing.T) {
	dir := t.TempDir()
	tt := mlpTrainer(t, false, trainer.WithRunDir(dir))
	require.NoError(t, tt.Run(context.Background()))
	last := filepath.Join(dir, "checkpoints", "last.pt")
	v, err := checkpoint.Read(last)
	require.NoError(t, err)
	d := v.(*checkpoint.Dict)
	d.Set("ema_state_dict", checkpoint.NewDict())
	bad := filepath.Join(dir, "extra.pt")
	require.NoError(t, checkpoint.Write(bad, d))

	fresh := mlpTrainer(t, false)
	require.NoError(t, fresh.LoadCheckpoint(last))
	assert.Equal(t, 1, fresh.Epoch)
	err = mlpTrainer(t, false).LoadCheckpoint(bad)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ema_state_dict")
}

// TestNewStartsFromDefaultConfig: New and DefaultConfig are one source of defaults.
func TestNewStartsFromDefaultConfig(t *testing.T) {
	tr, va := loaders(t, 64)
	m := models.MLP(784, 8, 10)
	opt, err := optim.NewSGD(nn.Parameters(m), optim.SGDOptions{LR: 0.1})
	require.NoError(t, err)
	tt, err := trainer.New(m, tr, va, &nn.CrossEntropyLoss{}, opt, trainer.WithOutput(io.Discard))
	require.NoError(t, err)
	assert.Equal(t, trainer.DefaultConfig(), tt.Config())
	assert.Equal(t, trainer.SingleProcess{}, tt.Strategy())
}
