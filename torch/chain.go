package torch

import "github.com/gotrain/gotrain/cgotorch"

// Stage is one layer of a Chain: the op of one of this package's layer functions with its
// weights and settings bound, waiting for its input. Make stages with the *Stage
// functions; the zero Stage is not valid.
//
// A Stage holds the tensors it reads and resolves them when the chain runs, so it may be
// built once and run many times, and it sees a tensor's new data after SetData.
type Stage struct {
	c                  cgotorch.Stage
	op                 string
	w, b, mean, vr, nb *Tensor
}

// Chain is x through the stages in order, computed in one libtorch call: each stage runs
// the ATen function its layer function runs (LinearStage what Linear runs, and so on),
// so the result, its autograd graph, any random draws (Dropout) and in-place updates
// (BatchNorm's running statistics) are the ones the functions called one by one give,
// to the bit. Only the result gets a Tensor; the intermediate outputs stay in libtorch,
// where autograd keeps what backward needs. nn.Sequential runs its built-in layers this
// way: for a small model each op's boundary crossing is a visible part of a step.
//
// A stage that fails panics with a *Error naming its op, as the function would.
func Chain(x *Tensor, stages []Stage) *Tensor {
	if len(stages) == 0 {
		return x
	}
	c := cgotorch.NewChain() // a panic below leaves it to the garbage collector
	for i := range stages {
		s := &stages[i]
		if s.op == "" {
			panic(&Error{Op: "chain", Msg: "stage is the zero Stage; make stages with the *Stage functions"})
		}
		c.Add(&s.c, opt(s.w), opt(s.b), opt(s.mean), opt(s.vr), opt(s.nb))
	}
	r, failed := c.Forward(x.handle())
	if r.Err != nil {
		op := "chain"
		if failed >= 0 && failed < len(stages) {
			op = stages[failed].op
		}
		panic(opErr(op, r.Err))
	}
	return wrapIn(r.T, r.Scope)
}

func stage(kind cgotorch.StageKind, op string) Stage {
	return Stage{c: cgotorch.Stage{Kind: kind}, op: op}
}

// LinearStage is the stage of Linear(x, w, b) (b may be nil).
func LinearStage(w, b *Tensor) Stage {
	s := stage(cgotorch.StageLinear, "linear")
	s.w, s.b = w, b
	return s
}

// Conv2dStage is the stage of Conv2d(x, w, b, o) (b may be nil).
func Conv2dStage(w, b *Tensor, o Conv2dOptions) Stage {
	s := stage(cgotorch.StageConv2d, "conv2d")
	s.w, s.b = w, b
	s.c.Stride, s.c.Padding, s.c.Dilation, s.c.Groups = ones(o.Stride), o.Padding, ones(o.Dilation), o.groups()
	return s
}

// MaxPool2dStage is the stage of MaxPool2d(x, o).
func MaxPool2dStage(o Pool2dOptions) Stage {
	s := stage(cgotorch.StageMaxPool2d, "max_pool2d")
	s.c.Kernel, s.c.Stride, s.c.Padding, s.c.Dilation, s.c.CeilMode = o.Kernel, o.strideOrKernel(), o.Padding, ones(o.Dilation), o.CeilMode
	return s
}

// AvgPool2dStage is the stage of AvgPool2d(x, o).
func AvgPool2dStage(o Pool2dOptions) Stage {
	s := stage(cgotorch.StageAvgPool2d, "avg_pool2d")
	s.c.Kernel, s.c.Stride, s.c.Padding, s.c.CeilMode, s.c.CountIncludePad = o.Kernel, o.strideOrKernel(), o.Padding, o.CeilMode, !o.ExcludePad
	return s
}

// AdaptiveAvgPool2dStage is the stage of AdaptiveAvgPool2d(x, outH, outW).
func AdaptiveAvgPool2dStage(outH, outW int64) Stage {
	s := stage(cgotorch.StageAdaptiveAvgPool2d, "adaptive_avg_pool2d")
	s.c.Kernel = [2]int64{outH, outW}
	return s
}

// BatchNormStageOptions are a batch-norm stage's tensors and settings: BatchNorm's
// arguments, and what nn's BatchNorm layers do around the call.
type BatchNormStageOptions struct {
	RunningMean, RunningVar *Tensor // nil: not tracked (batch statistics in both modes)
	Weight, Bias            *Tensor // nil: no affine transform
	Training                bool
	Momentum, Eps           float64
	// BatchesTracked, when not nil, is incremented by 1 in training before the call, as
	// nn.BatchNorm's num_batches_tracked (a fixed Momentum is used either way).
	BatchesTracked *Tensor
	// Ranks are the input ranks accepted (nil: any); another rank fails as nn's
	// BatchNorm1d and BatchNorm2d fail, with Name as the op.
	Ranks []int
	Name  string // the op in errors; default "batch_norm"
}

// BatchNormStage is the stage of BatchNorm(x, o.RunningMean, o.RunningVar, o.Weight,
// o.Bias, o.Training || o.RunningMean == nil, o.Momentum, o.Eps), with o's increment of
// BatchesTracked and check of Ranks.
func BatchNormStage(o BatchNormStageOptions) Stage {
	name := o.Name
	if name == "" {
		name = "batch_norm"
	}
	s := stage(cgotorch.StageBatchNorm, name)
	s.w, s.b, s.mean, s.vr, s.nb = o.Weight, o.Bias, o.RunningMean, o.RunningVar, o.BatchesTracked
	s.c.Training, s.c.Momentum, s.c.Eps = o.Training, o.Momentum, o.Eps
	s.c.InputDims = -1 >> 1 // every rank
	if o.Ranks != nil {
		s.c.InputDims = 0
		for _, r := range o.Ranks {
			if r < 0 || r > 62 {
				panic(&Error{Op: name, Msg: "input rank out of range"})
			}
			s.c.InputDims |= 1 << r
		}
	}
	return s
}

// DropoutStage is the stage of Dropout(x, p, training).
func DropoutStage(p float64, training bool) Stage {
	s := stage(cgotorch.StageDropout, "dropout")
	s.c.P, s.c.Training = p, training
	return s
}

// FlattenStage is the stage of x.Flatten(start, end).
func FlattenStage(start, end int64) Stage {
	s := stage(cgotorch.StageFlatten, "flatten")
	s.c.StartDim, s.c.EndDim = start, end
	return s
}

// ReLUStage is the stage of x.ReLU().
func ReLUStage() Stage { return stage(cgotorch.StageReLU, "relu") }

// LeakyReLUStage is the stage of x.LeakyReLU(slope).
func LeakyReLUStage(slope float64) Stage {
	s := stage(cgotorch.StageLeakyReLU, "leaky_relu")
	s.c.Slope = slope
	return s
}

// GELUStage is the stage of x.GELU(tanhApprox).
func GELUStage(tanhApprox bool) Stage {
	s := stage(cgotorch.StageGELU, "gelu")
	s.c.Tanh = tanhApprox
	return s
}

// SiLUStage is the stage of x.SiLU().
func SiLUStage() Stage { return stage(cgotorch.StageSiLU, "silu") }

// TanhStage is the stage of x.Tanh().
func TanhStage() Stage { return stage(cgotorch.StageTanh, "tanh") }

// SigmoidStage is the stage of x.Sigmoid().
func SigmoidStage() Stage { return stage(cgotorch.StageSigmoid, "sigmoid") }
