// Package trainer runs training and validation epochs over a model: the Go port of the
// seed's GPUTrainer. It does automatic mixed precision, gradient accumulation and
// clipping, LR scheduling per epoch or per step, callbacks (early stopping, checkpoints,
// TensorBoard, history files), full-state checkpoints that Python's torch.load opens,
// exact resume (at an epoch boundary or mid-epoch), and a clean stop on interruption.
//
// A Trainer is called the way the seed's trainer object was: Run trains to the
// configured number of epochs and can be called again to continue, RunTo(ctx, 3) trains
// to epoch 3 (the seed's trainer(3)), and RunFor(ctx, n) trains n more epochs.
//
// Order of one optimizer step (PyTorch's, see the reference): zero_grad; for each of k
// micro-batches, forward and loss under autocast, loss/k, scaled backward; unscale;
// clip; scaler step (skipped on inf/NaN gradients); scaler update; per-step scheduler
// (only when the optimizer stepped); global_step++.
package trainer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/gotrain/gotrain/amp"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/distributed"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/optim"
)

// LossFunc computes the loss of a batch from the model's output and the target.
type LossFunc func(output, target *torch.Tensor) *torch.Tensor

// MetricFunc computes a validation metric for one batch; the trainer averages it over
// the validation set weighted by batch size.
type MetricFunc func(output, target *torch.Tensor) float64

// Record is one epoch of history. Its JSON names are the seed's history keys plus more.
type Record struct {
	Epoch         int     `json:"epoch"`
	TrainLoss     float64 `json:"train_loss"`
	ValLoss       float64 `json:"val_loss"`
	ValAcc        float64 `json:"val_acc"`
	Elapsed       float64 `json:"elapsed_sec"`
	LR            float64 `json:"lr"`
	SamplesPerSec float64 `json:"samples_per_sec"`
	// GradNorm is the mean pre-clip total gradient norm of the epoch's steps when
	// gradient clipping is on (clipping computes it), NaN otherwise.
	GradNorm     float64            `json:"grad_norm"`
	LossScale    float64            `json:"loss_scale"`
	SkippedSteps int                `json:"skipped_steps"`
	DataWait     float64            `json:"data_wait_frac"`
	Metrics      map[string]float64 `json:"metrics,omitempty"`
}

// Trainer trains one model. Its exported fields are its state, readable by callbacks.
type Trainer struct {
	Model     nn.Module
	Train     *data.Loader
	Val       *data.Loader
	Loss      LossFunc
	Optimizer optim.Optimizer
	Scheduler optim.Scheduler
	Scaler    *amp.GradScaler
	Device    torch.Device
	Config    Config
	// RunDir holds config.json, checkpoints/, history.jsonl, the TensorBoard events and
	// curves.png ("" disables all files).
	RunDir string
	Out    io.Writer

	// Epoch is the number of completed epochs.
	Epoch int
	// GlobalStep counts optimizer steps (not batches; skipped steps count too, as in PyTorch).
	GlobalStep int64
	// BatchInEpoch is the number of batches of the current epoch already trained.
	BatchInEpoch int
	// History has one Record per completed epoch.
	History []Record
	// BestMetric is the best value of Config.Monitor so far (the seed's best_metric).
	BestMetric float64
	// LastLoss is the loss of the latest batch, for BatchEnd callbacks.
	LastLoss float64
	// Metrics holds the latest validation results by name ("val_loss", "val_acc", ...).
	Metrics map[string]float64

	callbacks    []Callback
	metrics      map[string]MetricFunc
	ampDType     torch.DType
	useAutocast  bool
	terminateNaN bool
	stopReason   string
	params       []*torch.Tensor
	progress     *progress
	epochStats   epochStats
	modelConfig  string
	announced    bool
	dist         *distributed.ProcessGroup // WithDistributed (ddp.go)
}

