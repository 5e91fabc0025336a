package nn

import (
	"fmt"
	"slices"

	"github.com/gotrain/gotrain/torch"
)

// BatchNorm is nn.BatchNorm1d or nn.BatchNorm2d: parameters "weight" and "bias" (unless
// NoAffine) and buffers "running_mean", "running_var" and "num_batches_tracked" (an
// int64 scalar; unless NoTrackRunningStats).
type BatchNorm struct {
	Base
	Weight, Bias            *torch.Tensor
	RunningMean, RunningVar *torch.Tensor
	NumBatchesTracked       *torch.Tensor
	Eps, Momentum           float64
	CumulativeAverage       bool // momentum=None
	inputDims               []int
	name                    string
}

var batchNormOptions = []string{"Eps", "Momentum", "CumulativeAverage", "NoAffine", "NoTrackRunningStats"}

func newBatchNorm(name string, features int64, dims []int, opts []Option) *BatchNorm {
	o := parseOptions(name, batchNormOptions, opts)
	b := &BatchNorm{Eps: o.eps, Momentum: o.momentum, CumulativeAverage: o.cumulative, inputDims: dims, name: name}
	if !o.noAffine {
		b.Weight = b.RegisterParameter("weight", torch.Ones([]int64{features}, torch.Float32, torch.CPU))
		b.Bias = b.RegisterParameter("bias", torch.Zeros([]int64{features}, torch.Float32, torch.CPU))
	}
	if !o.noTrack {
		b.RunningMean = b.RegisterBuffer("running_mean", torch.Zeros([]int64{features}, torch.Float32, torch.CPU))
		b.RunningVar = b.RegisterBuffer("running_var", torch.Ones([]int64{features}, torch.Float32, torch.CPU))
		b.NumBatchesTracked = b.RegisterBuffer("num_batches_tracked", torch.Zeros(nil, torch.Int64, torch.CPU))
	}
	return b
}

// NewBatchNorm1d returns nn.BatchNorm1d(features) for inputs [N, C] or [N, C, L]. It
// takes the options Eps, Momentum, CumulativeAverage, NoAffine and NoTrackRunningStats.
func NewBatchNorm1d(features int64, opts ...Option) *BatchNorm {
	return newBatchNorm("BatchNorm1d", features, []int{2, 3}, opts)
}

// NewBatchNorm2d returns nn.BatchNorm2d(features) for inputs [N, C, H, W]. It takes the
// same options as NewBatchNorm1d.
func NewBatchNorm2d(features int64, opts ...Option) *BatchNorm {
	return newBatchNorm("BatchNorm2d", features, []int{4}, opts)
}

// Forward normalises x over the batch (and spatial) dimensions. In training mode it uses
// the batch statistics and updates the running ones; in evaluation mode it uses the
// running statistics, when it keeps them.
func (b *BatchNorm) Forward(x *torch.Tensor) *torch.Tensor {
	d := x.Dim()
	if !slices.Contains(b.inputDims, d) {
		panic(&torch.Error{Op: b.name, Msg: fmt.Sprintf("expected %v-d input, got %d-d", b.inputDims, d)})
	}
	training := b.Training()
	momentum := b.Momentum
	if training && b.NumBatchesTracked != nil {
		torch.NoGrad(func() { b.NumBatchesTracked.AddScalarInPlace(1) })
		if b.CumulativeAverage {
			momentum = 1 / float64(b.NumBatchesTracked.ItemInt())
		}
	}
	return torch.BatchNorm(x, b.RunningMean, b.RunningVar, b.Weight, b.Bias, training || b.RunningMean == nil, momentum, b.Eps)
}

// LayerNorm is nn.LayerNorm over the trailing Shape dimensions, with parameters "weight"
// and "bias" of that shape (unless NoAffine; NoBias leaves out only the bias).
type LayerNorm struct {
	Base
	Shape        []int64
	Weight, Bias *torch.Tensor
	Eps          float64
}

// NewLayerNorm returns nn.LayerNorm(shape). It takes the options Eps, NoAffine
// (elementwise_affine=False) and NoBias.
func NewLayerNorm(shape []int64, opts ...Option) *LayerNorm {
	o := parseOptions("LayerNorm", []string{"Eps", "NoAffine", "NoBias"}, opts)
	l := &LayerNorm{Shape: append([]int64{}, shape...), Eps: o.eps}
	if !o.noAffine {
		l.Weight = l.RegisterParameter("weight", torch.Ones(shape, torch.Float32, torch.CPU))
		if !o.noBias {
			l.Bias = l.RegisterParameter("bias", torch.Zeros(shape, torch.Float32, torch.CPU))
		}
	}
	return l
}

// Forward normalises x over its trailing dimensions.
func (l *LayerNorm) Forward(x *torch.Tensor) *torch.Tensor {
	return torch.LayerNorm(x, l.Shape, l.Weight, l.Bias, l.Eps)
}

// GroupNorm is nn.GroupNorm: channels split into Groups, normalised per sample and
// group, with per-channel "weight" and "bias" (unless NoAffine).
type GroupNorm struct {
	Base
	Groups       int64
	Weight, Bias *torch.Tensor
	Eps          float64
}

// NewGroupNorm returns nn.GroupNorm(groups, channels). It takes the options Eps and NoAffine.
func NewGroupNorm(groups, channels int64, opts ...Option) *GroupNorm {
	o := parseOptions("GroupNorm", []string{"Eps", "NoAffine"}, opts)
	if groups <= 0 || channels%groups != 0 {
		panic(fmt.Sprintf("nn: GroupNorm: %d channels are not divisible into %d groups", channels, groups))
	}
	g := &GroupNorm{Groups: groups, Eps: o.eps}
	if !o.noAffine {
		g.Weight = g.RegisterParameter("weight", torch.Ones([]int64{channels}, torch.Float32, torch.CPU))
		g.Bias = g.RegisterParameter("bias", torch.Zeros([]int64{channels}, torch.Float32, torch.CPU))
	}
	return g
}

// Forward normalises x [N, C, ...].
func (g *GroupNorm) Forward(x *torch.Tensor) *torch.Tensor {
	return torch.GroupNorm(x, g.Groups, g.Weight, g.Bias, g.Eps)
}
