package trainer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/distributed"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/optim"
)

// epochStats accumulates one epoch's training statistics in Go (the steps' sums stay on
// the device until a read); it is saved in mid-epoch checkpoints so a resumed epoch
// reports the same averages.
type epochStats struct {
	Sums        map[string]float64 `json:"sums"` // the steps' sums as of the last read (loss, metrics)
	Batches     int                `json:"batches"`
	Samples     int64              `json:"samples"`
	GradNormSum float64            `json:"grad_norm_sum"`
	Steps       int                `json:"steps"`
	Skipped     int                `json:"skipped"`
	Elapsed     float64            `json:"elapsed"`
	Wait        float64            `json:"wait"`
}

func (t *Trainer) runEpoch(ctx context.Context, target int) error {
	epoch := t.Epoch // 0-based index of the epoch being trained
	start := t.BatchInEpoch
	if start == 0 {
		t.epochStats = epochStats{}
		t.trainSums.free()
		t.normSums.free()
	}
	if err := t.fire(EpochBegin); err != nil {
		return err
	}
	began := time.Now()
	nn.SetTraining(t.Model, true)
	t.oneCall = t.planOneCall()
	t.graphs = t.planGraphs()
	// The iterator gets its own context: a cancel is seen between optimizer steps (below),
	// so a step and its accumulation window always complete before the state is saved.
	it := t.Train.Iter(context.Background(), epoch, start)
	defer it.Close()
	t.planRuns(it)
	nBatches := t.Train.Len()
	t.progress = newProgress(t.Out, epoch+1, target, nBatches, t.cfg.LogEvery)
	k := t.cfg.Accumulation
	windowStart := start - start%k
	var waited time.Duration
	// times moves the time since began into the epoch's statistics (validation at an
	// evaluation point is not training time: began restarts after it).
	times := func() {
		t.epochStats.Elapsed += time.Since(began).Seconds()
		w := it.WaitTime()
		t.epochStats.Wait += (w - waited).Seconds()
		waited = w
	}
	// Each step's tensors are freed when it ends: the steps share one scope, renewed
	// after each (one call instead of a close and an open).
	scope := torch.NewScope()
	defer func() { scope.Close() }()
	for {
		cause, err := t.strategy.Interrupted(ctx)
		if err != nil {
			return fmt.Errorf("epoch %d batch %d: %w", t.Epoch+1, t.BatchInEpoch, err)
		}
		if cause != nil {
			scope.Close()
			times()
			return t.interrupted(cause)
		}
		// A window of k micro-batches is one optimizer step; the last window of an
		// epoch may be shorter (it still steps, as Lightning and Accelerate do).
		windowEnd := min(windowStart+k, nBatches)
		stepped, err := t.step(it, windowEnd-t.BatchInEpoch, k)
		scope = scope.Renew()
		if err != nil {
			return err
		}
		if !stepped {
			break
		}
		windowStart = windowEnd
		end, err := t.stepPoints(t.BatchInEpoch >= nBatches, times)
		if err != nil {
			return err
		}
		if end {
			// The budget is spent, or a stop was agreed at an evaluation: the run ends
			// here, mid-epoch, where a later Run goes on.
			t.progress.done()
			return nil
		}
		began = time.Now()
		if t.BatchInEpoch >= nBatches {
			break
		}
	}
	scope.Close()
	if err := it.Err(); err != nil {
		return fmt.Errorf("epoch %d: data: %w", epoch+1, err)
	}
	times()
	t.progress.done()
	return t.finishEpoch()
}

