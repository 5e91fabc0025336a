package trainer_test

import (
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/amp"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// gated is a user's layer: an MLP whose hidden units are gated by a parameter of its own
// (h * sigmoid(g * h)), written over torch's ops with no help from the library.
type gated struct {
	nn.Base
	in, out *nn.Linear
	g       *torch.Tensor
}

func newGated() *gated {
	m := &gated{}
	m.in = nn.Register(&m.Base, "in", nn.NewLinear(784, 16))
	m.out = nn.Register(&m.Base, "out", nn.NewLinear(16, 10))
	torch.WithScope(func() { m.g = m.RegisterParameter("g", torch.Ones([]int64{16}, torch.Float32, torch.CPU).Escape()) })
	return m
}

func (m *gated) Forward(x *torch.Tensor) *torch.Tensor {
	h := m.in.Forward(x.Flatten(1, -1)).ReLU()
	return m.out.Forward(h.Mul(h.Mul(m.g).Sigmoid()))
}

// TestOneCallStepWhen: the training step is replayed in one call exactly when nothing
// needs the Trainer between its parts, and the run's results do not depend on it.
func TestOneCallStepWhen(t *testing.T) {
	noop := func(trainer.Event, *trainer.Trainer) error { return nil }
	cases := []struct {
		name  string
		opts  []trainer.Option
		fused bool
	}{
		{"default", nil, true},
		{"turned off", []trainer.Option{trainer.WithOneCallStep(false)}, false},
		{"callbacks at BatchEnd and EpochEnd", []trainer.Option{trainer.WithCallbacks(trainer.On(noop, trainer.BatchEnd, trainer.EpochEnd), &trainer.LRMonitor{})}, true},
		{"a callback at every event", []trainer.Option{trainer.WithCallbacks(trainer.CallbackFunc(noop))}, false},
		{"a callback at BeforeBackward", []trainer.Option{trainer.WithCallbacks(trainer.On(noop, trainer.BeforeBackward))}, false},
		{"a callback at BeforeOptimizerStep", []trainer.Option{trainer.WithCallbacks(trainer.On(noop, trainer.BeforeOptimizerStep))}, false},
		{"accumulation", []trainer.Option{trainer.WithAccumulation(2)}, false},
		{"clipping", []trainer.Option{trainer.WithGradClip(1)}, true},
		{"amp", []trainer.Option{trainer.WithAMP(amp.BF16)}, false},
		{"a user's step", []trainer.Option{trainer.WithTrainStep(trainer.ClassificationStep(&nn.CrossEntropyLoss{}))}, true},
		{"a per-step scheduler", []trainer.Option{func(tt *trainer.Trainer) error {
			s, err := optim.NewStepLR(tt.Optimizer, 2, 0.5)
			if err != nil {
				return err
			}
			return trainer.WithScheduler(s, trainer.PerStep)(tt)
		}}, true},
	}
	var ref []float64
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tt := mlpTrainer(t, true, append(c.opts, trainer.WithEpochs(2))...)
			require.NoError(t, tt.Run(context.Background()))
			assert.Equal(t, c.fused, tt.OneCallStep())
			if c.name == "turned off" {
				ref = []float64{tt.History[0].TrainLoss, tt.History[1].TrainLoss, tt.History[1].ValLoss}
			}
		})
	}
	// The same run in one call and not: the same losses, to the bit.
	tt := mlpTrainer(t, true, trainer.WithEpochs(2))
	require.NoError(t, tt.Run(context.Background()))
	require.True(t, tt.OneCallStep())
	require.NotNil(t, ref)
	assert.Equal(t, ref, []float64{tt.History[0].TrainLoss, tt.History[1].TrainLoss, tt.History[1].ValLoss})

	// A user's layer and a user's loss function are replayed too, with the eager run's
	// losses and parameters to the bit.
	tr, va := loaders(t, 256)
	run := func(on bool) *trainer.Trainer {
		torch.ManualSeed(seed)
		m := newGated()
		opt, err := optim.NewAdam(nn.Parameters(m), optim.AdamOptions{LR: 1e-2, Fused: true})
		require.NoError(t, err)
		loss := trainer.LossFunc(func(out, y *torch.Tensor) *torch.Tensor {
			return torch.CrossEntropy(out, y, torch.CrossEntropyOptions{LabelSmoothing: 0.1})
		})
		tt, err := trainer.New(m, tr, va, loss, opt, trainer.WithDevice("cpu"), trainer.WithOutput(io.Discard),
			trainer.WithEpochs(2), trainer.WithSeed(seed), trainer.WithOneCallStep(on))
		require.NoError(t, err)
		require.NoError(t, tt.Run(context.Background()))
		return tt
	}
	eager, replayed := run(false), run(true)
	assert.False(t, eager.OneCallStep())
	assert.True(t, replayed.OneCallStep())
	assert.Empty(t, replayed.OneCallRefused())
	losses := func(tt *trainer.Trainer) (out []float64) {
		for _, r := range tt.History {
			out = append(out, r.TrainLoss, r.ValLoss, r.ValAcc)
		}
		return out
	}
	assert.Equal(t, losses(eager), losses(replayed))
	assert.Equal(t, paramValues(eager.Model), paramValues(replayed.Model))
}

// TestOneCallRefused: a step that reads a value on the host runs eagerly, and the
// Trainer says why.
func TestOneCallRefused(t *testing.T) {
	step := func(m nn.Layer, b data.Batch) (*torch.Tensor, trainer.Metrics) {
		out := m.Forward(b.Get(data.Input))
		if out.Abs().Max().Item() > 1e6 { // a host read: not replayable
			out = out.DivScalar(2)
		}
		return torch.CrossEntropy(out, b.Get(data.Label), torch.CrossEntropyOptions{}), nil
	}
	tt := mlpTrainer(t, true, trainer.WithTrainStep(step))
	require.NoError(t, tt.Run(context.Background()))
	assert.False(t, tt.OneCallStep())
	assert.Contains(t, tt.OneCallRefused(), "item")
}

// TestEventsOfAOneCallStep: a one-call step fires AfterOptimizerStep and then BatchEnd,
// with GlobalStep counting the step just taken at BatchEnd as in a step made call by
// call, and a callback made with On is called at its events alone.
func TestEventsOfAOneCallStep(t *testing.T) {
	var got []trainer.Event
	var steps []int64
	rec := trainer.On(func(e trainer.Event, tt *trainer.Trainer) error {
		got = append(got, e)
		if e == trainer.BatchEnd {
			steps = append(steps, tt.GlobalStep)
			assert.NotNil(t, tt.StepLoss)
		}
		return nil
	}, trainer.BatchEnd, trainer.AfterOptimizerStep, trainer.EpochEnd)
	tt := mlpTrainer(t, true, trainer.WithCallbacks(rec))
	require.NoError(t, tt.Run(context.Background()))
	require.True(t, tt.OneCallStep())
	step := []trainer.Event{trainer.AfterOptimizerStep, trainer.BatchEnd}
	var want []trainer.Event
	for range 4 {
		want = append(want, step...)
	}
	assert.Equal(t, append(want, trainer.EpochEnd), got)
	assert.Equal(t, []int64{1, 2, 3, 4}, steps)
}
