package nn_test

import (
	"encoding/json"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

func keys(sd *checkpoint.Dict) []string {
	var out []string
	for k := range sd.All() {
		out = append(out, k.(string))
	}
	return out
}

// net is a custom module as a user writes one.
type net struct {
	nn.Base
	conv *nn.Conv2d
	bn   *nn.BatchNorm
	head *nn.Sequential
}

func newNet() *net {
	n := &net{}
	n.RegisterParameter("scale", torch.Ones([]int64{1}, torch.Float32, torch.CPU))
	n.RegisterBuffer("step", torch.Zeros(nil, torch.Int64, torch.CPU))
	n.conv = nn.Register(&n.Base, "conv", nn.NewConv2d(1, 4, 3, nn.Padding(1)))
	n.bn = nn.Register(&n.Base, "bn", nn.NewBatchNorm2d(4))
	n.head = nn.Register(&n.Base, "head", nn.NewSequential(nn.NewFlatten(), nn.NewLinear(4*4*4, 3)))
	return n
}

func (n *net) Forward(x *torch.Tensor) *torch.Tensor {
	return n.head.Forward(n.bn.Forward(n.conv.Forward(x)).ReLU()).Mul(n.Parameter("scale"))
}

func TestStateDictOrderAndNames(t *testing.T) {
	start := torch.LiveTensors()
	m := newNet()
	torch.WithScope(func() {
		sd := nn.StateDict(m)
		assert.Equal(t, checkpoint.OrderedDict, sd.Kind)
		assert.Equal(t, []string{
			"scale", "step",
			"conv.weight", "conv.bias",
			"bn.weight", "bn.bias", "bn.running_mean", "bn.running_var", "bn.num_batches_tracked",
			"head.1.weight", "head.1.bias",
		}, keys(sd))
		nbt, _ := sd.Get("bn.num_batches_tracked")
		assert.Equal(t, torch.Int64, nbt.(*torch.Tensor).DType())
		assert.Equal(t, 0, nbt.(*torch.Tensor).Dim())
		w, _ := sd.Get("conv.weight")
		assert.False(t, w.(*torch.Tensor).RequiresGrad(), "state dict entries are detached")
	})
	var names []string
	for _, p := range nn.NamedParameters(m) {
		names = append(names, p.Name)
		assert.True(t, p.Tensor.RequiresGrad(), p.Name)
	}
	assert.Equal(t, []string{"scale", "conv.weight", "conv.bias", "bn.weight", "bn.bias", "head.1.weight", "head.1.bias"}, names)
	assert.Len(t, nn.Parameters(m), 7)
	assert.Len(t, nn.NamedBuffers(m), 4)
	assert.Equal(t, int64(1+4*9+4+4+4+64*3+3), nn.NumParameters(m))
	var mods []string
	for _, nm := range nn.NamedModules(m) {
		mods = append(mods, nm.Name)
	}
	assert.Equal(t, []string{"", "conv", "bn", "head", "head.0", "head.1"}, mods)

	// A forward and backward pass in a scope leaves only the module's tensors alive.
	torch.WithScope(func() {
		y := m.Forward(torch.Randn([]int64{2, 1, 4, 4}, torch.Float32, torch.CPU))
		y.Sum().Backward()
	})
	nn.ZeroGrad(m)
	nn.Free(m)
	assert.Equal(t, start, torch.LiveTensors())
}

func TestRegisterRejectsBadNames(t *testing.T) {
	var b nn.Base
	b.RegisterModule("a", nn.NewReLU())
	assert.Panics(t, func() { b.RegisterModule("a", nn.NewReLU()) })
	assert.Panics(t, func() { b.RegisterModule("a.b", nn.NewReLU()) })
	assert.Panics(t, func() { nn.NewLinear(2, 2, nn.Stride(2)) }, "an option the layer does not take")
}

func TestTraining(t *testing.T) {
	m := newNet()
	defer nn.Free(m)
	assert.True(t, m.bn.Training(), "modules start in training mode")
	nn.SetTraining(m, false)
	assert.False(t, m.bn.Training())
	assert.False(t, m.head.At(1).ModuleBase().Training())
	nn.SetTraining(m, true)
	assert.True(t, m.Training())

	torch.WithScope(func() {
		x := torch.Randn([]int64{3, 1, 4, 4}, torch.Float32, torch.CPU)
		m.Forward(x)
		m.Forward(x)
		assert.Equal(t, int64(2), m.bn.NumBatchesTracked.ItemInt())
		nn.SetTraining(m, false)
		m.Forward(x)
		assert.Equal(t, int64(2), m.bn.NumBatchesTracked.ItemInt(), "evaluation does not count batches")
	})
}

// TestDefaultInit checks that layers draw their parameters from PyTorch's bounds.
func TestDefaultInit(t *testing.T) {
	torch.ManualSeed(1)
	check := func(name string, p *torch.Tensor, bound float64) {
		t.Helper()
		v := p.Float64s()
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, x := range v {
			lo, hi = min(lo, x), max(hi, x)
		}
		assert.LessOrEqual(t, hi, bound, name)
		assert.GreaterOrEqual(t, lo, -bound, name)
		// Uniform samples fill most of the interval and are not all equal.
		assert.Greater(t, hi-lo, bound, name)
	}
	l := nn.NewLinear(300, 50)
	check("linear.weight", l.Weight, 1/math.Sqrt(300))
	check("linear.bias", l.Bias, 1/math.Sqrt(300))
	c := nn.NewConv2d(8, 16, 3, nn.Groups(2))
	check("conv.weight", c.Weight, 1/math.Sqrt(4*9))
	check("conv.bias", c.Bias, 1/math.Sqrt(4*9))
	assert.Equal(t, []int64{16, 4, 3, 3}, c.Weight.Shape())

	e := nn.NewEmbedding(1000, 20, nn.PaddingIdx(3))
	v := e.Weight.Float64s()
	var sum, sq float64
	for _, x := range v {
		sum += x
		sq += x * x
	}
	n := float64(len(v) - 20)
	assert.InDelta(t, 0, sum/n, 0.05, "Embedding is N(0, 1)")
	assert.InDelta(t, 1, sq/n, 0.05, "Embedding is N(0, 1)")
	assert.Equal(t, make([]float64, 20), v[3*20:4*20], "the padding row is zero")

	bn := nn.NewBatchNorm1d(5)
	assert.Equal(t, []float64{1, 1, 1, 1, 1}, bn.Weight.Float64s())
	assert.Equal(t, []float64{0, 0, 0, 0, 0}, bn.Bias.Float64s())
	assert.Equal(t, []float64{1, 1, 1, 1, 1}, bn.RunningVar.Float64s())

	// The default generator decides: the same seed gives the same model.
	torch.ManualSeed(7)
	a := nn.NewLinear(4, 4)
	torch.ManualSeed(7)
	b := nn.NewLinear(4, 4)
	assert.Equal(t, a.Weight.Float64s(), b.Weight.Float64s())
	for _, m := range []nn.Module{l, c, e, bn, a, b} {
		nn.Free(m)
	}
}

// TestLoadStateDictErrors is issue 3, item 6.
func TestLoadStateDictErrors(t *testing.T) {
	src := newNet()
	defer nn.Free(src)
	torch.WithScope(func() {
		good := nn.StateDict(src)

		t.Run("missing", func(t *testing.T) {
			dst := newNet()
			defer nn.Free(dst)
			sd := nn.StateDict(src)
			sd.Delete("bn.running_mean")
			err := nn.LoadStateDict(dst, sd, true)
			var se *nn.StateDictError
			require.True(t, errors.As(err, &se))
			assert.Equal(t, []string{"bn.running_mean"}, se.Missing)
			assert.Contains(t, err.Error(), `Missing key(s) in state_dict: "bn.running_mean"`)

			require.NoError(t, nn.LoadStateDict(dst, sd, false))
			assert.Equal(t, src.conv.Weight.Float64s(), dst.conv.Weight.Float64s(), "non-strict loads what matches")
		})

		t.Run("unexpected", func(t *testing.T) {
			dst := newNet()
			defer nn.Free(dst)
			sd := nn.StateDict(src)
			sd.Set("extra.weight", torch.Zeros([]int64{2}, torch.Float32, torch.CPU))
			err := nn.LoadStateDict(dst, sd, true)
			require.Error(t, err)
			assert.Contains(t, err.Error(), `Unexpected key(s) in state_dict: "extra.weight"`)

			require.NoError(t, nn.LoadStateDict(dst, sd, false))
			assert.Equal(t, src.head.At(1).(*nn.Linear).Weight.Float64s(), dst.head.At(1).(*nn.Linear).Weight.Float64s())
		})

		t.Run("shape", func(t *testing.T) {
			dst := newNet()
			defer nn.Free(dst)
			before := dst.conv.Weight.Float64s()
			sd := nn.StateDict(src)
			sd.Set("conv.weight", torch.Zeros([]int64{4, 1, 5, 5}, torch.Float32, torch.CPU))
			err := nn.LoadStateDict(dst, sd, true)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "size mismatch for conv.weight: copying a param with shape torch.Size([4, 1, 5, 5]) from checkpoint, the shape in current model is torch.Size([4, 1, 3, 3])")

			// Non-strict still reports the mismatch, as PyTorch does, and loads the rest.
			err = nn.LoadStateDict(dst, sd, false)
			var se *nn.StateDictError
			require.True(t, errors.As(err, &se))
			assert.Equal(t, "conv.weight", se.Mismatched[0].Key)
			assert.Equal(t, before, dst.conv.Weight.Float64s(), "a mismatched entry is not copied")
			assert.Equal(t, src.conv.Bias.Float64s(), dst.conv.Bias.Float64s())
		})

		dst := newNet()
		defer nn.Free(dst)
		require.NoError(t, nn.LoadStateDict(dst, good, true))
		assert.Equal(t, src.Parameter("scale").Float64s(), dst.Parameter("scale").Float64s())
		assert.True(t, dst.conv.Weight.RequiresGrad(), "loading keeps parameters trainable")
	})
}