// step runs one optimizer step, a window of up to n micro-batches, inside runEpoch's
// scope (renewed after it); it returns false when the epoch's data ran out before any
// batch. It is the one routine every training step goes through, whatever executes its
// tensor work, in PyTorch's order:
//
//	zero_grad, at a window's start
//	for each micro-batch: the step (forward, loss, sums), BeforeBackward, scaled backward
//	gradient reduction, unscale, clip, BeforeOptimizerStep, scaler step and update
//	the per-step scheduler, GlobalStep, AfterOptimizerStep       (finishStep)
//	the logging point, BatchEnd, Logged                          (endBatch)
//
// A one-call engine (WithOneCallStep) executes the first three lines in libtorch, one
// call per step or per run of steps, and a CUDA graph (WithCUDAGraphs) replays them;
// their steps then take the last two lines here, one step at a time, as eager steps
// do. Each micro-batch's BatchEnd fires once the next one has arrived, and the last
// one's after the optimizer step, so BatchEnd always follows the optimizer step of the
// batch that completes a window (Lightning's on_train_batch_end).
func (t *Trainer) step(it *data.Iter, n, k int) (bool, error) {
	if t.oneCall != nil || t.graphs != nil {
		steps := t.oneCall.steps
		if t.graphs != nil {
			steps = t.graphs.step
		}
		done, err := steps(t, it)
		if err != nil || done == 0 {
			return false, err
		}
		for range done {
			t.BatchInEpoch++
			if err := t.finishStep(true); err != nil {
				return false, err
			}
		}
		return true, nil
	}
	if t.BatchInEpoch%k == 0 {
		t.Optimizer.ZeroGrad(true)
	}
	got := 0
	var items *torch.Tensor // the window's NumItems, when the step counts them
	for got < n {
		b, ok := it.Next()
		if !ok {
			break
		}
		if got > 0 {
			if err := t.endBatch(); err != nil {
				return false, err
			}
		}
		if err := t.forwardBackward(b, k, &items); err != nil {
			return false, err
		}
		got++
		t.BatchInEpoch++
	}
	if got == 0 {
		return false, nil
	}
	stepped, err := t.applyGradients(items)
	if err != nil {
		return false, err
	}
	return true, t.finishStep(stepped)
}

// singleStep returns the tensor work of a one-batch window, the code of every eager step
// (zero_grad, forwardBackward, applyGradients), for the one-call step to record and the
// CUDA graphs to capture: it returns the loss, or nil with the error in *errp.
func (t *Trainer) singleStep(b data.Batch, errp *error) func() []*torch.Tensor {
	return func() []*torch.Tensor {
		t.Optimizer.ZeroGrad(true)
		var items *torch.Tensor
		if *errp = t.forwardBackward(b, 1, &items); *errp != nil {
			return nil
		}
		if _, *errp = t.applyGradients(items); *errp != nil {
			return nil
		}
		return []*torch.Tensor{t.StepLoss}
	}
}

// finishStep counts an optimizer step, or a skipped one, and runs what follows it in
// every step: the per-step scheduler, GlobalStep, AfterOptimizerStep, then endBatch.
func (t *Trainer) finishStep(stepped bool) error {
	if !stepped {
		t.epochStats.Skipped++
	}
	if stepped && t.Scheduler != nil && t.cfg.SchedulerInterval == PerStep {
		t.Scheduler.Step()
	}
	t.GlobalStep++
	t.epochStats.Steps++
	if err := t.fire(AfterOptimizerStep); err != nil {
		return err
	}
	return t.endBatch()
}

// endBatch is the bookkeeping after each batch: the logging point when one is due (the
// progress line, the metrics read, the NaN check), then BatchEnd and, at a logging
// point, Logged.
func (t *Trainer) endBatch() error {
	if t.progress.due(t.BatchInEpoch) {
		if err := t.logPoint(); err != nil {
			return err
		}
	}
	return t.fireBatchEnd()
}

// stepError turns a *torch.Error panic in a step into an error naming where it
// happened; any other panic is re-raised where it stands, so that its stack (a nil
// dereference in the user's Forward) is the one printed.
func stepError(errp *error, where func() string, batchSize int) {
	r := recover()
	if r == nil {
		return
	}
	var te *torch.Error
	e, ok := r.(error)
	if !ok || !errors.As(e, &te) {
		panic(r)
	}
	if errors.Is(e, torch.ErrOutOfMemory) {
		*errp = fmt.Errorf("out of memory at %s with batch size %d: use a smaller batch size, gradient accumulation (--accumulation) to keep the effective batch, or AMP (--amp bf16/fp16): %w",
			where(), batchSize, e)
		return
	}
	*errp = fmt.Errorf("%s: %w", where(), e)
}