// epochStats accumulates one epoch's training statistics; it is saved in mid-epoch
// checkpoints so a resumed epoch reports the same averages.
type epochStats struct {
	LossSum     float64
	Batches     int
	Samples     int64
	GradNormSum float64
	Steps       int
	Skipped     int
	Elapsed     float64
	Wait        float64
}

// Option configures a Trainer.
type Option func(*Trainer) error

// WithConfig replaces the configuration (options after it still apply).
func WithConfig(c Config) Option { return func(t *Trainer) error { t.Config = c; return c.Validate() } }

// WithEpochs sets the number of epochs Run trains to.
func WithEpochs(n int) Option { return func(t *Trainer) error { t.Config.Epochs = n; return nil } }

// WithDevice sets the device ("" or "auto" picks cuda:0 when available, else the CPU).
func WithDevice(dev string) Option {
	return func(t *Trainer) error { t.Config.Device = dev; return nil }
}

// WithAMP sets mixed precision: "none", "bf16" or "fp16".
func WithAMP(mode string) Option { return func(t *Trainer) error { t.Config.AMP = mode; return nil } }

// WithGradClip clips the total gradient norm to maxNorm (0 disables).
func WithGradClip(maxNorm float64) Option {
	return func(t *Trainer) error { t.Config.GradClip = maxNorm; return nil }
}

// WithAccumulation accumulates gradients over k micro-batches per optimizer step.
func WithAccumulation(k int) Option {
	return func(t *Trainer) error { t.Config.Accumulation = k; return nil }
}

// WithScheduler steps s after every epoch ("epoch") or every optimizer step ("step").
// A ReduceLROnPlateau-style scheduler (optim.MetricScheduler) is stepped with the
// monitored metric after validation.
func WithScheduler(s optim.Scheduler, interval string) Option {
	return func(t *Trainer) error { t.Scheduler = s; t.Config.SchedulerInterval = interval; return nil }
}

// WithCallbacks adds callbacks, run in order after the built-in ones.
func WithCallbacks(cbs ...Callback) Option {
	return func(t *Trainer) error { t.callbacks = append(t.callbacks, cbs...); return nil }
}

// WithMetric adds a validation metric, recorded as Record.Metrics[name].
func WithMetric(name string, f MetricFunc) Option {
	return func(t *Trainer) error { t.metrics[name] = f; return nil }
}

// WithRunDir sets the run directory; "" writes no files.
func WithRunDir(dir string) Option { return func(t *Trainer) error { t.RunDir = dir; return nil } }

// WithOutput sends progress and summaries to w (default os.Stdout; io.Discard silences).
func WithOutput(w io.Writer) Option { return func(t *Trainer) error { t.Out = w; return nil } }

// WithSeed seeds libtorch's generators (and the config's record of it).
func WithSeed(seed int64) Option { return func(t *Trainer) error { t.Config.Seed = seed; return nil } }

// WithDeterministic turns on deterministic algorithms.
func WithDeterministic(on bool) Option {
	return func(t *Trainer) error { t.Config.Deterministic = on; return nil }
}

// WithMonitor sets the metric that picks the best checkpoint ("val_acc", "val_loss", ...).
func WithMonitor(name string) Option {
	return func(t *Trainer) error { t.Config.Monitor = name; return nil }
}

// WithModelConfig sets the checkpoint's model_config (default: the model's Go type name).
func WithModelConfig(name string) Option {
	return func(t *Trainer) error { t.modelConfig = name; return nil }
}

// WithTerminateOnNaN switches the default stop on a NaN or infinite training loss.
func WithTerminateOnNaN(on bool) Option {
	return func(t *Trainer) error { t.terminateNaN = on; return nil }
}

