//go:build cuda

package amp_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/amp"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/optim"
)

func TestCUDAAutocastDTypes(t *testing.T) {
	if !torch.CUDAIsAvailable() {
		t.Skip("no usable CUDA device")
	}
	for _, dt := range []torch.DType{torch.Float16, torch.BFloat16} {
		torch.WithScope(func() {
			x := torch.Randn([]int64{4, 8}, torch.Float32, torch.CUDA(0))
			w := torch.Randn([]int64{3, 8}, torch.Float32, torch.CUDA(0))
			var inside torch.DType
			amp.Autocast(torch.CUDA(0), dt, func() { inside = torch.Linear(x, w, nil).DType() })
			assert.Equal(t, dt, inside)
			assert.Equal(t, torch.Float32, torch.Linear(x, w, nil).DType(), "autocast ends with the function")
		})
	}
}

// TestCUDAGradScalerSkipsOnInfAndGrows injects an inf gradient (the step is skipped and
// the scale backs off), then runs clean steps until the scale grows.
func TestCUDAGradScalerSkipsOnInfAndGrows(t *testing.T) {
	if !torch.CUDAIsAvailable() {
		t.Skip("no usable CUDA device")
	}
	scope := torch.NewScope()
	defer scope.Close()
	p := torch.Ones([]int64{4}, torch.Float32, torch.CUDA(0)).SetRequiresGrad(true).Escape()
	opt, err := optim.NewSGD([]*torch.Tensor{p}, optim.SGDOptions{LR: 0.1})
	require.NoError(t, err)
	s, err := amp.NewGradScaler(amp.ScalerOptions{Enabled: true, InitScale: 1024, GrowthInterval: 3})
	require.NoError(t, err)
	step := func(inject float64) bool {
		var stepped bool
		torch.WithScope(func() {
			opt.ZeroGrad(true)
			loss := p.Sum()
			if inject != 0 {
				loss = loss.MulScalar(inject)
			}
			s.ScaleLoss(loss).Backward()
			require.NoError(t, s.Unscale(opt))
			stepped, err = s.Step(opt)
			require.NoError(t, err)
			require.NoError(t, s.Update())
		})
		return stepped
	}
	before := p.Float32s()
	assert.False(t, step(math.Inf(1)), "an inf gradient skips the step")
	assert.Equal(t, before, p.Float32s(), "a skipped step leaves the parameters")
	assert.Equal(t, 512.0, s.ScaleValue(), "the scale backs off by half")
	for i := 0; i < 3; i++ {
		assert.True(t, step(0))
	}
	assert.Equal(t, 1024.0, s.ScaleValue(), "three clean steps grow the scale")
}
