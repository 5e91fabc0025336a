package trainer

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/optim"
)

// WithOneCallStep says whether the Trainer may replay its training step as one call into
// libtorch (default on). The step runs eagerly — the same code as always, whatever the
// model, loss and step function — with its calls into libtorch recorded
// (torch.Replayer); once two recordings agree, the following steps replay the record in
// C++ instead of running the Go code, which saves the crossings and the Go code between
// them, a visible share of a small model's step. It does so when the optimizer is an
// optim.Stepper (its learning rate is read at every step, so schedulers work), there
// is one process, no AMP or accumulation, and no callback acts at BeforeBackward or
// BeforeOptimizerStep (see Subscriber), and the step can be replayed: a step that reads
// a value on the host or uses activation checkpointing runs eagerly
// (OneCallRefused says why). A replay makes the eager step's calls, with the same
// arguments and in the same order, so losses, weights, optimizer state, checkpoints and
// resumes are the same to the bit, and the events come at the same points.
func WithOneCallStep(on bool) Option { return func(t *Trainer) error { t.fuse = on; return nil } }

// DefaultStepsPerCall is WithStepsPerCall's default.
const DefaultStepsPerCall = 64

// runTime is the time a run of steps aims at: long enough that the call and the Go code
// between runs are a negligible share of it, short enough that a cancel is seen soon
// (a run is not interrupted). Each run's length follows from the last one's time per
// step, within [1, WithStepsPerCall's n].
const runTime = 20 * time.Millisecond

// WithStepsPerCall sets the most replayed steps (WithOneCallStep) the Trainer runs in
// one call into libtorch, over batches libtorch slices itself from a Resident loader's
// tensors (torch.Trace.RunBatches), which brings a small model's step to the speed of
// the same loop in C++. It does so only where nothing could tell: the loader is
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
// last epoch's) are replayed as one call into libtorch each (WithOneCallStep), once
// recorded: WithOneCallStep applies and the recorder did not refuse the last step.
func (t *Trainer) OneCallStep() bool { return t.oneCall != nil && t.oneCall.rep.Why() == "" }

// OneCallRefused says why the last training step ran eagerly although WithOneCallStep
// applies: the reason the recorder refused it ("item reads a value on the host"), or ""
// when it was replayed or is still being recorded.
func (t *Trainer) OneCallRefused() string {
	if t.oneCall == nil {
		return ""
	}
	return t.oneCall.rep.Why()
}

// oneCallStep is the state of an epoch whose steps are replayed: the traces of its step,
// recorded afresh each epoch, and the optimizer whose hyperparameters a replay takes.
type oneCallStep struct {
	rep  torch.Replayer
	opt  optim.Stepper
	args torch.OptimizerArgs
	// names are the batch's fields in the order of the trace's inputs, and inputs their
	// tensors.
	names  []string
	inputs []*torch.Tensor
	// runs is the most steps per call (WithStepsPerCall), 0 when the epoch's steps run
	// one per call; batches is the runs' buffer.
	runs    int
	batches torch.BatchRun
	next    int // the next run's length (runTime)
}

// planOneCall returns the epoch's one-call step, or nil when every step runs eagerly
// (WithOneCallStep says when). It runs at the start of each epoch, once the model is in
// training mode, and drops the last epoch's traces.
func (t *Trainer) planOneCall() *oneCallStep {
	if t.oneCall != nil {
		t.oneCall.rep.Free()
	}
	if !t.fuse || t.cfg.CUDAGraphs || t.cfg.Accumulation > 1 || t.Scaler.Enabled() {
		return nil
	}
	if _, ok := t.cfg.AMP.DType(); ok {
		return nil
	}
	if _, ok := t.strategy.(SingleProcess); !ok {
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
	f := &oneCallStep{opt: opt}
	perStep := t.Scheduler != nil && t.cfg.SchedulerInterval == PerStep
	if t.stepsPerCall > 1 && !perStep && !heard.Has(BatchEnd) && !heard.Has(AfterOptimizerStep) {
		f.runs = t.stepsPerCall
	}
	return f
}

// planRuns keeps the epoch's runs of steps (planOneCall) when its iterator can hand them
// out (data.Iter.Runs).
func (t *Trainer) planRuns(it *data.Iter) {
	if f := t.oneCall; f != nil && !it.Runs() {
		f.runs = 0
	}
}

// steps trains the next batch, or the next run of batches ending at the next logging
// point (WithStepsPerCall), and returns how many it trained; Trainer.step then finishes
// each of them as it does any step. A run fires none of the events before the optimizer
// step, and planOneCall made sure that nobody listens to those between a run's steps.
func (f *oneCallStep) steps(t *Trainer, it *data.Iter) (done int, err error) {
	if f.runs > 1 && f.rep.Ready() {
		if done, ok, err := f.run(t, it); ok {
			return done, err
		}
	}
	b, ok := it.Next()
	if !ok {
		return 0, nil
	}
	return 1, f.step(t, b)
}

// step trains one batch: replayed when its trace is ready, otherwise eagerly, by the
// code every eager step runs (zero_grad, forwardBackward, applyGradients), recorded.
func (f *oneCallStep) step(t *Trainer, b data.Batch) (err error) {
	defer stepError(&err, func() string { return fmt.Sprintf("epoch %d batch %d", t.Epoch+1, t.BatchInEpoch+1) }, b.Size)
	t.Batch = batchOn(t.Train, b, t.Device)
	f.bind(t.Batch)
	f.args = f.opt.StepArgs()
	outs, replayed := f.rep.Step(f.inputs, &f.args, t.GlobalStep+1, t.singleStep(b, &err))
	if err != nil {
		f.rep.Free() // what was recorded is not a whole step
		return err
	}
	if replayed {
		t.StepLoss = outs[0]
		t.epochStats.Batches++
		t.epochStats.Samples += int64(b.Size)
	}
	return nil
}

// bind makes the batch's fields the step's inputs, in the order of their names.
func (f *oneCallStep) bind(b data.Batch) {
	f.names = slices.Sorted(maps.Keys(b.Fields))
	f.inputs = f.inputs[:0]
	for _, n := range f.names {
		f.inputs = append(f.inputs, b.Fields[n])
	}
}

// run trains a run of up to f.runs whole batches that ends at the next logging point,
// replaying the last step's trace in one call (torch.Trace.RunBatches), lasting about
// runTime. ok is false when the iterator has no such run to hand out.
func (f *oneCallStep) run(t *Trainer, it *data.Iter) (done int, ok bool, err error) {
	n := min(max(f.next, 1), f.runs, t.progress.nextDue(t.BatchInEpoch)-t.BatchInEpoch)
	first, ok := it.NextRun(n, f.names, &f.batches)
	if !ok {
		return 0, false, nil
	}
	b := &f.batches
	began := time.Now()
	func() {
		defer stepError(&err, func() string { return fmt.Sprintf("epoch %d batch %d", t.Epoch+1, first+b.Done+1) },
			int(b.Sizes[min(b.Done, len(b.Sizes)-1)]))
		f.args = f.opt.StepArgs()
		t.StepLoss = f.rep.RunBatches(b, &f.args, t.GlobalStep+1)[0]
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
	return done, true, err
}