// forwardBackward runs one micro-batch of a window of k: the step, its sums,
// BeforeBackward and the scaled backward of loss/k. A step that counts its items
// (NumItems) returns a sum over them instead: its backward is of the sum, and the
// window's count is added to *items for applyGradients to divide by.
func (t *Trainer) forwardBackward(b data.Batch, k int, items **torch.Tensor) (err error) {
	defer stepError(&err, func() string { return fmt.Sprintf("epoch %d batch %d", t.Epoch+1, t.BatchInEpoch+1) }, b.Size)
	t.Batch = batchOn(t.Train, b, t.Device)
	loss, ms := t.runStep(t.trainStep, t.Batch)
	n, ms := splitItems(ms)
	t.StepLoss = t.addSums(t.trainSums, loss, n, ms, b.Size, t.GlobalStep+1)
	t.epochStats.Batches++
	t.epochStats.Samples += int64(b.Size)
	if err := t.fire(BeforeBackward); err != nil {
		return err
	}
	switch {
	case n != nil && *items == nil:
		*items = n.ToDType(torch.Float64)
	case n != nil:
		*items = (*items).Add(n.ToDType(torch.Float64))
	case k > 1:
		loss = loss.DivScalar(float64(k))
	}
	t.Scaler.ScaleLoss(loss).Backward()
	if f, ok := t.strategy.(*FullyShardedDataParallel); ok {
		return f.afterBackward()
	}
	return nil
}

// fireBatchEnd fires BatchEnd and, at a logging point, Logged.
func (t *Trainer) fireBatchEnd() error {
	defer func() { t.LogPoint = false }()
	if err := t.fire(BatchEnd); err != nil || !t.LogPoint {
		return err
	}
	return t.fire(Logged)
}

// logPoint reads the training sums from the device: the progress line, LastLoss,
// TrainMetrics and the NaN check.
func (t *Trainer) logPoint() error {
	r, err := t.readSums(fmt.Sprintf("epoch %d, read at batch %d", t.Epoch+1, t.BatchInEpoch))
	if err != nil {
		return err
	}
	t.LastLoss = r.Last
	t.LogPoint = true
	t.TrainMetrics = means("train_", t.epochStats.Sums, float64(t.epochStats.Samples))
	t.progress.update(t.BatchInEpoch, t.TrainMetrics["train_loss"])
	return nil
}

// readSums reads the training sums and the gradient norms' sum from the device into
// the epoch's statistics, and stops on a loss that was not finite (TerminateOnNaN).
func (t *Trainer) readSums(where string) (sumsRead, error) {
	r := t.trainSums.read()
	t.epochStats.Sums = r.Sums
	if t.cfg.GradClip > 0 {
		t.epochStats.GradNormSum = t.normSums.read().Sums[gradNormKey]
	}
	if t.terminateNaN && r.FirstBad > 0 {
		return r, fmt.Errorf("training loss is not finite (%v) from global step %d on (%s): stopping (TerminateOnNaN); lower the learning rate, clip gradients, or check the data",
			r.Last, r.FirstBad, where)
	}
	return r, nil
}

// means divides sums by n and names them with prefix; a loss over counted items
// (NumItems) is their sum divided by their number instead.
func means(prefix string, sums map[string]float64, n float64) map[string]float64 {
	out := make(map[string]float64, len(sums))
	for k, v := range sums {
		out[prefix+k] = v / max(n, 1)
	}
	if items, ok := sums[NumItems]; ok {
		out[prefix+"loss"] = sums[lossSumKey] / max(items, 1)
		delete(out, prefix+NumItems)
		delete(out, prefix+lossSumKey)
	}
	return out
}

// gradNormKey is the clipped gradients' norm sum in normSums.
const gradNormKey = "grad_norm"

