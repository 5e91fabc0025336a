package torch

import (
	"fmt"

	"github.com/gotrain/gotrain/cgotorch"
)

// LossStage is a built-in loss waiting for its input and target: the loss a TrainStep
// computes after its stages, an ops.tab row marked loss. Make one with
// CrossEntropyStage, NLLLossStage, MSELossStage, L1LossStage, SmoothL1LossStage or
// BCEWithLogitsStage; the zero LossStage is not valid.
type LossStage struct{ stage }

// stage is Stage under a name that keeps it out of LossStage's exported fields.
type stage = Stage

func newLossStage(op cgotorch.StageOp, name string) LossStage {
	return LossStage{newStage(op, name)}
}

// CrossEntropyStage is the loss stage of CrossEntropy(out, target, o).
func CrossEntropyStage(o CrossEntropyOptions) LossStage {
	return crossEntropyStage(o.Weight, o.Reduction.at(), o.ignore(), o.LabelSmoothing)
}

// NLLLossStage is the loss stage of NLLLoss(out, target, o).
func NLLLossStage(o CrossEntropyOptions) LossStage {
	return nllLossStage(o.Weight, o.Reduction.at(), o.ignore())
}

// MSELossStage is the loss stage of MSELoss(out, target, r).
func MSELossStage(r Reduction) LossStage { return mseLossStage(r.at()) }

// L1LossStage is the loss stage of L1Loss(out, target, r).
func L1LossStage(r Reduction) LossStage { return l1LossStage(r.at()) }

// SmoothL1LossStage is the loss stage of SmoothL1Loss(out, target, r, beta).
func SmoothL1LossStage(r Reduction, beta float64) LossStage { return smoothL1LossStage(r.at(), beta) }

// BCEWithLogitsStage is the loss stage of BCEWithLogits(out, target, weight, posWeight,
// r); weight and posWeight may be nil.
func BCEWithLogitsStage(weight, posWeight *Tensor, r Reduction) LossStage {
	return bceWithLogitsStage(weight, posWeight, r.at())
}

// TrainStep is a whole training step in one call into libtorch:
//
//	ZeroGrads(params, true)                      // when Optimizer is set
//	out := Chain(x, Stages)
//	loss := <Loss>(out, y)                       // CrossEntropy, NLLLoss or MSELoss
//	Accumulate(Sums, {loss}, SumWeight, SumStep, SumFlags)   // when Sums is set
//	loss.Backward()
//	Optimizer.Step()                             // when Optimizer is set
//
// Each line is the same ATen calls, with the same arguments and in the same order, as
// the function it names, so the loss, the gradients, the parameters, the optimizer's
// state and any random draws (Dropout) are the ones the calls made one by one give, to
// the bit. What it saves is the crossings and the Go code between them, a visible share
// of a small model's step; the Trainer runs its default step this way when it can.
//
// A TrainStep keeps buffers from one Run to the next: reuse it, on one goroutine.
type TrainStep struct {
	Stages    []Stage
	Loss      LossStage
	Sums      *Tensor // nil: no running sum
	SumWeight float64
	SumStep   int64
	SumFlags  AccumulateFlags
	// Optimizer is the step's optimizer step (an optimizer's StepArgs); nil: the step
	// ends with the backward pass and does not zero the gradients first.
	Optimizer *OptimizerArgs

	c cgotorch.Step
}

// Run runs the step over input x and target y and returns the loss, a new tensor in the
// current scope. A part that fails panics with a *Error naming its op ("linear",
// "cross_entropy", "backward", "optimizer step", ...), as the function would; the
// optimizer's new state tensors are kept also then.
func (s *TrainStep) Run(x, y *Tensor) *Tensor {
	st, ps := s.prepare()
	r, phase, stage := s.c.Run(x.handle(), y.handle())
	return s.finish(r, phase, stage, st, ps)
}

// Batches is a run of batches for TrainStep.RunBatches, sliced from the whole inputs X
// and targets Y (rows along dimension 0): batch i is X.Narrow(0, Starts[i], Sizes[i])
// and the same rows of Y or, when Order is set (an int64 vector of row indices), the
// rows Order.Narrow(0, Starts[i], Sizes[i]) names (IndexSelect). It is how a resident
// data.Loader makes its batches.
type Batches struct {
	X, Y, Order   *Tensor
	Starts, Sizes []int64
	// Done is set by RunBatches to the number of steps that completed, also when one
	// fails (the failed one is batch Done).
	Done int
}