func TestLayersForward(t *testing.T) {
	torch.WithScope(func() {
		x := torch.Randn([]int64{2, 4, 8, 8}, torch.Float32, torch.CPU)
		shape := func(m nn.Layer, in *torch.Tensor) []int64 {
			defer nn.Free(m)
			return m.Forward(in).Shape()
		}
		assert.Equal(t, []int64{2, 4, 4, 4}, shape(nn.NewMaxPool2d(2), x))
		assert.Equal(t, []int64{2, 4, 4, 4}, shape(nn.NewMaxPool2d(3, nn.Stride(2), nn.Padding(1)), x))
		assert.Equal(t, []int64{2, 4, 3, 3}, shape(nn.NewAvgPool2d(3, nn.Stride(2)), x))
		assert.Equal(t, []int64{2, 4, 1, 1}, shape(nn.NewAdaptiveAvgPool2d(1, 1), x))
		assert.Equal(t, []int64{2, 6, 4, 4}, shape(nn.NewConv2d(4, 6, 3, nn.Stride(2), nn.Padding(1)), x))
		assert.Equal(t, []int64{2, 256}, shape(nn.NewFlatten(), x))
		assert.Equal(t, []int64{2, 4, 8, 8}, shape(nn.NewGroupNorm(2, 4), x))
		assert.Equal(t, []int64{2, 4, 8, 8}, shape(nn.NewLayerNorm([]int64{8, 8}), x))
		for _, m := range []nn.Layer{nn.NewReLU(), nn.NewLeakyReLU(0.01), nn.NewGELU(), nn.NewSiLU(), nn.NewTanh(), nn.NewSigmoid(), nn.NewSoftmax(1), nn.NewIdentity(), nn.NewDropout(0.5)} {
			assert.Equal(t, []int64{2, 4, 8, 8}, shape(m, x))
		}
		assert.Equal(t, []int64{2, 3, 5}, shape(nn.NewEmbedding(10, 5), torch.FromSlice([]int64{1, 2, 3, 4, 5, 6}, 2, 3)))
		assert.Panics(t, func() { nn.NewBatchNorm1d(4).Forward(x) }, "BatchNorm1d wants 2-d or 3-d input")
		_, callable := any(nn.NewModuleList(nn.NewReLU())).(nn.Layer)
		assert.False(t, callable, "a ModuleList has no forward, as in PyTorch")

		d := nn.NewDropout(0.5)
		nn.SetTraining(d, false)
		assert.Equal(t, x.Float64s(), d.Forward(x).Float64s(), "dropout is the identity in evaluation mode")
	})
}