// applyGradients runs a window's optimizer step on its accumulated gradients:
// reduction across processes, unscale, clip, BeforeOptimizerStep, the scaler's step
// (skipped on inf/NaN gradients) and update. It reports whether the optimizer stepped.
//
// With counted items the gradients are sums over the window's items; they become the
// gradient of one batch holding every item of the window on every process
// (transformers' num_items_in_batch): averaged over the W processes, then times
// W/items, where items is summed over the processes on the device (no host read).
func (t *Trainer) applyGradients(items *torch.Tensor) (bool, error) {
	if err := t.strategy.ReduceGradients(t.params); err != nil {
		return false, fmt.Errorf("epoch %d batch %d: %w", t.Epoch+1, t.BatchInEpoch, err)
	}
	if items != nil {
		if err := t.strategy.SumTensors([]*torch.Tensor{items}); err != nil {
			return false, fmt.Errorf("epoch %d batch %d: summing the items: %w", t.Epoch+1, t.BatchInEpoch, err)
		}
		// A window without items (every label masked) has zero gradients: 1 keeps them so.
		scale := items.Clamp(1, math.Inf(1)).Reciprocal().MulScalar(float64(t.strategy.WorldSize())).ToDType(torch.Float32)
		for _, p := range t.params {
			if g := p.Grad(); g != nil {
				g.MulInPlace(scale)
			}
		}
	}
	if err := t.Scaler.Unscale(t.Optimizer); err != nil {
		return false, err
	}
	if t.cfg.GradClip > 0 {
		// The norm stays on the device (no host read per step); non-finite norms are
		// left out of the epoch's average.
		var norm *torch.Tensor
		if f, ok := t.strategy.(*FullyShardedDataParallel); ok {
			var err error
			if norm, err = f.clipGradNorm(t.params, t.cfg.GradClip, t.Device); err != nil {
				return false, fmt.Errorf("epoch %d batch %d: %w", t.Epoch+1, t.BatchInEpoch, err)
			}
		} else {
			norm = optim.ClipGradNormTensor(t.params, t.cfg.GradClip, 2)
		}
		t.normSums.addFinite(gradNormKey, norm)
	}
	if err := t.fire(BeforeOptimizerStep); err != nil {
		return false, err
	}
	stepped, err := t.Scaler.Step(t.Optimizer)
	if err != nil {
		return false, err
	}
	if f, ok := t.strategy.(*FullyShardedDataParallel); ok && stepped {
		// The model's full parameters take the updated shards.
		if err := f.gather(); err != nil {
			return false, fmt.Errorf("epoch %d batch %d: %w", t.Epoch+1, t.BatchInEpoch, err)
		}
	}
	return stepped, t.Scaler.Update()
}

// globalStats returns the epoch's statistics over all processes: counts and sums added
// up, times the slowest process's. Gradients are averaged before clipping, so every
// process saw the same norms and steps: those sums are divided back.
func (t *Trainer) globalStats(st epochStats) (epochStats, error) {
	h, sums, err := t.sumNamed([]float64{float64(st.Batches), float64(st.Samples), st.GradNormSum, float64(st.Steps), float64(st.Skipped)}, st.Sums)
	maxes, err2 := t.strategy.AllReduce([]float64{st.Elapsed, st.Wait}, distributed.Max)
	if err = firstErr(err, err2); err != nil {
		return st, fmt.Errorf("epoch %d: reducing training metrics: %w", t.Epoch+1, err)
	}
	w := float64(t.strategy.WorldSize())
	return epochStats{Batches: int(h[0]), Samples: int64(h[1]), GradNormSum: h[2] / w, Steps: int(math.Round(h[3] / w)),
		Skipped: int(math.Round(h[4] / w)), Elapsed: maxes[0], Wait: maxes[1], Sums: sums}, nil
}

