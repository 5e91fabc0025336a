package trainer

import (
	"fmt"
	"time"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/optim"
)

// WithOneCallStep says whether the Trainer may run its default training step as one call
// into libtorch (torch.TrainStep: zero_grad, forward, loss, the running loss sum,
// backward and the optimizer step); it does (default on) when the training step is the
// default one over a loss nn.LossStageOf knows, the model is built-in layers nn.Stages
// covers, the optimizer is an optim.Stepper, and there is one process, no AMP, clipping
// or accumulation, and no callback acting at BeforeBackward or BeforeOptimizerStep (see
// Subscriber). The calls and their order are the step's own, so losses, weights,
// optimizer state, checkpoints and resumes are the same to the bit, and the events come
// at the same points; what it saves is the crossings, several percent of a small
// model's step.
func WithOneCallStep(on bool) Option { return func(t *Trainer) error { t.fuse = on; return nil } }

// DefaultStepsPerCall is WithStepsPerCall's default.
const DefaultStepsPerCall = 64

// runTime is the time a run of steps aims at: long enough that the call and the Go code
// between runs are a negligible share of it, short enough that a cancel is seen soon
// (a run is not interrupted). Each run's length follows from the last one's time per
// step, within [1, WithStepsPerCall's n].
const runTime = 20 * time.Millisecond

// WithStepsPerCall sets the most one-call steps (WithOneCallStep) the Trainer runs in
// one call into libtorch, over batches libtorch slices itself from a Resident loader's
// tensors (torch.TrainStep.RunBatches), which brings a small model's step to the speed
// of the same loop in C++. It does so only where nothing could tell: the loader is
// Resident without OnDevice, no callback acts at BatchEnd or AfterOptimizerStep, and no
// scheduler steps PerStep. A run ends at every logging point (Config.LogEvery), so the
// progress, metrics and NaN check are read at the same batches, and lasts about 20 ms
// of steps (from the last run's time per step), so a cancel is seen as soon as before.
// Results are the same to the bit wherever runs end. n < 2 runs each step in its own
// call; the default is DefaultStepsPerCall.
func WithStepsPerCall(n int) Option {
	return func(t *Trainer) error { t.stepsPerCall = max(n, 1); return nil }
}

// StepsPerCall reports the most training steps the current epoch (or, between epochs,
// the last one) runs per call into libtorch: 1 unless its steps run in runs
// (WithStepsPerCall).
func (t *Trainer) StepsPerCall() int {
	if t.oneCall == nil || t.oneCall.runs < 2 {
		return 1
	}
	return t.oneCall.runs
}

// OneCallStep reports whether the current epoch's training steps (or, between epochs, the
// last epoch's) run as one call into libtorch each (WithOneCallStep).
func (t *Trainer) OneCallStep() bool { return t.oneCall != nil }

// oneCallStep is the state of a one-call epoch: its step, built once per epoch, and the
// optimizer whose arguments it takes for every step.
type oneCallStep struct {
	step torch.TrainStep
	opt  optim.Stepper
	args torch.OptimizerArgs
	// runs is the most steps per call (WithStepsPerCall), 0 when the epoch's steps run
	// one per call; target is the field the loss compares with, and batches the runs'
	// buffer.
	runs    int
	target  string
	batches torch.Batches
	next    int // the next run's length (runTime)
}