// pyLosses evaluates PyTorch's loss modules, constructed with the arguments each Go loss
// struct's fields stand for, on the inputs TestLossesMatchPyTorch passes.
const pyLosses = `
import json, sys, torch, torch.nn as nn
x = torch.tensor([[2, 0, -1], [0, 1, 3], [0.5, -2, 1]])
y = torch.tensor([0, 2, 1])
p = torch.tensor([[0.7, 0.2, 0.1], [0, 0, 1], [0.3, 0.3, 0.4]])
w = torch.tensor([0.2, 1, 3])
a = torch.tensor([0, 1, 4, -0.25])
b = torch.tensor([0, 0, 0.5, 0.5])
z = torch.tensor([0.3, -1.5, 2, 0])
t = torch.tensor([1, 0, 1, 0.5])
pw = torch.tensor([2.0])
out = {
    "ce": nn.CrossEntropyLoss()(x, y),
    "ce_ignore": nn.CrossEntropyLoss(ignore_index=2)(x, y),
    "ce_weight_sum": nn.CrossEntropyLoss(weight=w, reduction="sum")(x, y),
    "ce_smooth": nn.CrossEntropyLoss(label_smoothing=0.1)(x, y),
    "ce_probs": nn.CrossEntropyLoss()(x, p),
    "nll": nn.NLLLoss()(x.log_softmax(1), y),
    "nll_weight": nn.NLLLoss(weight=w)(x.log_softmax(1), y),
    "mse": nn.MSELoss()(a, b),
    "mse_sum": nn.MSELoss(reduction="sum")(a, b),
    "l1": nn.L1Loss()(a, b),
    "l1_sum": nn.L1Loss(reduction="sum")(a, b),
    "smooth_l1": nn.SmoothL1Loss()(a, b),
    "smooth_l1_beta": nn.SmoothL1Loss(beta=0.5)(a, b),
    "bce": nn.BCEWithLogitsLoss()(z, t),
    "bce_pos_weight": nn.BCEWithLogitsLoss(pos_weight=pw)(z, t),
}
print(json.dumps({k: v.item() for k, v in out.items()}))
`

