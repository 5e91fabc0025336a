package torch

import (
	"math"
	"sync"

	"github.com/gotrain/gotrain/cgotorch"
)

// opt returns the handle of an optional tensor argument (0 when absent).
func opt(t *Tensor) cgotorch.Tensor {
	if t == nil {
		return 0
	}
	return t.handle()
}

// handles returns the tensors' handles for a call that takes a list.
func handles(ts []*Tensor) []cgotorch.Tensor {
	hs := make([]cgotorch.Tensor, len(ts))
	for i, t := range ts {
		hs[i] = t.handle()
	}
	return hs
}

// handleBufs holds handle slices for the calls a training step makes every step with all
// the parameters (zero_grad, the optimizer step): borrowing one instead of making one
// keeps the step from allocating them. C only reads and fills them during the call.
var handleBufs = sync.Pool{New: func() any { return new([]cgotorch.Tensor) }}

// borrowHandles returns a pooled slice of n zero handles; give it back with
// returnHandles once the call that uses it has returned.
func borrowHandles(n int) *[]cgotorch.Tensor {
	b := handleBufs.Get().(*[]cgotorch.Tensor)
	if cap(*b) < n {
		*b = make([]cgotorch.Tensor, n)
	}
	*b = (*b)[:n]
	clear(*b)
	return b
}

// borrowHandlesOf is borrowHandles filled with the tensors' handles.
func borrowHandlesOf(ts []*Tensor) *[]cgotorch.Tensor {
	b := borrowHandles(len(ts))
	for i, t := range ts {
		(*b)[i] = t.handle()
	}
	return b
}

func returnHandles(b *[]cgotorch.Tensor) { handleBufs.Put(b) }

// Clamp limits values to [lo, hi]; pass math.Inf to leave a side open.
func (t *Tensor) Clamp(lo, hi float64) *Tensor {
	return t.clamp(lo, hi, !math.IsInf(lo, -1), !math.IsInf(hi, 1))
}

// Conv2dOptions are F.conv2d's geometry arguments; zero values mean PyTorch's defaults
// (stride 1, padding 0, dilation 1, groups 1).
type Conv2dOptions struct {
	Stride, Padding, Dilation [2]int64
	Groups                    int64
}

// or1 is v with its zeros replaced by 1 (PyTorch's default stride and dilation), as a
// slice.
func or1(v [2]int64) []int64 {
	for i := range v {
		if v[i] == 0 {
			v[i] = 1
		}
	}
	return v[:]
}

// Conv2d is F.conv2d (b may be nil).
func Conv2d(x, w, b *Tensor, o Conv2dOptions) *Tensor {
	return conv2d(x, w, b, or1(o.Stride), o.Padding[:], or1(o.Dilation), o.groups())
}

// groups is Groups with 0 meaning 1.
func (o Conv2dOptions) groups() int64 {
	if o.Groups == 0 {
		return 1
	}
	return o.Groups
}

// Pool2dOptions are the pooling geometry; a zero Stride means the kernel size, a zero
// Dilation means 1.
type Pool2dOptions struct {
	Kernel, Stride, Padding, Dilation [2]int64
	CeilMode                          bool
	// CountIncludePad is avg_pool2d's flag; PyTorch's default is true, so the zero value
	// here is inverted: set ExcludePad to exclude padding from the average.
	ExcludePad bool
}

// stride is Stride, or Kernel when Stride is zero.
func (o Pool2dOptions) stride() []int64 {
	if o.Stride == [2]int64{} {
		return o.Kernel[:]
	}
	return o.Stride[:]
}

// MaxPool2d is F.max_pool2d.
func MaxPool2d(x *Tensor, o Pool2dOptions) *Tensor {
	return maxPool2d(x, o.Kernel[:], o.stride(), o.Padding[:], or1(o.Dilation), o.CeilMode)
}

// AvgPool2d is F.avg_pool2d.
func AvgPool2d(x *Tensor, o Pool2dOptions) *Tensor {
	return avgPool2d(x, o.Kernel[:], o.stride(), o.Padding[:], o.CeilMode, !o.ExcludePad)
}

// AdaptiveAvgPool2d is F.adaptive_avg_pool2d to an output of h×w.
func AdaptiveAvgPool2d(x *Tensor, outH, outW int64) *Tensor {
	return adaptiveAvgPool2d(x, []int64{outH, outW})
}

// BatchNorm is F.batch_norm; in training mode it updates runningMean and runningVar in
// place. Any of w, b, runningMean, runningVar may be nil.
func BatchNorm(x, runningMean, runningVar, w, b *Tensor, training bool, momentum, eps float64) *Tensor {
	return batchNorm(x, w, b, runningMean, runningVar, training, momentum, eps)
}

// Reduction selects how a loss reduces over the batch.
type Reduction int

// Reductions, numbered as at::Reduction. The zero value is Mean, PyTorch's default.
const (
	ReductionMean Reduction = iota
	ReductionNone
	ReductionSum
)

func (r Reduction) at() int64 {
	switch r {
	case ReductionNone:
		return 0
	case ReductionSum:
		return 2
	}
	return 1
}

// CrossEntropyOptions are F.cross_entropy's options. IgnoreIndex 0 is a valid class, so
// the default -100 is applied when IgnoreIndexSet is false.
type CrossEntropyOptions struct {
	Weight         *Tensor
	Reduction      Reduction
	IgnoreIndex    int64
	IgnoreIndexSet bool
	LabelSmoothing float64
}

func (o CrossEntropyOptions) ignore() int64 {
	if o.IgnoreIndexSet {
		return o.IgnoreIndex
	}
	return -100
}

// CrossEntropy is F.cross_entropy(input, target) with class-index targets or class
// probabilities.
func CrossEntropy(input, target *Tensor, o CrossEntropyOptions) *Tensor {
	return crossEntropy(input, target, o.Weight, o.Reduction.at(), o.ignore(), o.LabelSmoothing)
}

// NLLLoss is F.nll_loss over log-probabilities.
func NLLLoss(input, target *Tensor, o CrossEntropyOptions) *Tensor {
	return nllLoss(input, target, o.Weight, o.Reduction.at(), o.ignore())
}

// MSELoss is F.mse_loss.
func MSELoss(input, target *Tensor, r Reduction) *Tensor {
	return mseLoss(input, target, r.at())
}

// L1Loss is F.l1_loss.
func L1Loss(input, target *Tensor, r Reduction) *Tensor {
	return l1Loss(input, target, r.at())
}

// SmoothL1Loss is F.smooth_l1_loss with threshold beta (PyTorch's default is 1).
func SmoothL1Loss(input, target *Tensor, r Reduction, beta float64) *Tensor {
	return smoothL1Loss(input, target, r.at(), beta)
}

// BCEWithLogits is F.binary_cross_entropy_with_logits; weight and posWeight may be nil.
func BCEWithLogits(input, target, weight, posWeight *Tensor, r Reduction) *Tensor {
	return bceWithLogits(input, target, weight, posWeight, r.at())
}