// New makes a trainer. The model is moved to the chosen device; build the optimizer
// over the model's parameters before calling New (moving keeps parameter identity).
func New(model nn.Module, train, val *data.Loader, loss LossFunc, opt optim.Optimizer, options ...Option) (*Trainer, error) {
	t := &Trainer{
		Model: model, Train: train, Val: val, Loss: loss, Optimizer: opt,
		Config:       DefaultConfig(),
		Out:          os.Stdout,
		metrics:      map[string]MetricFunc{},
		terminateNaN: true,
		Metrics:      map[string]float64{},
	}
	t.Config.Epochs = 10
	for _, o := range options {
		if err := o(t); err != nil {
			return nil, err
		}
	}
	if model == nil || train == nil || loss == nil || opt == nil {
		return nil, errors.New("trainer.New: model, train loader, loss and optimizer are required")
	}
	if err := t.Config.Validate(); err != nil {
		return nil, err
	}
	if t.Config.Accumulation == 0 {
		t.Config.Accumulation = 1
	}
	if t.Config.Monitor == "" {
		t.Config.Monitor = "val_acc"
	}
	if t.Val == nil && (t.Config.Monitor == "val_acc" || t.Config.Monitor == "val_loss") {
		t.Config.Monitor = "train_loss"
	}
	t.BestMetric = math.Inf(-1)
	if !monitorMaximises(t.Config.Monitor) {
		t.BestMetric = math.Inf(1)
	}
	if err := t.setupDistributed(); err != nil { // DDP hook (ddp.go): device, rank 0 writes
		return nil, err
	}
	dev, err := ResolveDevice(t.Config.Device)
	if err != nil {
		return nil, err
	}
	t.Device = dev
	if t.modelConfig == "" {
		t.modelConfig = fmt.Sprintf("%T", model)
		if i := len(t.modelConfig); i > 0 && t.modelConfig[0] == '*' {
			t.modelConfig = t.modelConfig[1:]
		}
		if t.Config.Model != "" {
			t.modelConfig = t.Config.Model
		}
	}
	switch t.Config.AMP {
	case "bf16":
		t.useAutocast, t.ampDType = true, torch.BFloat16
	case "fp16":
		if !dev.IsCUDA() {
			return nil, errors.New("trainer: amp fp16 needs a CUDA device; on the CPU use bf16")
		}
		t.useAutocast, t.ampDType = true, torch.Float16
	}
	t.Scaler = amp.NewGradScaler(amp.ScalerOptions{Enabled: t.Config.AMP == "fp16"})
	if err := t.seed(); err != nil {
		return nil, err
	}
	if err := moveModel(model, dev); err != nil {
		return nil, err
	}
	t.params = nn.Parameters(model)
	if err := t.syncFromMain(); err != nil { // DDP hook (ddp.go): rank 0's weights everywhere
		return nil, err
	}
	if t.RunDir != "" {
		if err := t.setupRunDir(); err != nil {
			return nil, err
		}
	}
	return t, nil
}

func moveModel(m nn.Module, dev torch.Device) (err error) {
	defer torch.Recover(&err, "moving the model to "+dev.String())
	nn.ToDevice(m, dev)
	return nil
}

// ResolveDevice parses a device flag: "" or "auto" is cuda:0 when CUDA is available,
// else the CPU; a CUDA device without CUDA is an error pointing at cmd/gpucheck.
func ResolveDevice(s string) (torch.Device, error) {
	if s == "" || s == "auto" {
		return torch.DefaultDevice(), nil
	}
	d, err := torch.ParseDevice(s)
	if err != nil {
		return d, err
	}
	if d.IsCUDA() && !torch.CUDAIsAvailable() {
		return d, fmt.Errorf("trainer: device %s requested but CUDA is not available (run cmd/gpucheck for a diagnosis)", d)
	}
	if d.IsCUDA() && d.Index < 0 {
		d.Index = 0
	}
	return d, nil
}

func (t *Trainer) seed() (err error) {
	defer torch.Recover(&err, "seeding")
	torch.ManualSeed(t.Config.Seed)
	if t.Config.Deterministic {
		torch.SetDeterministic(true)
	}
	if t.Config.Threads > 0 {
		torch.SetNumThreads(t.Config.Threads)
	}
	return nil
}

