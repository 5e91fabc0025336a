package nn_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// block is a model whose forward calls its Linear through its own field, as the
// architectures do.
type block struct {
	nn.Base
	proj *nn.Linear
	seq  *nn.Sequential
}

func newBlock() *block {
	b := &block{}
	b.proj = nn.Register(&b.Base, "proj", nn.NewLinear(4, 4))
	b.seq = nn.Register(&b.Base, "seq", nn.NewSequential(nn.NewLinear(4, 4), nn.NewReLU()))
	return b
}

func (b *block) Forward(x *torch.Tensor) *torch.Tensor { return b.seq.Forward(b.proj.Forward(x)) }

// doubled wraps a Linear: 2·(x Wᵀ + b).
type doubled struct {
	nn.Base
	inner *nn.Linear
}

func (d *doubled) Forward(x *torch.Tensor) *torch.Tensor {
	return torch.Linear(x, d.inner.Weight, d.inner.Bias).MulScalar(2)
}

func wrap(t *testing.T, root nn.Module, path string) *doubled {
	t.Helper()
	var old *nn.Linear
	for _, nm := range nn.NamedModules(root) {
		if nm.Name == path {
			old = nm.Module.(*nn.Linear)
		}
	}
	require.NotNil(t, old)
	d := &doubled{inner: old}
	nn.Register(&d.Base, "base_layer", old)
	prev, err := nn.ReplaceModule(root, path, d)
	require.NoError(t, err)
	require.Same(t, old, prev)
	old.Wrapper = d
	return d
}

// ReplaceModule swaps a submodule in place (names, order, a Sequential's stages), and a
// wrapped Linear's Forward — through the model's own field, and inside a Sequential
// whose built-in layers otherwise run as one chain — reaches the wrapper.
func TestReplaceModuleAndLinearWrapper(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	torch.WithScope(func() {
		b := newBlock()
		x := torch.Randn([]int64{3, 4}, torch.Float32, torch.CPU)
		plain := b.Forward(x).Float32s()
		first := wrap(t, b, "proj")
		second := wrap(t, b, "seq.0")
		var names []string
		for _, p := range nn.NamedParameters(b) {
			names = append(names, p.Name)
		}
		assert.Equal(t, []string{"proj.base_layer.weight", "proj.base_layer.bias", "seq.0.base_layer.weight", "seq.0.base_layer.bias"}, names)
		assert.Same(t, second, b.seq.At(0), "the Sequential runs the new stage")
		h := torch.Linear(x, first.inner.Weight, first.inner.Bias).MulScalar(2)
		want := torch.Linear(h, second.inner.Weight, second.inner.Bias).MulScalar(2).ReLU()
		got := b.Forward(x)
		assert.Equal(t, want.Float32s(), got.Float32s())
		assert.NotEqual(t, plain, got.Float32s())
	})
}

func TestReplaceModuleErrors(t *testing.T) {
	b := newBlock()
	_, err := nn.ReplaceModule(b, "", nn.NewReLU())
	assert.ErrorContains(t, err, "empty path")
	_, err = nn.ReplaceModule(b, "nope.x", nn.NewReLU())
	assert.ErrorContains(t, err, `no submodule "nope"`)
	_, err = nn.ReplaceModule(b, "seq.7", nn.NewReLU())
	assert.ErrorContains(t, err, `no submodule "seq.7"`)
	_, err = nn.ReplaceModule(b, "seq.1", nn.NewModuleList())
	assert.ErrorContains(t, err, "must be a Layer")
	_, err = nn.ReplaceModule(b, "proj", nil)
	assert.ErrorContains(t, err, "nil module")
	l := nn.NewModuleList(nn.NewReLU(), nn.NewTanh())
	s := nn.NewSigmoid()
	_, err = nn.ReplaceModule(l, "1", s)
	require.NoError(t, err)
	assert.Same(t, s, l.At(1))
}

// Freeze leaves nothing trainable; TrainableParameters lists what requires gradients.
func TestFreezeAndTrainableParameters(t *testing.T) {
	b := newBlock()
	assert.Len(t, nn.TrainableParameters(b), 4)
	nn.Freeze(b.seq)
	assert.Equal(t, []*torch.Tensor{b.proj.Weight, b.proj.Bias}, nn.TrainableParameters(b))
	nn.Freeze(b)
	assert.Empty(t, nn.TrainableParameters(b))
}

// nn.Checkpoint around a module gives its plain gradients, also when the input needs
// none; without recording it is a plain call.
func TestCheckpointModule(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	torch.WithScope(func() {
		blocks := []*block{newBlock(), newBlock()}
		x := torch.Randn([]int64{5, 4}, torch.Float32, torch.CPU)
		grads := func(checkpoint bool) [][]float32 {
			h := x
			for _, b := range blocks {
				nn.ZeroGrad(b)
				if checkpoint {
					h = nn.Checkpoint(b, func(x *torch.Tensor, _ []*torch.Tensor) *torch.Tensor { return b.Forward(x) }, h)
				} else {
					h = b.Forward(h)
				}
			}
			h.Square().Sum().Backward()
			var out [][]float32
			for _, b := range blocks {
				for _, p := range nn.Parameters(b) {
					out = append(out, p.Grad().Float32s())
				}
			}
			return out
		}
		assert.Equal(t, grads(false), grads(true))
		torch.NoGrad(func() {
			assert.False(t, nn.Checkpoint(blocks[0], func(x *torch.Tensor, _ []*torch.Tensor) *torch.Tensor { return blocks[0].Forward(x) }, x).RequiresGrad())
		})
	})
}
