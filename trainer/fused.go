package trainer

import (
	"fmt"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/optim"
)

// WithFusedStep says whether the Trainer may run its default training step as one call
// into libtorch (torch.TrainStep: zero_grad, forward, loss, the running loss sum,
// backward and the optimizer step), which it does (default on) when all of these hold:
//   - the training step is the default one (no WithTrainStep), over a loss that
//     nn.LossStageOf knows (*nn.CrossEntropyLoss, *nn.NLLLoss, *nn.MSELoss);
//   - the whole model is built-in layers that nn.Stages covers (a Sequential of them);
//   - the optimizer is one of package optim's (optim.Stepper);
//   - one process (SingleProcess), no AMP, no gradient clipping, no accumulation;
//   - no callback acts at BeforeBackward or BeforeOptimizerStep (a callback acts at the
//     events its Events method names, or at every event without one: see Subscriber).
//
// The fused step makes the same ATen calls in the same order as the step run call by
// call, so losses, weights, optimizer state, checkpoints and resumes are the same to the
// bit; what it saves is the crossings and the Go code between them, several percent of a
// small model's step. One thing differs: BatchEnd comes after the optimizer step, not
// before it (GlobalStep is still the step's own then, as before). Turn it off to compare,
// or for a callback that needs the parameters as they were before the step at BatchEnd.
func WithFusedStep(on bool) Option { return func(t *Trainer) error { t.fuse = on; return nil } }

// FusedStep reports whether the current epoch's training steps (or, between epochs, the
// last epoch's) run as one call into libtorch each (WithFusedStep).
func (t *Trainer) FusedStep() bool { return t.fused != nil }

// fusedStep is the state of a fused epoch: its step, built once per epoch, and the
// optimizer whose arguments it takes for every step.
type fusedStep struct {
	step torch.TrainStep
	opt  optim.Stepper
	args torch.OptimizerArgs
}

// planFused returns the epoch's fused step, or nil when the default step must run call
// by call (WithFusedStep says when). It runs at the start of each epoch, once the model
// is in training mode: the stages hold the layers' settings as they are then.
func (t *Trainer) planFused() *fusedStep {
	if !t.fuse || t.loss == nil || t.Config.Accumulation > 1 || t.Config.GradClip > 0 || t.Scaler.Enabled() {
		return nil
	}
	if _, ok := t.Config.AMP.DType(); ok {
		return nil
	}
	if _, ok := t.strategy.(SingleProcess); !ok {
		return nil
	}
	if len(t.trainSums.names) > 1 { // sums of metrics too: not a step of the loss alone
		return nil
	}
	for _, cb := range t.callbacks {
		if ev := eventsOf(cb); ev.Has(BeforeBackward) || ev.Has(BeforeOptimizerStep) {
			return nil
		}
	}
	opt, ok := t.Optimizer.(optim.Stepper)
	if !ok {
		return nil
	}
	loss, ok := nn.LossStageOf(t.loss)
	if !ok {
		return nil
	}
	stages, ok := nn.Stages(t.Model)
	if !ok {
		return nil
	}
	f := &fusedStep{opt: opt}
	f.step = torch.TrainStep{Stages: stages, Loss: loss, SumFlags: torch.AccumulateTrack}
	return f
}

// stepFused trains one batch with the fused step: the Trainer's step for a window of one
// micro-batch, with the same bookkeeping and events (less the two nobody listens to).
func (t *Trainer) stepFused(it *data.Iter) (stepped bool, err error) {
	b, ok := it.Next()
	if !ok {
		return false, nil
	}
	if err := t.runFused(b); err != nil {
		return false, err
	}
	t.BatchInEpoch++
	if t.progress.due(t.BatchInEpoch) {
		if err := t.logPoint(); err != nil {
			return false, err
		}
	}
	err = t.fire(BatchEnd)
	t.LogPoint = false
	if err != nil {
		return false, err
	}
	return true, t.stepped(true)
}

func (t *Trainer) runFused(b data.Batch) (err error) {
	defer stepError(&err, func() string { return fmt.Sprintf("epoch %d batch %d", t.Epoch+1, t.BatchInEpoch+1) }, b.Size)
	t.Batch = batchOn(t.Train, b, t.Device)
	f := t.fused
	f.args = f.opt.StepArgs()
	s := &f.step
	s.Optimizer = &f.args
	s.Sums = t.trainSums.lossOnly()
	s.SumWeight, s.SumStep = float64(b.Size), t.GlobalStep+1
	t.StepLoss = s.Run(batchInput(t.Batch), batchTarget(t.Batch))
	t.epochStats.Batches++
	t.epochStats.Samples += int64(b.Size)
	return nil
}