// RunBatches runs the step over each batch of b in turn, in one call into libtorch: the
// same ATen calls, in the same order, as slicing each batch and calling Run, so the
// losses, parameters, optimizer state and random draws are the same to the bit. The
// running sum (Sums) adds each batch's loss with the batch's rows as its weight, at step
// SumStep + i (SumWeight is not used). It returns the last step's loss, a new tensor in
// the current scope; the other losses are freed as their steps end. A failure panics as
// Run's does, after setting b.Done.
func (s *TrainStep) RunBatches(b *Batches) *Tensor {
	if b.X == nil || b.Y == nil {
		panic(&Error{Op: "train step", Msg: "batches: X and Y must both be set"})
	}
	if len(b.Starts) != len(b.Sizes) || len(b.Starts) == 0 {
		panic(&Error{Op: "train step", Msg: fmt.Sprintf("batches: %d starts and %d sizes; want the same number, at least one", len(b.Starts), len(b.Sizes))})
	}
	st, ps := s.prepare()
	cb := cgotorch.Batches{X: b.X.handle(), Y: b.Y.handle(), Order: opt(b.Order), Starts: b.Starts, Sizes: b.Sizes}
	r, done, phase, stage := s.c.RunBatches(&cb)
	b.Done = done
	return s.finish(r, phase, stage, st, ps)
}

// prepare lays the step out in C's layout for a run; the optimizer's buffers, when it has
// one, go back with finish.
func (s *TrainStep) prepare() (st, ps *[]cgotorch.Tensor) {
	if s.Loss.op == "" {
		panic(&Error{Op: "train step", Msg: "the loss is the zero LossStage; make it with CrossEntropyStage, NLLLossStage or MSELossStage"})
	}
	c := &s.c
	c.Reset()
	var ts [cgotorch.StageTensors]cgotorch.Tensor
	for i := range s.Stages {
		c.AddStage(s.Stages[i].resolve(&ts, "train step"), &ts)
	}
	c.SetLoss(s.Loss.resolve(&ts, "train step"), &ts)
	if s.Sums != nil {
		c.SetSums(s.Sums.handle(), s.SumWeight, s.SumStep, int(s.SumFlags))
	}
	if a := s.Optimizer; a != nil {
		st, ps = a.borrow()
		switch {
		case a.sgd != nil:
			c.SetSGD(a.sgd, a.groupSizes, *ps, *st)
		case a.adam != nil:
			c.SetAdam(a.adam, a.groupSizes, *ps, *st)
		case a.rmsprop != nil:
			c.SetRMSprop(a.rmsprop, a.groupSizes, *ps, *st)
		case a.adagrad != nil:
			c.SetAdagrad(a.adagrad, a.groupSizes, *ps, *st)
		}
	}
	return st, ps
}

// finish keeps the optimizer's new state, wraps the loss and panics with the failure.
func (s *TrainStep) finish(r cgotorch.Result, phase cgotorch.StepPhase, stage int, st, ps *[]cgotorch.Tensor) *Tensor {
	if st != nil {
		s.Optimizer.adopt(st, ps)
	}
	loss := wrapIn(r.T, r.Scope)
	if r.Err != nil {
		panic(opErr(s.failedOp(phase, stage), r.Err))
	}
	return loss
}

// failedOp names the op of the part that failed.
func (s *TrainStep) failedOp(phase cgotorch.StepPhase, stage int) string {
	switch phase {
	case cgotorch.PhaseZeroGrad:
		return "zero_grad"
	case cgotorch.PhaseForward:
		if stage >= 0 && stage < len(s.Stages) {
			return s.Stages[stage].op
		}
		return "chain"
	case cgotorch.PhaseLoss:
		return s.Loss.op
	case cgotorch.PhaseSums:
		return "accumulate"
	case cgotorch.PhaseBackward:
		return "backward"
	case cgotorch.PhaseOptimizer:
		return "optimizer step"
	case cgotorch.PhaseBatch:
		return "batch"
	}
	return "train step"
}