// planOneCall returns the epoch's one-call step, or nil when the default step must run call
// by call (WithOneCallStep says when). It runs at the start of each epoch, once the model
// is in training mode: the stages hold the layers' settings as they are then.
func (t *Trainer) planOneCall() *oneCallStep {
	if !t.fuse || t.loss == nil || t.cfg.Accumulation > 1 || t.cfg.GradClip > 0 || t.Scaler.Enabled() {
		return nil
	}
	if _, ok := t.cfg.AMP.DType(); ok {
		return nil
	}
	if _, ok := t.strategy.(SingleProcess); !ok {
		return nil
	}
	if len(t.trainSums.names) > 1 { // sums of metrics too: not a step of the loss alone
		return nil
	}
	var heard EventSet // the events some callback acts at
	for _, cb := range t.callbacks {
		heard |= eventsOf(cb)
	}
	if heard.Has(BeforeBackward) || heard.Has(BeforeOptimizerStep) {
		return nil
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
	f := &oneCallStep{opt: opt}
	f.step = torch.TrainStep{Stages: stages, Loss: loss, SumFlags: torch.AccumulateTrack}
	perStep := t.Scheduler != nil && t.cfg.SchedulerInterval == PerStep
	if t.stepsPerCall > 1 && !perStep && !heard.Has(BatchEnd) && !heard.Has(AfterOptimizerStep) {
		f.runs = t.stepsPerCall
	}
	return f
}

// planRuns keeps the epoch's runs of steps (planOneCall) when its iterator can hand them
// out (data.Iter.Runs).
func (t *Trainer) planRuns(it *data.Iter) {
	f := t.oneCall
	if f == nil || f.runs == 0 {
		return
	}
	f.target = data.Label
	if !it.Runs(data.Input, f.target) {
		f.target = data.Target
	}
	if !it.Runs(data.Input, f.target) {
		f.runs = 0
	}
}

// steps trains the next batch, or the next run of batches ending at the next logging
// point (WithStepsPerCall), each a whole optimizer step in one call into libtorch, and
// returns how many it trained; Trainer.step then finishes each of them as it does any
// step. A run fires none of the events before the optimizer step, and planOneCall made
// sure that nobody listens to those between a run's steps.
func (f *oneCallStep) steps(t *Trainer, it *data.Iter) (done int, err error) {
	if f.runs > 1 {
		return f.run(t, it)
	}
	b, ok := it.Next()
	if !ok {
		return 0, nil
	}
	defer stepError(&err, func() string { return fmt.Sprintf("epoch %d batch %d", t.Epoch+1, t.BatchInEpoch+1) }, b.Size)
	t.Batch = batchOn(t.Train, b, t.Device)
	s := f.prepare(t)
	s.SumWeight = float64(b.Size)
	t.StepLoss = s.Run(batchInput(t.Batch), batchTarget(t.Batch))
	t.epochStats.Batches++
	t.epochStats.Samples += int64(b.Size)
	return 1, nil
}

// run trains a run of up to f.runs batches that ends at the next logging point, in one
// call (torch.TrainStep.RunBatches), lasting about runTime.
func (f *oneCallStep) run(t *Trainer, it *data.Iter) (done int, err error) {
	n := min(max(f.next, 1), f.runs, t.progress.nextDue(t.BatchInEpoch)-t.BatchInEpoch)
	first, ok := it.NextRun(n, data.Input, f.target, &f.batches)
	if !ok {
		return 0, nil
	}
	b := &f.batches
	began := time.Now()
	func() {
		defer stepError(&err, func() string { return fmt.Sprintf("epoch %d batch %d", t.Epoch+1, first+b.Done+1) },
			int(b.Sizes[min(b.Done, len(b.Sizes)-1)]))
		t.StepLoss = f.prepare(t).RunBatches(b)
	}()
	done = b.Done
	if took := time.Since(began); done > 0 {
		f.next = int(min(int64(f.runs), int64(runTime)*int64(done)/max(int64(took), 1)))
		t.Batch = data.Batch{Index: first + done - 1, Size: int(b.Sizes[done-1])}
	}
	for _, size := range b.Sizes[:done] {
		t.epochStats.Samples += size
	}
	t.epochStats.Batches += done
	return done, err
}

// prepare readies the step for the next call: the optimizer's arguments as they are
// now (its LR), the loss sum and the global step it counts from.
func (f *oneCallStep) prepare(t *Trainer) *torch.TrainStep {
	f.args = f.opt.StepArgs()
	f.step.Optimizer, f.step.Sums, f.step.SumStep = &f.args, t.trainSums.lossOnly(), t.GlobalStep+1
	return &f.step
}