// sumNamed adds up head and the named sums over the processes.
func (t *Trainer) sumNamed(head []float64, sums map[string]float64) ([]float64, map[string]float64, error) {
	names := sortedKeys(sums)
	vs := slices.Clone(head)
	for _, n := range names {
		vs = append(vs, sums[n])
	}
	out, err := t.strategy.AllReduce(vs, distributed.Sum)
	if err != nil {
		return nil, nil, err
	}
	total := make(map[string]float64, len(names))
	for i, n := range names {
		total[n] = out[len(head)+i]
	}
	return out, total, nil
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// interrupted saves last.pt after a stop between steps. The epoch's running statistics
// become the job's (summed over processes), so the main process's checkpoint holds the
// whole job's progress; a resume gives them back to the main process alone.
func (t *Trainer) interrupted(cause error) error {
	where := fmt.Sprintf("epoch %d, batch %d of %d (global step %d)", t.Epoch+1, t.BatchInEpoch, t.Train.Len(), t.GlobalStep)
	t.readSums("") // a loss that was not finite is found by the resumed run
	st, err := t.globalStats(t.epochStats)
	if err != nil {
		return fmt.Errorf("interrupted at %s: %w; %v", where, cause, err)
	}
	t.epochStats = st
	dir := t.checkpointsDir() // under sharding, every rank writes its shards
	if !t.IsMain() && dir == "" {
		return &InterruptedError{Cause: cause, Checkpoint: "rank 0's run directory", Where: where}
	}
	if dir == "" {
		return fmt.Errorf("interrupted at %s: %w (no run directory, nothing saved)", where, cause)
	}
	path := filepath.Join(dir, "last.pt")
	if err := t.saveCheckpointIn(filepath.Dir(path), "last.pt"); err != nil {
		return fmt.Errorf("interrupted at %s: %w; saving %s failed: %v", where, cause, path, err)
	}
	return &InterruptedError{Cause: cause, Checkpoint: path, Where: where}
}

// stepPoints runs what the step budget puts after an optimizer step: an evaluation
// every Config.EvalEvery steps and at Config.MaxSteps, and last.pt every
// Config.SaveEvery steps. It reports whether the run ends at this step: MaxSteps is
// reached, or a stop was agreed at its evaluation. epochEnd says the step was the
// epoch's last, whose evaluation, when epochs are the evaluation points, is
// finishEpoch's. times books the training time up to the evaluation.
func (t *Trainer) stepPoints(epochEnd bool, times func()) (end bool, err error) {
	s := t.GlobalStep
	last := t.budgetSpent()
	evaluated := false
	if (t.cfg.EvalEvery > 0 && s%int64(t.cfg.EvalEvery) == 0) || (last && (t.cfg.EvalEvery > 0 || !epochEnd)) {
		times()
		if err := t.evaluate(); err != nil {
			return false, err
		}
		evaluated = true
	}
	// At an evaluation the run directory's ModelCheckpoint has written last.pt already.
	if dir := t.checkpointsDir(); t.cfg.SaveEvery > 0 && s%int64(t.cfg.SaveEvery) == 0 && !evaluated && dir != "" {
		if err := t.saveCheckpointIn(dir, "last.pt"); err != nil {
			return false, fmt.Errorf("saving at step %d: %w", s, err)
		}
	}
	if last && epochEnd && t.cfg.EvalEvery == 0 {
		return false, nil // finishEpoch evaluates, and RunTo ends the run
	}
	return last || (evaluated && t.stopReason != ""), nil
}

// evaluate is an evaluation point inside an epoch (Config.EvalEvery, Config.MaxSteps):
// the training metrics of the epoch so far, validation, a Record with the step, and
// Evaluated; the epoch goes on.
func (t *Trainer) evaluate() error {
	rec, err := t.evalRecord()
	if err != nil {
		return err
	}
	if err := t.addRecord(rec); err != nil {
		return err
	}
	return t.agreeToStop()
}

// finishEpoch ends an epoch: when epochs are the evaluation points (no
// Config.EvalEvery), its Record and Evaluated; the per-epoch scheduler; EpochEnd.
func (t *Trainer) finishEpoch() error {
	var rec *Record
	if t.cfg.EvalEvery == 0 {
		r, err := t.evalRecord()
		if err != nil {
			return err
		}
		rec = &r
	}
	if _, ok := t.Scheduler.(optim.MetricScheduler); !ok && t.Scheduler != nil && t.cfg.SchedulerInterval == PerEpoch {
		t.Scheduler.Step()
	}
	t.Epoch++
	t.BatchInEpoch = 0
	if rec != nil {
		// The epoch is counted before Evaluated, so that its checkpoint resumes at the
		// next epoch.
		rec.Epoch = t.Epoch
		if err := t.addRecord(*rec); err != nil {
			return err
		}
	}
	if err := t.fire(EpochEnd); err != nil {
		return err
	}
	return t.agreeToStop()
}

// evalRecord reads the training metrics of the epoch so far (summed over the processes),
// validates, and returns the Record of this evaluation point.
func (t *Trainer) evalRecord() (Record, error) {
	if _, err := t.readSums(fmt.Sprintf("epoch %d, step %d", t.Epoch+1, t.GlobalStep)); err != nil {
		return Record{}, err
	}
	st, err := t.globalStats(t.epochStats)
	if err != nil {
		return Record{}, err
	}
	t.Metrics = means("train_", st.Sums, float64(st.Samples))
	rec := Record{
		Epoch:        t.Epoch + 1,
		Step:         t.GlobalStep,
		TrainLoss:    t.Metrics["train_loss"],
		ValLoss:      math.NaN(),
		ValAcc:       math.NaN(),
		Elapsed:      st.Elapsed,
		LR:           t.LR(),
		GradNorm:     math.NaN(),
		LossScale:    t.Scaler.ScaleValue(),
		SkippedSteps: st.Skipped,
	}
	if st.Elapsed > 0 {
		rec.SamplesPerSec = float64(st.Samples) / st.Elapsed
		rec.DataWait = st.Wait / st.Elapsed
	}
	if t.cfg.GradClip > 0 && st.Steps > 0 {
		rec.GradNorm = st.GradNormSum / float64(st.Steps)
	}
	if t.Val != nil {
		if err := t.validate(); err != nil {
			return rec, err
		}
	}
	for name, v := range t.Metrics {
		switch name {
		case "train_loss":
		case "val_loss":
			rec.ValLoss = v
		case "val_acc":
			rec.ValAcc = v
		default:
			if rec.Metrics == nil {
				rec.Metrics = map[string]float64{}
			}
			rec.Metrics[name] = v
		}
	}
	return rec, nil
}

// addRecord steps a metric scheduler (ReduceLROnPlateau) with the evaluation's monitored
// metric, enters its Record into History, updates the best metric, prints the record's
// line and fires Evaluated.
func (t *Trainer) addRecord(rec Record) error {
	if ms, ok := t.Scheduler.(optim.MetricScheduler); ok {
		ms.StepMetric(t.Metrics[t.cfg.Monitor])
	}
	t.History = append(t.History, rec)
	if v, ok := t.Metrics[t.cfg.Monitor]; ok && t.cfg.MonitorDirection().better(v, t.BestMetric) {
		t.BestMetric = v
	}
	t.printf("%s\n", recordLine(rec, t.cfg.EvalEvery > 0 || t.cfg.MaxSteps > 0))
	return t.fire(Evaluated)
}

// recordLine is a Record's line in the output: what was measured (a validation that did
// not run, or a metric the step does not have, such as a language model's accuracy, is
// left out rather than printed as NaN), with the step on step-budgeted runs.
func recordLine(rec Record, steps bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Epoch %d", rec.Epoch)
	if steps {
		fmt.Fprintf(&b, " step %d", rec.Step)
	}
	fmt.Fprintf(&b, " | train_loss: %.4f", rec.TrainLoss)
	if !math.IsNaN(rec.ValLoss) {
		fmt.Fprintf(&b, " | val_loss: %.4f", rec.ValLoss)
	}
	if !math.IsNaN(rec.ValAcc) {
		fmt.Fprintf(&b, " | val_acc: %.4f", rec.ValAcc)
	}
	fmt.Fprintf(&b, " | lr: %.3g | %.0f samples/s | time: %.1fs", rec.LR, rec.SamplesPerSec, rec.Elapsed)
	return b.String()
}

// agreeToStop makes a stop on any process a stop on every process after the same epoch.
func (t *Trainer) agreeToStop() error {
	flag := 0.0
	if t.stopReason != "" {
		flag = 1
	}
	out, err := t.strategy.AllReduce([]float64{flag}, distributed.Max)
	if err != nil {
		return fmt.Errorf("epoch %d: agreeing to stop: %w", t.Epoch, err)
	}
	if out[0] != 0 {
		t.Stop("stopped on another rank")
	}
	return nil
}

// validate runs the evaluation step over the validation set and records val_<name>
// for the loss and every metric. It is not cancelled half-way: with several processes
// the ranks reduce their sums together, so a cancel is acted on at the next training
// step, where they agree on it.
func (t *Trainer) validate() (err error) {
	nn.SetTraining(t.Model, false)
	defer nn.SetTraining(t.Model, true)
	it := t.Val.Iter(context.Background(), 0, 0)
	defer it.Close()
	sums := &deviceSums{dev: t.Device}
	defer sums.free()
	var n int64
	batch := 0
	torch.NoGrad(func() {
		for more := true; more && err == nil; {
			torch.WithScope(func() {
				var b data.Batch
				if b, more = it.Next(); more {
					batch++
					n += int64(b.Size)
					err = t.validationStep(b, batch, sums)
				}
			})
		}
	})
	if err != nil {
		return err
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("validation: %w", err)
	}
	// val_ means over all processes: ratios of sums, so they are right whether the
	// validation loader is split by rank or not.
	h, total, err := t.sumNamed([]float64{float64(n)}, sums.read().Sums)
	if err != nil {
		return fmt.Errorf("epoch %d: reducing validation metrics: %w", t.Epoch+1, err)
	}
	maps.Copy(t.Metrics, means("val_", total, h[0]))
	return t.fire(ValidationEnd)
}

func (t *Trainer) validationStep(b data.Batch, batch int, sums *deviceSums) (err error) {
	defer stepError(&err, func() string { return fmt.Sprintf("epoch %d validation batch %d", t.Epoch+1, batch) }, b.Size)
	t.Batch = batchOn(t.Val, b, t.Device)
	loss, ms := t.runStep(t.evalStep, t.Batch)
	n, ms := splitItems(ms)
	t.StepLoss = t.addSums(sums, loss, n, ms, b.Size, 0)
	return t.fire(ValidationBatchEnd)
}
