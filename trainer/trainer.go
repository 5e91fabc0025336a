// Package trainer runs training and validation epochs over a model: the Go port of the
// seed's GPUTrainer. The user owns the step — a function of (model, batch) returning
// the loss and named metrics (Step; the default is classification) — and the Trainer
// owns everything around it: automatic mixed precision, gradient accumulation and
// clipping, LR scheduling per epoch or per step, data-parallel gradient averaging (a
// Strategy), callbacks (early stopping, checkpoints, TensorBoard, history files),
// full-state checkpoints that Python's torch.load opens, exact resume (at an epoch
// boundary or mid-epoch), and a clean stop on interruption.
//
// A Trainer is called the way the seed's trainer object was: Run trains to the
// configured number of epochs and can be called again to continue, RunTo(ctx, 3) trains
// to epoch 3 (the seed's trainer(3)), and RunFor(ctx, n) trains n more epochs.
//
// Order of one optimizer step (PyTorch's, see the reference): zero_grad; for each of k
// micro-batches, the step under autocast, loss/k, scaled backward; gradient averaging
// across processes; unscale; clip; scaler step (skipped on inf/NaN gradients); scaler
// update; per-step scheduler (only when the optimizer stepped); global_step++.
//
// The default step over a built-in model, loss and optimizer runs as one call into
// libtorch per step (WithOneCallStep says when), with the same ATen calls and results;
// over a Resident loader, with nothing listening between steps, a run of such steps is
// one call (WithStepsPerCall).
//
// Metrics are summed on the device and read back to Go at logging points (every
// Config.LogEvery batches) and at the end of an epoch, so the default step makes no
// host synchronisation per optimizer step; the NaN check runs at those reads and names
// the step whose loss first was not finite.
package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/gotrain/gotrain/amp"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/optim"
)

// Record is one epoch of history. Its JSON names are the seed's history keys plus more.
type Record struct {
	// Epoch is the epoch the record was made in (1-based): the epoch it ends, or, at an
	// evaluation inside an epoch (Config.EvalEvery, Config.MaxSteps), the one in progress.
	Epoch int `json:"epoch"`
	// Step is the global step (optimizer steps) at the record.
	Step          int64   `json:"step"`
	TrainLoss     float64 `json:"train_loss"`
	ValLoss       float64 `json:"val_loss"`
	ValAcc        float64 `json:"val_acc"`
	Elapsed       float64 `json:"elapsed_sec"`
	LR            float64 `json:"lr"`
	SamplesPerSec float64 `json:"samples_per_sec"`
	// GradNorm is the mean pre-clip total gradient norm of the epoch's steps when
	// gradient clipping is on (clipping computes it), NaN otherwise.
	GradNorm     float64 `json:"grad_norm"`
	LossScale    float64 `json:"loss_scale"`
	SkippedSteps int     `json:"skipped_steps"`
	DataWait     float64 `json:"data_wait_frac"`
	// Metrics holds the steps' other metrics by recorded name ("train_acc", "val_f1").
	Metrics map[string]float64 `json:"metrics,omitempty"`
}

// Trainer trains one model. Its exported fields are its state, readable by callbacks.
type Trainer struct {
	Model     nn.Module
	Train     *data.Loader
	Val       *data.Loader
	Optimizer optim.Optimizer
	Scheduler optim.Scheduler
	Scaler    *amp.GradScaler
	Device    torch.Device
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
	// Batch is the batch being trained or validated, on the training device, and
	// StepLoss its loss tensor (valid during BeforeBackward, BatchEnd, Logged,
	// AfterOptimizerStep and ValidationBatchEnd; reading its value is a host
	// synchronisation). After a run of steps in one call (WithStepsPerCall), Batch
	// has the last batch's Index and Size but no Fields.
	Batch    data.Batch
	StepLoss *torch.Tensor
	// LogPoint is true during a BatchEnd at a logging point and during Logged, when
	// LastLoss and TrainMetrics have just been read from the device.
	LogPoint bool
	// LastLoss is the loss of the latest batch as of the latest logging point.
	LastLoss float64
	// TrainMetrics holds the running means of the epoch's training metrics by recorded
	// name ("train_loss", "train_acc"), as of the latest logging point.
	TrainMetrics map[string]float64
	// Metrics holds the latest epoch's results by name ("train_loss", "val_loss",
	// "val_acc", ...).
	Metrics map[string]float64

	cfg          Config // set by the options; read through Config
	strategy     Strategy
	trainStep    boundStep
	evalStep     boundStep
	callbacks    []Callback
	terminateNaN bool
	stopReason   string
	params       []*torch.Tensor
	progress     *progress
	epochStats   epochStats
	trainSums    *deviceSums
	normSums     *deviceSums // the clipped gradients' norms, when clipping
	modelConfig  string
	runConfig    json.RawMessage // WithRunConfig
	announced    bool
	loss         nn.Loss      // New's loss when the training step is the default one
	fuse         bool         // WithOneCallStep
	stepsPerCall int          // WithStepsPerCall
	oneCall      *oneCallStep // the epoch's training steps run in one call each (nil: not)
	graphs       *graphSteps  // the epoch's CUDA graphs (nil: none)
}

