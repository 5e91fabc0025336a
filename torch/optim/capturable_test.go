package optim_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/optim"
)

// TestCapturableOptimizer: the built-in optimizers' capturable form (what a CUDA graph
// captures, optim.Capturable's CaptureLR) reads the learning rate from a device tensor: its
// steps at a rate that changes every step match the ordinary steps at the same rates,
// within float32 tolerance for the rate's rounding; setting the tensor, not the group,
// is what moves them; and after it ends the optimizer reads its group again. On the CPU
// the tensors are CPU tensors, the kernels ATen's CPU fused ones.
func TestCapturableOptimizer(t *testing.T) {
	type mk func(ps []*torch.Tensor) (optim.Optimizer, error)
	for _, c := range []struct {
		name string
		make mk
	}{
		{"adamw fused", func(ps []*torch.Tensor) (optim.Optimizer, error) {
			return optim.NewAdamW(ps, optim.AdamOptions{LR: 1e-2, WeightDecay: 0.1, Fused: true})
		}},
		{"adam fused amsgrad", func(ps []*torch.Tensor) (optim.Optimizer, error) {
			return optim.NewAdam(ps, optim.AdamOptions{LR: 1e-2, AMSGrad: true, Fused: true})
		}},
		{"sgd nesterov", func(ps []*torch.Tensor) (optim.Optimizer, error) {
			return optim.NewSGD(ps, optim.SGDOptions{LR: 0.1, Momentum: 0.9, Nesterov: true, WeightDecay: 1e-3})
		}},
		{"sgd plain", func(ps []*torch.Tensor) (optim.Optimizer, error) {
			return optim.NewSGD(ps, optim.SGDOptions{LR: 0.1})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			torch.WithScope(func() {
				torch.ManualSeed(3)
				init := []*torch.Tensor{torch.Randn([]int64{4, 3}, torch.Float32, torch.CPU), torch.Randn([]int64{5}, torch.Float32, torch.CPU)}
				clone := func() []*torch.Tensor {
					var ps []*torch.Tensor
					for _, x := range init {
						p := x.Clone()
						p.SetRequiresGrad(true)
						ps = append(ps, p)
					}
					return ps
				}
				plain, capt := clone(), clone()
				a, err := c.make(plain)
				require.NoError(t, err)
				b, err := c.make(capt)
				require.NoError(t, err)
				lr := torch.Zeros(nil, torch.Float32, torch.CPU)
				for step := range 4 {
					rate := 0.05 / float64(step+1)
					for i := range init {
						g := torch.Randn(init[i].Shape(), torch.Float32, torch.CPU)
						plain[i].SetGrad(g.Clone())
						capt[i].SetGrad(g.Clone())
					}
					a.ParamGroups()[0].LR = rate
					require.NoError(t, a.Step())
					b.ParamGroups()[0].LR = 123 // not read: the tensor is
					lr.Fill(rate)
					c := b.(optim.Capturable)
					require.NoError(t, c.CaptureLR([]*torch.Tensor{lr}))
					err := b.Step()
					require.NoError(t, c.CaptureLR(nil))
					require.NoError(t, err)
				}
				for i := range init {
					w, g := plain[i].Float64s(), capt[i].Float64s()
					for j := range w {
						assert.InDelta(t, w[j], g[j], 1e-6*max(1, math.Abs(w[j])), "param %d[%d]", i, j)
					}
				}
				// Ended, the group's rate is read again: 123 moves the weights far.
				before := capt[0].Float64s()
				capt[0].SetGrad(torch.Ones(init[0].Shape(), torch.Float32, torch.CPU))
				require.NoError(t, b.Step())
				assert.Greater(t, math.Abs(capt[0].Float64s()[0]-before[0]), 1.0)
			})
		})
	}
}
