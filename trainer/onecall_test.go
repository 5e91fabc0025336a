package trainer_test

import (
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/amp"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// wrapped is a user's module around a built-in one: no chain stage covers it.
type wrapped struct {
	nn.Base
	inner *nn.Sequential
}

func (w *wrapped) Forward(x *torch.Tensor) *torch.Tensor { return w.inner.Forward(x) }

// TestOneCallStepWhen: the default step runs in one call exactly when nothing needs the Trainer
// between its parts, and the run's results do not depend on it.
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
		{"clipping", []trainer.Option{trainer.WithGradClip(1)}, false},
		{"amp", []trainer.Option{trainer.WithAMP(amp.BF16)}, false},
		{"a user's step", []trainer.Option{trainer.WithTrainStep(trainer.LossStep(&nn.CrossEntropyLoss{}))}, false},
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

	// What nn.Stages and nn.LossStageOf do not cover runs call by call.
	tr, va := loaders(t, 256)
	for name, mk := range map[string]func() (nn.Module, nn.Loss){
		"a user's module": func() (nn.Module, nn.Loss) {
			w := &wrapped{}
			w.inner = nn.Register(&w.Base, "inner", models.MLP(784, 16, 10))
			return w, &nn.CrossEntropyLoss{}
		},
		"a LossFunc": func() (nn.Module, nn.Loss) {
			return models.MLP(784, 16, 10), trainer.LossFunc(func(out, y *torch.Tensor) *torch.Tensor {
				return torch.CrossEntropy(out, y, torch.CrossEntropyOptions{})
			})
		},
	} {
		t.Run(name, func(t *testing.T) {
			m, loss := mk()
			opt, err := optim.NewSGD(nn.Parameters(m), optim.SGDOptions{LR: 0.05})
			require.NoError(t, err)
			tt, err := trainer.New(m, tr, va, loss, opt, trainer.WithDevice("cpu"), trainer.WithOutput(io.Discard), trainer.WithEpochs(1))
			require.NoError(t, err)
			require.NoError(t, tt.Run(context.Background()))
			assert.False(t, tt.OneCallStep())
		})
	}
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
