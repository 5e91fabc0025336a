package torch

import "github.com/gotrain/gotrain/cgotorch"

// Stage is one layer of a Chain: the op of one of this package's layer functions with its
// weights and settings bound, waiting for its input. Make stages with the *Stage
// functions (generated from ops.tab's rows marked stage, with hand-written ones here
// for layers whose Go options need converting); the zero Stage is not valid.
//
// A Stage holds the tensors it reads and resolves them when the chain runs, so it may be
// built once and run many times, and it sees a tensor's new data after SetData.
type Stage struct {
	c  cgotorch.Stage
	op string
	t  [cgotorch.StageTensors]*Tensor
	ni int // the ints stored so far
}

// Chain is x through the stages in order, computed in one libtorch call: each stage runs
// the ATen expression of its op's ops.tab row, the one its layer function runs
// (LinearStage what Linear runs, and so on), so the result, its autograd graph, any
// random draws (Dropout) and in-place updates (BatchNorm's running statistics) are the
// ones the functions called one by one give, to the bit. Only the result gets a Tensor;
// the intermediate outputs stay in libtorch, where autograd keeps what backward needs.
// nn.Sequential runs its built-in layers this way: for a small model each op's boundary
// crossing is a visible part of a step.
//
// A stage that fails panics with a *Error naming its op, as the function would.
func Chain(x *Tensor, stages []Stage) *Tensor {
	if len(stages) == 0 {
		return x
	}
	c := cgotorch.NewChain() // a panic below leaves it to the garbage collector
	var ts [cgotorch.StageTensors]cgotorch.Tensor
	for i := range stages {
		c.Add(stages[i].resolve(&ts, "chain"), &ts)
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

// resolve writes the stage's tensors' handles into ts (0: none) and returns its
// arguments; the zero Stage panics, naming op, the caller.
func (s *Stage) resolve(ts *[cgotorch.StageTensors]cgotorch.Tensor, op string) *cgotorch.Stage {
	if s.op == "" {
		panic(&Error{Op: op, Msg: "stage is the zero Stage; make stages with the *Stage functions"})
	}
	for i, t := range s.t {
		ts[i] = opt(t)
	}
	return &s.c
}

func newStage(op cgotorch.StageOp, name string) Stage {
	return Stage{c: cgotorch.Stage{Op: op}, op: name}
}

// putInts, putBool and putList store int arguments in order, as cg_stage reads them.
func (s *Stage) putInts(vs ...int64) {
	if s.ni+len(vs) > len(s.c.Ints) {
		panic(&Error{Op: s.op, Msg: "the stage's int arguments do not fit in cg_stage"})
	}
	s.ni += copy(s.c.Ints[s.ni:], vs)
}

func (s *Stage) putBool(b bool) {
	v := int64(0)
	if b {
		v = 1
	}
	s.putInts(v)
}

func (s *Stage) putList(vs []int64) {
	s.putInts(int64(len(vs)))
	s.putInts(vs...)
}

// Conv2dStage is the stage of Conv2d(x, w, b, o) (b may be nil).
func Conv2dStage(w, b *Tensor, o Conv2dOptions) Stage {
	st, dl := ones(o.Stride), ones(o.Dilation)
	return conv2dStage(w, b, st[:], o.Padding[:], dl[:], o.groups())
}

// MaxPool2dStage is the stage of MaxPool2d(x, o).
func MaxPool2dStage(o Pool2dOptions) Stage {
	st, dl := o.strideOrKernel(), ones(o.Dilation)
	return maxPool2dStage(o.Kernel[:], st[:], o.Padding[:], dl[:], o.CeilMode)
}

// AvgPool2dStage is the stage of AvgPool2d(x, o).
func AvgPool2dStage(o Pool2dOptions) Stage {
	st := o.strideOrKernel()
	return avgPool2dStage(o.Kernel[:], st[:], o.Padding[:], o.CeilMode, !o.ExcludePad)
}

// AdaptiveAvgPool2dStage is the stage of AdaptiveAvgPool2d(x, outH, outW).
func AdaptiveAvgPool2dStage(outH, outW int64) Stage {
	return adaptiveAvgPool2dStage([]int64{outH, outW})
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
// BatchesTracked and check of Ranks (ops.tab's batchNormCounted).
func BatchNormStage(o BatchNormStageOptions) Stage {
	ranks := int64(-1) >> 1 // every rank
	if o.Ranks != nil {
		ranks = 0
		for _, r := range o.Ranks {
			if r < 0 || r > 62 {
				panic(&Error{Op: o.Name, Msg: "input rank out of range"})
			}
			ranks |= 1 << r
		}
	}
	s := batchNormCountedStage(o.Weight, o.Bias, o.RunningMean, o.RunningVar, o.BatchesTracked, ranks, o.Training, o.Momentum, o.Eps)
	if o.Name != "" {
		s.op = o.Name
	}
	return s
}