// Stop asks the trainer to stop after the current epoch (callbacks call it).
func (t *Trainer) Stop(reason string) {
	if t.stopReason == "" {
		t.stopReason = reason
	}
}

// StopReason says why the last run stopped early, "" when it did not.
func (t *Trainer) StopReason() string { return t.stopReason }

// Run trains until Config.Epochs epochs are complete. Calling it again after a
// RunTo/RunFor or a resume continues where training stopped.
func (t *Trainer) Run(ctx context.Context) error { return t.RunTo(ctx, t.Config.Epochs) }

// RunFor trains n more epochs.
func (t *Trainer) RunFor(ctx context.Context, n int) error { return t.RunTo(ctx, t.Epoch+n) }

// RunTo trains until epoch target is complete (the seed's trainer(target)). When target
// is already reached it trains nothing and says so, where the seed silently did nothing.
func (t *Trainer) RunTo(ctx context.Context, target int) (err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer torch.Recover(&err, "training")
	if t.Device.IsCUDA() && t.Device.Index >= 0 {
		// Work without an explicit index (cuDNN handles, NCCL's barrier, temporaries)
		// goes to the training device, not cuda:0 — with one process per GPU, every
		// rank would otherwise also hold a context on GPU 0.
		if err := torch.CUDASetDevice(t.Device.Index); err != nil {
			return err
		}
	}
	t.stopReason = ""
	if target <= t.Epoch && t.BatchInEpoch == 0 {
		t.printf("trainer: already at epoch %d of %d; nothing to train (use RunFor to train more)\n", t.Epoch, target)
		return nil
	}
	t.announce()
	if err := t.fire(TrainBegin); err != nil {
		return err
	}
	defer func() {
		if e := t.fire(TrainEnd); e != nil && err == nil {
			err = e
		}
	}()
	for t.Epoch < target {
		if err := t.runEpoch(ctx, target); err != nil {
			return err
		}
		if t.stopReason != "" {
			t.printf("trainer: stopping after epoch %d: %s\n", t.Epoch, t.stopReason)
			break
		}
	}
	t.printf("===== training done: best %s %.4f =====\n", t.Config.Monitor, t.BestMetric)
	return nil
}

func (t *Trainer) printf(format string, args ...any) {
	if t.Out != nil {
		fmt.Fprintf(t.Out, format, args...)
	}
}

func (t *Trainer) announce() {
	if t.announced {
		return
	}
	t.announced = true
	t.printf("===== gotrain: training =====\n")
	t.printf("device: %s (libtorch %s, %d threads)\n", t.Device, torch.Version(), torch.NumThreads())
	t.printf("parameters: %.2fM\n", float64(nn.NumParameters(t.Model))/1e6)
	t.printf("train samples: %d (%d batches)\n", t.Train.Sampler().Len(), t.Train.Len())
	if t.Val != nil {
		t.printf("val samples: %d\n", t.Val.Sampler().Len())
	}
	if t.RunDir != "" {
		t.printf("run dir: %s\n", t.RunDir)
	}
}

func (t *Trainer) fire(e Event) error {
	for _, cb := range t.callbacks {
		if err := cb.OnEvent(e, t); err != nil {
			return fmt.Errorf("callback at %s: %w", e, err)
		}
	}
	return nil
}

// LR returns the learning rate of the first parameter group.
func (t *Trainer) LR() float64 {
	if g := t.Optimizer.ParamGroups(); len(g) > 0 {
		return g[0].LR
	}
	return 0
}

