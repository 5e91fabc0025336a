package nn_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/amp"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
)

// oneByOne is a Sequential's forward without chains: every layer's own Forward in turn.
func oneByOne(m nn.Layer, x *torch.Tensor) *torch.Tensor {
	if s, ok := m.(*nn.Sequential); ok {
		for i := 0; i < s.Len(); i++ {
			x = oneByOne(s.At(i), x)
		}
		return x
	}
	return m.Forward(x)
}

// halve is a user's module in the middle of a Sequential: it cannot be a chain stage.
type halve struct{ nn.Base }

func (*halve) Forward(x *torch.Tensor) *torch.Tensor { return x.MulScalar(0.5) }

// everyStage has a layer of every stage kind, a nested Sequential, a user's module, and a
// BatchNorm whose training forward reads its count back (so it is not a stage).
func everyStage() *nn.Sequential {
	return nn.NewSequential(
		nn.NewConv2d(3, 4, 3, nn.Padding(1), nn.Stride(2)),
		nn.NewBatchNorm2d(4),
		nn.NewLeakyReLU(0.1),
		nn.NewConv2d(4, 4, 3, nn.Padding(2), nn.Dilation(2), nn.Groups(2), nn.NoBias()),
		nn.NewAvgPool2d(2, nn.CeilMode(), nn.ExcludePad(), nn.Padding(1)),
		nn.NewMaxPool2d(2, nn.Stride(1), nn.Padding(1)),
		nn.NewAdaptiveAvgPool2d(2, 2),
		nn.NewSequential(nn.NewFlatten(), nn.NewIdentity()),
		nn.NewLinear(16, 8),
		nn.NewBatchNorm1d(8, nn.Momentum(0.3)),
		nn.NewGELU(),
		&nn.GELU{Tanh: true},
		nn.NewDropout(0.3),
		nn.NewLinear(8, 8),
		nn.NewSiLU(),
		&halve{},
		nn.NewBatchNorm1d(8, nn.CumulativeAverage()),
		nn.NewTanh(),
		nn.NewSequential(nn.NewLinear(8, 3, nn.NoBias()), nn.NewSigmoid()),
	)
}

// values is everything a forward and backward leave behind: the output, every
// parameter's gradient and every buffer, as float64 (exact for every dtype used here).
func values(m nn.Module, out *torch.Tensor) map[string][]float64 {
	v := map[string][]float64{"output": out.ToDType(torch.Float64).Float64s()}
	for _, p := range nn.NamedParameters(m) {
		v["grad "+p.Name] = p.Tensor.Grad().ToDType(torch.Float64).Float64s()
	}
	for _, b := range nn.NamedBuffers(m) {
		v["buffer "+b.Name] = b.Tensor.ToDType(torch.Float64).Float64s()
	}
	return v
}

// run builds a model from seed 7 and trains it for two forwards and backwards (with
// forward), then evaluates once, drawing Dropout's masks from seed 11.
func run(build func() *nn.Sequential, x *torch.Tensor, forward func(m *nn.Sequential, x *torch.Tensor) *torch.Tensor, bf16 bool) (train, eval map[string][]float64) {
	torch.ManualSeed(7)
	m := build()
	torch.ManualSeed(11)
	var out *torch.Tensor
	for range 2 {
		f := func() { out = forward(m, x) }
		if bf16 {
			amp.Autocast(torch.CPU, torch.BFloat16, f)
		} else {
			f()
		}
		out.ToDType(torch.Float32).Square().Mean().Backward()
	}
	train = values(m, out)
	nn.SetTraining(m, false)
	torch.NoGrad(func() { out = forward(m, x) })
	eval = map[string][]float64{"output": out.ToDType(torch.Float64).Float64s()}
	return train, eval
}

func chained(m *nn.Sequential, x *torch.Tensor) *torch.Tensor { return m.Forward(x) }
func layered(m *nn.Sequential, x *torch.Tensor) *torch.Tensor { return oneByOne(m, x) }

// TestChainMatchesLayers: a Sequential's forward as chains gives what its layers' own
// Forwards give, to the bit: outputs, gradients, running statistics, batch counts and
// Dropout's draws, in training and evaluation, in float32 and under bf16 autocast.
func TestChainMatchesLayers(t *testing.T) {
	torch.ManualSeed(3)
	cases := []struct {
		name  string
		build func() *nn.Sequential
		x     *torch.Tensor
		bf16  bool
	}{
		{"SmallCNN", func() *nn.Sequential { return models.SmallCNN(10) }, torch.Randn([]int64{4, 1, 28, 28}, torch.Float32, torch.CPU), false},
		{"SmallCNN bf16", func() *nn.Sequential { return models.SmallCNN(10) }, torch.Randn([]int64{2, 1, 28, 28}, torch.Float32, torch.CPU), true},
		{"MLP", func() *nn.Sequential { return models.MLP(784, 32, 10) }, torch.Randn([]int64{16, 1, 28, 28}, torch.Float32, torch.CPU), false},
		{"every stage", everyStage, torch.Randn([]int64{5, 3, 12, 12}, torch.Float32, torch.CPU), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := torch.NewScope()
			defer s.Close()
			wantTrain, wantEval := run(c.build, c.x, layered, c.bf16)
			gotTrain, gotEval := run(c.build, c.x, chained, c.bf16)
			require.Equal(t, len(wantTrain), len(gotTrain))
			for k, want := range wantTrain {
				require.Equal(t, want, gotTrain[k], k)
			}
			require.Equal(t, wantEval, gotEval)
			assert.Greater(t, len(wantTrain), 4, "output and gradients at least")
		})
	}
}

// TestChainErrorsNameTheOp: a stage that fails inside a chain panics with the error its
// layer's Forward gives alone, naming the same op.
func TestChainErrorsNameTheOp(t *testing.T) {
	s := torch.NewScope()
	defer s.Close()
	x := torch.Randn([]int64{2, 4}, torch.Float32, torch.CPU)
	for _, m := range []*nn.Sequential{
		nn.NewSequential(nn.NewLinear(4, 3), nn.NewReLU(), nn.NewLinear(5, 2)),
		nn.NewSequential(nn.NewLinear(4, 3), nn.NewBatchNorm2d(3)),
		nn.NewSequential(nn.NewFlatten(), nn.NewMaxPool2d(2)),
	} {
		want := panicOf(func() { oneByOne(m, x) })
		got := panicOf(func() { m.Forward(x) })
		var we, ge *torch.Error
		require.True(t, errors.As(want, &we), "%v", want)
		require.True(t, errors.As(got, &ge), "%v", got)
		assert.Equal(t, we.Op, ge.Op)
		assert.Equal(t, we.Error(), ge.Error())
	}
}

func panicOf(f func()) (err error) {
	defer func() {
		r := recover()
		if e, ok := r.(error); ok {
			err = e
		} else if r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	f()
	return nil
}

// TestChainZeroStage: a zero Stage is a programmer's error, reported as one.
func TestChainZeroStage(t *testing.T) {
	x := torch.Ones([]int64{2}, torch.Float32, torch.CPU)
	defer x.Free()
	err := panicOf(func() { torch.Chain(x, []torch.Stage{{}}) })
	var te *torch.Error
	require.True(t, errors.As(err, &te), "%v", err)
	assert.Equal(t, "chain", te.Op)
}