// TestLossesMatchPyTorch checks that each loss module's fields and zero values mean what
// the arguments of PyTorch's module of the same name mean (ignore_index -100, SmoothL1's
// beta 1, mean reduction): the same inputs give the same float32 loss, to the last bit,
// as the module PyTorch builds from those arguments.
func TestLossesMatchPyTorch(t *testing.T) {
	var want map[string]float64
	require.NoError(t, json.Unmarshal(testpy.Run(t, pyLosses, []string{"torch"}), &want))
	torch.WithScope(func() {
		x := torch.FromSlice([]float32{2, 0, -1, 0, 1, 3, 0.5, -2, 1}, 3, 3)
		y := torch.FromSlice([]int64{0, 2, 1})
		p := torch.FromSlice([]float32{0.7, 0.2, 0.1, 0, 0, 1, 0.3, 0.3, 0.4}, 3, 3)
		w := torch.FromSlice([]float32{0.2, 1, 3})
		a := torch.FromSlice([]float32{0, 1, 4, -0.25})
		b := torch.FromSlice([]float32{0, 0, 0.5, 0.5})
		z := torch.FromSlice([]float32{0.3, -1.5, 2, 0})
		tg := torch.FromSlice([]float32{1, 0, 1, 0.5})
		pw := torch.FromSlice([]float32{2})
		ce := func(o torch.CrossEntropyOptions) *nn.CrossEntropyLoss {
			return &nn.CrossEntropyLoss{CrossEntropyOptions: o}
		}
		got := map[string]*torch.Tensor{
			"ce":             (&nn.CrossEntropyLoss{}).Forward(x, y),
			"ce_ignore":      ce(torch.CrossEntropyOptions{IgnoreIndex: 2, IgnoreIndexSet: true}).Forward(x, y),
			"ce_weight_sum":  ce(torch.CrossEntropyOptions{Weight: w, Reduction: torch.ReductionSum}).Forward(x, y),
			"ce_smooth":      ce(torch.CrossEntropyOptions{LabelSmoothing: 0.1}).Forward(x, y),
			"ce_probs":       (&nn.CrossEntropyLoss{}).Forward(x, p),
			"nll":            (&nn.NLLLoss{}).Forward(x.LogSoftmax(1), y),
			"nll_weight":     (&nn.NLLLoss{CrossEntropyOptions: torch.CrossEntropyOptions{Weight: w}}).Forward(x.LogSoftmax(1), y),
			"mse":            (&nn.MSELoss{}).Forward(a, b),
			"mse_sum":        (&nn.MSELoss{Reduction: torch.ReductionSum}).Forward(a, b),
			"l1":             (&nn.L1Loss{}).Forward(a, b),
			"l1_sum":         (&nn.L1Loss{Reduction: torch.ReductionSum}).Forward(a, b),
			"smooth_l1":      (&nn.SmoothL1Loss{}).Forward(a, b),
			"smooth_l1_beta": (&nn.SmoothL1Loss{Beta: 0.5}).Forward(a, b),
			"bce":            (&nn.BCEWithLogitsLoss{}).Forward(z, tg),
			"bce_pos_weight": (&nn.BCEWithLogitsLoss{PosWeight: pw}).Forward(z, tg),
		}
		require.Len(t, got, len(want))
		for name, l := range got {
			require.Contains(t, want, name)
			assert.Equal(t, torch.Float32, l.DType(), name)
			assert.Equal(t, want[name], l.Item(), name)
		}
	})
}

func TestToDeviceKeepsIdentity(t *testing.T) {
	m := nn.NewLinear(3, 2)
	defer nn.Free(m)
	w := m.Weight
	before := w.Float64s()
	nn.ToDevice(m, torch.CPU)
	assert.Same(t, w, m.Weight)
	assert.Equal(t, before, m.Weight.Float64s())
	if torch.CUDAIsAvailable() {
		nn.ToDevice(m, torch.CUDA(0))
		assert.Same(t, w, nn.Parameters(m)[0])
		assert.True(t, m.Weight.Device().IsCUDA())
		assert.True(t, m.Weight.RequiresGrad())
		assert.Equal(t, before, m.Weight.Float64s())
		nn.ToDevice(m, torch.CPU)
		assert.Equal(t, torch.CPU, m.Weight.Device())
	}
}