func (t *Trainer) runEpoch(ctx context.Context, target int) error {
	epoch := t.Epoch // 0-based index of the epoch being trained
	start := t.BatchInEpoch
	if start == 0 {
		t.epochStats = epochStats{}
	}
	if err := t.fire(EpochBegin); err != nil {
		return err
	}
	began := time.Now()
	nn.SetTraining(t.Model, true)
	// The iterator gets its own context: a cancel is seen between optimizer steps (below),
	// so a step and its accumulation window always complete before the state is saved.
	it := t.Train.Iter(context.Background(), epoch, start)
	defer it.Close()
	nBatches := t.Train.Len()
	t.progress = newProgress(t.Out, epoch+1, target, nBatches, t.Config.LogEvery)
	k := t.Config.Accumulation
	windowStart := start - start%k
	for {
		cause, err := t.interruption(ctx) // DDP hook (ddp.go): every rank stops at the same step
		if err != nil {
			return err
		}
		if cause != nil {
			t.epochStats.Elapsed += time.Since(began).Seconds()
			t.epochStats.Wait += it.WaitTime().Seconds()
			return t.interrupted(cause)
		}
		// A window of k micro-batches is one optimizer step; the last window of an
		// epoch may be shorter (it still steps, as Lightning and Accelerate do).
		windowEnd := min(windowStart+k, nBatches)
		stepped, err := t.step(it, windowEnd-t.BatchInEpoch, k)
		if err != nil {
			return err
		}
		if !stepped {
			break
		}
		windowStart = windowEnd
		if t.BatchInEpoch >= nBatches {
			break
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("epoch %d: data: %w", epoch+1, err)
	}
	t.epochStats.Elapsed += time.Since(began).Seconds()
	t.epochStats.Wait += it.WaitTime().Seconds()
	t.progress.done()
	return t.finishEpoch(ctx)
}

// step runs one optimizer step over up to n micro-batches of the current window.
// It returns false when the epoch's data ran out before any batch.
func (t *Trainer) step(it *data.Iter, n, k int) (stepped bool, err error) {
	scope := torch.NewScope()
	defer scope.Close()
	if t.BatchInEpoch%k == 0 {
		t.Optimizer.ZeroGrad(true)
	}
	got := 0
	for got < n {
		b, ok := it.Next()
		if !ok {
			break
		}
		if err := t.microStep(b, k); err != nil {
			return false, err
		}
		got++
		t.BatchInEpoch++
		if err := t.fire(BatchEnd); err != nil {
			return false, err
		}
	}
	if got == 0 {
		return false, nil
	}
	if err := t.optimizerStep(); err != nil {
		return false, err
	}
	return true, nil
}

// onDevice moves a batch tensor to the trainer's device unless the loader put it there
// already (data.LoaderOptions.Device, which copies through pinned memory on CUDA).
func (t *Trainer) onDevice(x *torch.Tensor) *torch.Tensor {
	if x.Device() == t.Device {
		return x
	}
	return x.To(t.Device, true)
}

func (t *Trainer) forward(x, y *torch.Tensor) (out, loss *torch.Tensor) {
	run := func() {
		out = t.Model.Forward(x)
		loss = t.Loss(out, y)
	}
	if t.useAutocast {
		amp.Autocast(t.Device, t.ampDType, run)
	} else {
		run()
	}
	return out, loss
}

func (t *Trainer) microStep(b data.Batch, k int) (err error) {
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(error)
			if !ok {
				panic(r)
			}
			if errors.Is(e, torch.ErrOutOfMemory) {
				err = fmt.Errorf("out of memory at epoch %d batch %d with batch size %d: use a smaller batch size, gradient accumulation (--accumulation) to keep the effective batch, or AMP (--amp bf16/fp16): %w",
					t.Epoch+1, t.BatchInEpoch+1, b.Size, e)
				return
			}
			err = fmt.Errorf("epoch %d batch %d: %w", t.Epoch+1, t.BatchInEpoch+1, e)
		}
	}()
	_, loss := t.forward(t.onDevice(b.Get(data.Input)), t.onDevice(legacyTarget(b)))
	lv := loss.Item()
	if t.terminateNaN && (math.IsNaN(lv) || math.IsInf(lv, 0)) {
		return fmt.Errorf("training loss is %v at epoch %d batch %d (global step %d): stopping (TerminateOnNaN); lower the learning rate, clip gradients, or check the data", lv, t.Epoch+1, t.BatchInEpoch+1, t.GlobalStep+1)
	}
	t.LastLoss = lv
	t.epochStats.LossSum += lv
	t.epochStats.Batches++
	t.epochStats.Samples += int64(b.Size)
	if k > 1 {
		loss = loss.DivScalar(float64(k))
	}
	t.Scaler.ScaleLoss(loss).Backward()
	t.progress.update(t.BatchInEpoch+1, lv)
	return nil
}