// New makes a trainer. The model is moved to the chosen device; build the optimizer
// over the model's parameters before calling New (moving keeps parameter identity).
// loss is the default steps' loss (an nn loss module, or a LossFunc); it may be nil when
// WithTrainStep is given. The configuration starts as DefaultConfig, the one source of
// defaults.
func New(model nn.Module, train, val *data.Loader, loss nn.Loss, opt optim.Optimizer, options ...Option) (_ *Trainer, err error) {
	t := &Trainer{
		Model: model, Train: train, Val: val, Optimizer: opt,
		cfg:          DefaultConfig(),
		Out:          os.Stdout,
		strategy:     SingleProcess{},
		terminateNaN: true,
		Metrics:      map[string]float64{},
		fuse:         true,
		stepsPerCall: DefaultStepsPerCall,
	}
	for _, o := range options {
		if err := o(t); err != nil {
			return nil, err
		}
	}
	if model == nil || train == nil || opt == nil || (loss == nil && t.trainStep == nil) {
		return nil, errors.New("trainer.New: model, train loader, optimizer and a loss (or WithTrainStep) are required")
	}
	if t.evalStep == nil {
		t.evalStep = t.trainStep
	}
	if t.trainStep == nil {
		if t.trainStep, err = bind(LossStep(loss), model, "default training"); err != nil {
			return nil, fmt.Errorf("%w (a model without a one-input Forward needs WithTrainStep)", err)
		}
		t.loss = loss // the default step: it may run in one call
	}
	if t.evalStep == nil {
		if t.evalStep, err = bind(ClassificationStep(loss), model, "default evaluation"); err != nil {
			return nil, fmt.Errorf("%w (a model without a one-input Forward needs WithEvalStep)", err)
		}
	}
	if t.Val == nil && strings.HasPrefix(t.cfg.Monitor, "val_") {
		t.cfg.Monitor = "train_loss"
		t.cfg.MonitorMode = Auto
	}
	if err := t.cfg.Validate(); err != nil {
		return nil, err
	}
	t.BestMetric = t.cfg.MonitorDirection().worst()
	if err := t.strategy.Configure(t); err != nil {
		return nil, err
	}
	dev, err := ResolveDevice(t.cfg.Device)
	if err != nil {
		return nil, err
	}
	t.Device = dev
	if err := t.checkGraphs(); err != nil {
		return nil, err
	}
	if t.modelConfig == "" {
		t.modelConfig = strings.TrimPrefix(fmt.Sprintf("%T", model), "*")
	}
	if t.cfg.AMP == amp.FP16 && !dev.IsCUDA() {
		return nil, errors.New("trainer: amp fp16 needs a CUDA device; on the CPU use bf16")
	}
	if t.Scaler, err = amp.NewGradScaler(amp.ScalerOptions{Enabled: t.cfg.AMP.NeedsScaler()}); err != nil {
		return nil, err
	}
	if err := t.seed(); err != nil {
		return nil, err
	}
	if err := moveModel(model, dev); err != nil {
		return nil, err
	}
	t.params = nn.Parameters(model)
	t.trainSums = &deviceSums{dev: dev, track: true}
	t.normSums = &deviceSums{dev: dev}
	if err := t.strategy.Start(t); err != nil {
		return nil, err
	}
	// Policies run whether or not files are written; the run directory's writers and
	// the checkpoint manager are added around the user's callbacks.
	if t.cfg.Patience > 0 {
		early, err := NewEarlyStopping(t.cfg.Monitor, t.cfg.MonitorMode, t.cfg.Patience, 0)
		if err != nil {
			return nil, err
		}
		t.callbacks = append([]Callback{early}, t.callbacks...)
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
	torch.ManualSeed(t.cfg.Seed)
	if t.cfg.Deterministic {
		torch.SetDeterministic(true)
	}
	if t.cfg.Threads > 0 {
		torch.SetNumThreads(t.cfg.Threads)
	}
	return nil
}

// Config returns the Trainer's settings as its options made them (and as config.json
// and every checkpoint record them). It is a copy: the settings are the options'.
func (t *Trainer) Config() Config { return t.cfg }

// Strategy returns how the trainer spreads over processes (SingleProcess, DataParallel,
// FullyShardedDataParallel).
func (t *Trainer) Strategy() Strategy { return t.strategy }

// IsMain reports whether this trainer writes files and output: true for a single
// process and for rank 0.
func (t *Trainer) IsMain() bool { return t.strategy.IsMain() }

// Stop asks the trainer to stop after the current epoch (callbacks call it).
func (t *Trainer) Stop(reason string) {
	if t.stopReason == "" {
		t.stopReason = reason
	}
}

// StopReason says why the last run stopped early, "" when it did not.
func (t *Trainer) StopReason() string { return t.stopReason }

// Run trains until Config.Epochs epochs are complete or, with a step budget
// (WithMaxSteps), until Config.MaxSteps optimizer steps are. Calling it again after a
// RunTo/RunFor or a resume continues where training stopped.
func (t *Trainer) Run(ctx context.Context) error {
	if t.cfg.MaxSteps > 0 {
		// Enough epochs for the budget, which ends the run (mid-epoch if it falls there).
		perEpoch := max((t.Train.Len()+t.cfg.Accumulation-1)/t.cfg.Accumulation, 1)
		return t.RunTo(ctx, (t.cfg.MaxSteps+perEpoch-1)/perEpoch)
	}
	return t.RunTo(ctx, t.cfg.Epochs)
}

// budgetSpent reports whether the step budget (WithMaxSteps) is used up.
func (t *Trainer) budgetSpent() bool {
	return t.cfg.MaxSteps > 0 && t.GlobalStep >= int64(t.cfg.MaxSteps)
}

// RunFor trains n more epochs.
func (t *Trainer) RunFor(ctx context.Context, n int) error { return t.RunTo(ctx, t.Epoch+n) }

// RunTo trains until epoch target is complete (the seed's trainer(target)). When target
// is already reached it trains nothing and says so, where the seed silently did nothing.
// A *torch.Error panic (a shape mismatch in a step) comes back as an error naming the
// epoch and batch; any other panic propagates with its stack.
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
	if f, ok := t.strategy.(*FullyShardedDataParallel); ok {
		f.running = true
		defer func() { f.running = false }()
	}
	t.stopReason = ""
	if target <= t.Epoch && t.BatchInEpoch == 0 {
		t.printf("trainer: already at epoch %d of %d; nothing to train (use RunFor to train more)\n", t.Epoch, target)
		return nil
	}
	if t.budgetSpent() {
		t.printf("trainer: already at step %d of %d; nothing to train (raise the step budget to train more)\n", t.GlobalStep, t.cfg.MaxSteps)
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
			t.printf("trainer: stopping at epoch %d, step %d: %s\n", t.Epoch, t.GlobalStep, t.stopReason)
			break
		}
		if t.budgetSpent() {
			break
		}
	}
	if f, ok := t.strategy.(*FullyShardedDataParallel); ok {
		// The caller (and TrainEnd) gets the whole model, resharded units included.
		if err := f.Unshard(); err != nil {
			return err
		}
	}
	t.printf("===== training done: best %s %.4f =====\n", t.cfg.Monitor, t.BestMetric)
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
	// As PEFT's print_trainable_parameters, so that a LoRA run shows how little it trains.
	total, trainable := nn.NumParameters(t.Model), int64(0)
	for _, p := range nn.TrainableParameters(t.Model) {
		trainable += p.Numel()
	}
	t.printf("trainable params: %s || all params: %s || trainable%%: %.4f\n",
		groupDigits(trainable), groupDigits(total), 100*float64(trainable)/float64(max(total, 1)))
	t.printf("train samples: %d (%d batches)\n", t.Train.Sampler().Len(), t.Train.Len())
	if t.Val != nil {
		t.printf("val samples: %d\n", t.Val.Sampler().Len())
	}
	if t.RunDir != "" {
		t.printf("run dir: %s\n", t.RunDir)
	}
}

// groupDigits writes n with thousands separators, as Python's format(n, ",d").
func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	digits := strings.TrimPrefix(s, "-")
	var b strings.Builder
	b.WriteString(s[:len(s)-len(digits)]) // the sign
	for i, c := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func (t *Trainer) fire(e Event) error {
	for _, cb := range t.callbacks {
		if !eventsOf(cb).Has(e) {
			continue
		}
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

// InterruptedError is returned when a run is cancelled (context, SIGINT, SIGTERM) after
// the current step finished and last.pt was written.
type InterruptedError struct {
	Cause      error
	Checkpoint string
	Where      string
}

func (e *InterruptedError) Error() string {
	return fmt.Sprintf("interrupted at %s (%v); state saved to %s; resume from it with Trainer.LoadCheckpoint", e.Where, e.Cause, e.Checkpoint)
}

// Unwrap returns the cause (context.Canceled, for example).
func (e *InterruptedError) Unwrap() error { return e.Cause }
