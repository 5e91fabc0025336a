package optim_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/optim"
)

// heavyBall is SGD with momentum written as an Algorithm: PyTorch's update
// buf = momentum·buf + grad (buf = grad at first), p -= lr·buf.
var heavyBall = optim.Algorithm{
	Name:     "SGD",
	Slots:    []string{"momentum_buffer"},
	Defaults: map[string]any{"momentum": 0.9, "dampening": 0.0, "weight_decay": 0.0, "nesterov": false, "maximize": false},
	Update: func(g *optim.ParamGroup, p, grad *torch.Tensor, state []*torch.Tensor) {
		if state[0] == nil {
			state[0] = grad.Clone()
		} else {
			state[0].MulScalarInPlace(g.Float("momentum", 0))
			state[0].AddInPlace(grad, 1)
		}
		p.SubInPlace(state[0], g.LR)
	},
}

// quadratic sets p's gradient to that of sum((p - target)²).
func quadratic(p, target *torch.Tensor) {
	p.SetGrad(nil)
	p.Sub(target).Square().Sum().Backward()
}

// TestAlgorithmMatchesBuiltIn: an optimizer written as an Algorithm trains as the
// built-in one with the same arithmetic, and its state dict has PyTorch's layout and
// round-trips to an exact continuation.
func TestAlgorithmMatchesBuiltIn(t *testing.T) {
	torch.WithScope(func() {
		target := torch.FromSlice([]float32{1, -2, 3, 0.5})
		a := torch.FromSlice([]float32{0, 0, 0, 0}).SetRequiresGrad(true).Escape()
		b := torch.FromSlice([]float32{0, 0, 0, 0}).SetRequiresGrad(true).Escape()
		mine, err := optim.New(heavyBall, []optim.Group{{Params: []*torch.Tensor{a}}}, 0.01)
		require.NoError(t, err)
		builtin, err := optim.NewSGD([]*torch.Tensor{b}, optim.SGDOptions{LR: 0.01, Momentum: 0.9})
		require.NoError(t, err)
		for range 5 {
			quadratic(a, target)
			require.NoError(t, mine.Step())
			quadratic(b, target)
			require.NoError(t, builtin.Step())
		}
		assert.InDeltaSlice(t, b.Float64s(), a.Float64s(), 1e-6)

		sd := mine.StateDict()
		state, ok := sd.Get("state")
		require.True(t, ok)
		st := builtin.StateDict()
		want, _ := st.Get("state")
		assert.Equal(t, len(want.(interface{ Keys() []any }).Keys()), len(state.(interface{ Keys() []any }).Keys()))

		// A second optimizer loaded from the first's state continues exactly as it does.
		c := torch.Empty([]int64{4}, torch.Float32, torch.CPU).SetRequiresGrad(true).Escape()
		torch.NoGrad(func() { c.CopyFrom(a, false) })
		again, err := optim.New(heavyBall, []optim.Group{{Params: []*torch.Tensor{c}}}, 0.5)
		require.NoError(t, err)
		require.NoError(t, again.LoadStateDict(sd))
		assert.Equal(t, 0.01, again.ParamGroups()[0].LR, "the group's lr comes from the state dict")
		for range 3 {
			quadratic(a, target)
			require.NoError(t, mine.Step())
			quadratic(c, target)
			require.NoError(t, again.Step())
		}
		assert.Equal(t, a.Float64s(), c.Float64s())
	})
	_, err := optim.New(optim.Algorithm{Name: "broken"}, nil, 0.1)
	assert.Error(t, err)
}