func (t *Trainer) optimizerStep() error {
	if err := t.allReduceGradients(); err != nil { // DDP hook (ddp.go)
		return err
	}
	if err := t.Scaler.Unscale(t.Optimizer); err != nil {
		return err
	}
	if t.Config.GradClip > 0 {
		norm, err := optim.ClipGradNorm(t.params, t.Config.GradClip, 2, false)
		if err != nil {
			return err
		}
		if !math.IsNaN(norm) && !math.IsInf(norm, 0) {
			t.epochStats.GradNormSum += norm
		}
	}
	stepped, err := t.Scaler.Step(t.Optimizer)
	if err != nil {
		return err
	}
	t.Scaler.Update()
	if !stepped {
		t.epochStats.Skipped++
	}
	if stepped && t.Scheduler != nil && t.Config.SchedulerInterval == "step" {
		t.Scheduler.Step()
	}
	t.GlobalStep++
	t.epochStats.Steps++
	return nil
}

func (t *Trainer) interrupted(cause error) error {
	where := fmt.Sprintf("epoch %d, batch %d of %d (global step %d)", t.Epoch+1, t.BatchInEpoch, t.Train.Len(), t.GlobalStep)
	if err := t.gatherEpochProgress(); err != nil { // DDP hook (ddp.go)
		return fmt.Errorf("interrupted at %s: %w; %v", where, cause, err)
	}
	if !t.IsMain() {
		return &InterruptedError{Cause: cause, Checkpoint: "rank 0's run directory", Where: where}
	}
	if t.RunDir == "" {
		return fmt.Errorf("interrupted at %s: %w (no run directory, nothing saved)", where, cause)
	}
	path := filepath.Join(t.RunDir, "checkpoints", "last.pt")
	if err := t.SaveCheckpoint(path); err != nil {
		return fmt.Errorf("interrupted at %s: %w; saving %s failed: %v", where, cause, path, err)
	}
	return &InterruptedError{Cause: cause, Checkpoint: path, Where: where}
}

// InterruptedError is returned when a run is cancelled (context, SIGINT, SIGTERM) after
// the current step finished and last.pt was written.
type InterruptedError struct {
	Cause      error
	Checkpoint string
	Where      string
}

func (e *InterruptedError) Error() string {
	return fmt.Sprintf("interrupted at %s (%v); state saved to %s; resume with: go run ./cmd/train --resume %s (or Trainer.LoadCheckpoint)", e.Where, e.Cause, e.Checkpoint, e.Checkpoint)
}

// Unwrap returns the cause (context.Canceled, for example).
func (e *InterruptedError) Unwrap() error { return e.Cause }

