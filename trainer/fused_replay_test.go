package trainer_test

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// TestOneCallFusedScheduled: AdamW and SGD with fused=True (Go over ATen's fused rows,
// torch/optim/fused.go) under a scheduler that changes the learning rate at every step
// train the same with the Trainer's replayed step as eagerly, to the bit — weights and
// optimizer state — and the step is replayed: the fused kernels read the rate from a
// tensor the optimizer sets before each step, not from a value the trace baked in.
func TestOneCallFusedScheduled(t *testing.T) {
	tr, va := loaders(t, 1024)
	for _, c := range []struct {
		name string
		make func(ps []*torch.Tensor) (optim.Optimizer, error)
	}{
		{"adamw", func(ps []*torch.Tensor) (optim.Optimizer, error) {
			return optim.NewAdamW(ps, optim.AdamOptions{LR: 1e-2, WeightDecay: 0.1, AMSGrad: true, Fused: true})
		}},
		{"sgd", func(ps []*torch.Tensor) (optim.Optimizer, error) {
			return optim.NewSGD(ps, optim.SGDOptions{LR: 0.05, Momentum: 0.9, Nesterov: true, Fused: true})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := func(on bool) (*trainer.Trainer, optim.Optimizer) {
				torch.ManualSeed(seed)
				m := newGated()
				opt, err := c.make(nn.Parameters(m))
				require.NoError(t, err)
				// A rate that differs at every step.
				s, err := optim.NewLambdaLR(opt, func(step int64) float64 { return 1 / (1 + 0.1*float64(step)) })
				require.NoError(t, err)
				tt, err := trainer.New(m, tr, va, &nn.CrossEntropyLoss{}, opt, trainer.WithDevice("cpu"),
					trainer.WithOutput(io.Discard), trainer.WithEpochs(2), trainer.WithSeed(seed),
					trainer.WithScheduler(s, trainer.PerStep), trainer.WithOneCallStep(on))
				require.NoError(t, err)
				require.NoError(t, tt.Run(context.Background()))
				return tt, opt
			}
			eager, eagerOpt := run(false)
			replayed, replayedOpt := run(true)
			assert.False(t, eager.OneCallStep())
			require.True(t, replayed.OneCallStep())
			require.Empty(t, replayed.OneCallRefused())
			// The scheduler moved the rate well below the initial one (the InitialLR it
			// keeps), so a replay that baked in a rate would not match.
			g := replayedOpt.ParamGroups()[0]
			require.Less(t, g.LR, 0.5*g.InitialLR)
			assert.Equal(t, eagerOpt.ParamGroups()[0].LR, replayedOpt.ParamGroups()[0].LR)
			assert.Equal(t, paramValues(eager.Model), paramValues(replayed.Model))
			assert.Equal(t, optimState(t, eagerOpt), optimState(t, replayedOpt))
		})
	}
}

// optimState returns every state tensor of o's state dict by parameter and name.
func optimState(t *testing.T, o optim.Optimizer) map[string][]float64 {
	out := map[string][]float64{}
	st, ok := o.StateDict().Get("state")
	require.True(t, ok)
	for id, row := range st.(*checkpoint.Dict).All() {
		for name, v := range row.(*checkpoint.Dict).All() {
			out[fmt.Sprint(id, name)] = v.(*torch.Tensor).Float64s()
		}
	}
	require.NotEmpty(t, out)
	return out
}
