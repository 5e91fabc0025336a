package torch

import "github.com/gotrain/gotrain/cgotorch"

// opt returns the handle of an optional tensor argument (nil when absent).
func opt(t *Tensor) cgotorch.Tensor {
	if t == nil {
		return nil
	}
	return t.Handle()
}

// Linear is F.linear: x @ w.T + b (b may be nil).
func Linear(x, w, b *Tensor) *Tensor {
	h, err := cgotorch.Linear(x.Handle(), w.Handle(), opt(b))
	return must("linear", h, err)
}

// Conv2dOptions are F.conv2d's geometry arguments; zero values mean PyTorch's defaults
// (stride 1, padding 0, dilation 1, groups 1).
type Conv2dOptions struct {
	Stride, Padding, Dilation [2]int64
	Groups                    int64
}

func or1(v [2]int64) []int64 {
	out := []int64{v[0], v[1]}
	for i := range out {
		if out[i] == 0 {
			out[i] = 1
		}
	}
	return out
}

// Conv2d is F.conv2d (b may be nil).
func Conv2d(x, w, b *Tensor, o Conv2dOptions) *Tensor {
	g := o.Groups
	if g == 0 {
		g = 1
	}
	h, err := cgotorch.Conv2d(x.Handle(), w.Handle(), opt(b), or1(o.Stride), o.Padding[:], or1(o.Dilation), g)
	return must("conv2d", h, err)
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

func (o Pool2dOptions) stride() []int64 {
	if o.Stride == [2]int64{} {
		return o.Kernel[:]
	}
	return o.Stride[:]
}

// MaxPool2d is F.max_pool2d.
func MaxPool2d(x *Tensor, o Pool2dOptions) *Tensor {
	h, err := cgotorch.MaxPool2d(x.Handle(), o.Kernel[:], o.stride(), o.Padding[:], or1(o.Dilation), o.CeilMode)
	return must("max_pool2d", h, err)
}

// AvgPool2d is F.avg_pool2d.
func AvgPool2d(x *Tensor, o Pool2dOptions) *Tensor {
	h, err := cgotorch.AvgPool2d(x.Handle(), o.Kernel[:], o.stride(), o.Padding[:], o.CeilMode, !o.ExcludePad)
	return must("avg_pool2d", h, err)
}

// AdaptiveAvgPool2d is F.adaptive_avg_pool2d to an output of h×w.
func AdaptiveAvgPool2d(x *Tensor, outH, outW int64) *Tensor {
	h, err := cgotorch.AdaptiveAvgPool2d(x.Handle(), []int64{outH, outW})
	return must("adaptive_avg_pool2d", h, err)
}

// BatchNorm is F.batch_norm; in training mode it updates runningMean and runningVar in
// place. Any of w, b, runningMean, runningVar may be nil.
func BatchNorm(x, runningMean, runningVar, w, b *Tensor, training bool, momentum, eps float64) *Tensor {
	h, err := cgotorch.BatchNorm(x.Handle(), opt(w), opt(b), opt(runningMean), opt(runningVar), training, momentum, eps)
	return must("batch_norm", h, err)
}

// LayerNorm is F.layer_norm over the trailing normalizedShape dimensions.
func LayerNorm(x *Tensor, normalizedShape []int64, w, b *Tensor, eps float64) *Tensor {
	h, err := cgotorch.LayerNorm(x.Handle(), normalizedShape, opt(w), opt(b), eps)
	return must("layer_norm", h, err)
}

// GroupNorm is F.group_norm.
func GroupNorm(x *Tensor, groups int64, w, b *Tensor, eps float64) *Tensor {
	h, err := cgotorch.GroupNorm(x.Handle(), groups, opt(w), opt(b), eps)
	return must("group_norm", h, err)
}

// Dropout is F.dropout: in training, zeroes elements with probability p and scales the
// rest by 1/(1-p); otherwise returns x unchanged.
func Dropout(x *Tensor, p float64, training bool) *Tensor {
	h, err := cgotorch.Dropout(x.Handle(), p, training)
	return must("dropout", h, err)
}

// Embedding is F.embedding; paddingIdx -1 means none.
func Embedding(weight, indices *Tensor, paddingIdx int64) *Tensor {
	h, err := cgotorch.Embedding(weight.Handle(), indices.Handle(), paddingIdx)
	return must("embedding", h, err)
}

// Reduction selects how a loss reduces over the batch.
type Reduction int

// Reductions, numbered as at::Reduction. The zero value is Mean, PyTorch's default.
const (
	ReductionMean Reduction = iota
	ReductionNone
	ReductionSum
)

func (r Reduction) at() int {
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
	h, err := cgotorch.CrossEntropy(input.Handle(), target.Handle(), opt(o.Weight), o.Reduction.at(), o.ignore(), o.LabelSmoothing)
	return must("cross_entropy", h, err)
}

// NLLLoss is F.nll_loss over log-probabilities.
func NLLLoss(input, target *Tensor, o CrossEntropyOptions) *Tensor {
	h, err := cgotorch.NLLLoss(input.Handle(), target.Handle(), opt(o.Weight), o.Reduction.at(), o.ignore())
	return must("nll_loss", h, err)
}

// MSELoss is F.mse_loss.
func MSELoss(input, target *Tensor, r Reduction) *Tensor {
	h, err := cgotorch.MSELoss(input.Handle(), target.Handle(), r.at())
	return must("mse_loss", h, err)
}

// L1Loss is F.l1_loss.
func L1Loss(input, target *Tensor, r Reduction) *Tensor {
	h, err := cgotorch.L1Loss(input.Handle(), target.Handle(), r.at())
	return must("l1_loss", h, err)
}

// SmoothL1Loss is F.smooth_l1_loss with threshold beta (PyTorch's default is 1).
func SmoothL1Loss(input, target *Tensor, r Reduction, beta float64) *Tensor {
	h, err := cgotorch.SmoothL1Loss(input.Handle(), target.Handle(), r.at(), beta)
	return must("smooth_l1_loss", h, err)
}

// BCEWithLogits is F.binary_cross_entropy_with_logits; weight and posWeight may be nil.
func BCEWithLogits(input, target, weight, posWeight *Tensor, r Reduction) *Tensor {
	h, err := cgotorch.BCEWithLogits(input.Handle(), target.Handle(), opt(weight), opt(posWeight), r.at())
	return must("binary_cross_entropy_with_logits", h, err)
}