func (t *Trainer) finishEpoch(ctx context.Context) error {
	st, err := t.globalEpochStats() // DDP hook (ddp.go): sums over ranks
	if err != nil {
		return err
	}
	rec := Record{
		Epoch:        t.Epoch + 1,
		TrainLoss:    st.LossSum / float64(max(st.Batches, 1)),
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
	if t.Config.GradClip > 0 && st.Steps > 0 {
		rec.GradNorm = st.GradNormSum / float64(st.Steps)
	}
	t.Metrics = map[string]float64{"train_loss": rec.TrainLoss}
	if t.Val != nil {
		if err := t.validate(ctx, &rec); err != nil {
			return err
		}
	}
	if ms, ok := t.Scheduler.(optim.MetricScheduler); ok && t.Scheduler != nil {
		ms.StepMetric(t.Metrics[t.Config.Monitor])
	} else if t.Scheduler != nil && t.Config.SchedulerInterval != "step" {
		t.Scheduler.Step()
	}
	t.Epoch++
	t.BatchInEpoch = 0
	t.History = append(t.History, rec)
	if v, ok := t.Metrics[t.Config.Monitor]; ok && t.improves(v) {
		t.BestMetric = v
	}
	t.printf("Epoch %d | train_loss: %.4f | val_loss: %.4f | val_acc: %.4f | lr: %.3g | %.0f samples/s | time: %.1fs\n",
		rec.Epoch, rec.TrainLoss, rec.ValLoss, rec.ValAcc, rec.LR, rec.SamplesPerSec, rec.Elapsed)
	if err := t.fire(EpochEnd); err != nil {
		return err
	}
	return t.agreeToStop() // DDP hook (ddp.go): a stop on any rank stops all
}

func (t *Trainer) improves(v float64) bool {
	if math.IsNaN(v) {
		return false
	}
	if monitorMaximises(t.Config.Monitor) {
		return v > t.BestMetric
	}
	return v < t.BestMetric
}

func (t *Trainer) validate(ctx context.Context, rec *Record) (err error) {
	nn.SetTraining(t.Model, false)
	defer nn.SetTraining(t.Model, true)
	if t.dist != nil {
		// Ranks reduce their validation sums together, so none may stop half-way: a
		// cancel is acted on at the next training step, where the ranks agree on it.
		ctx = context.WithoutCancel(ctx)
	}
	it := t.Val.Iter(ctx, 0, 0)
	defer it.Close()
	var lossSum, correct float64
	var n int64
	batches := 0
	sums := map[string]float64{}
	torch.NoGrad(func() {
		for {
			ok := true
			torch.WithScope(func() {
				b, more := it.Next()
				if !more {
					ok = false
					return
				}
				y := t.onDevice(legacyTarget(b))
				out, loss := t.forward(t.onDevice(b.Get(data.Input)), y)
				lossSum += loss.Item()
				batches++
				if y.DType() == torch.Int64 {
					correct += out.Argmax(1, false).Eq(y).Sum().Item()
				}
				for name, f := range t.metrics {
					sums[name] += f(out, y) * float64(b.Size)
				}
				n += int64(b.Size)
			})
			if !ok {
				break
			}
		}
	})
	if err := it.Err(); err != nil {
		if ctx.Err() != nil {
			return t.interrupted(ctx.Err())
		}
		return fmt.Errorf("validation: %w", err)
	}
	if err := t.reduceValidation(&lossSum, &correct, &n, &batches, sums); err != nil { // DDP hook (ddp.go)
		return err
	}
	if batches > 0 {
		rec.ValLoss = lossSum / float64(batches)
		rec.ValAcc = correct / float64(n)
	}
	t.Metrics["val_loss"] = rec.ValLoss
	t.Metrics["val_acc"] = rec.ValAcc
	if len(t.metrics) > 0 {
		rec.Metrics = map[string]float64{}
		for name, s := range sums {
			rec.Metrics[name] = s / float64(max(n, 1))
			t.Metrics[name] = rec.Metrics[name]
		}
	}
	return t.fire(ValidationEnd)
}

// legacyTarget is what the loss compares the output with: the labels of a
// classification batch, or the float target of a regression batch.
func legacyTarget(b data.Batch) *torch.Tensor {
	if b.Has(data.Label) {
		return b.Get(data.Label)
	}
	return b.Get(data.Target)
}
