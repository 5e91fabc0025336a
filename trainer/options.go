package trainer

import (
	"encoding/json"
	"io"

	"github.com/gotrain/gotrain/amp"
	"github.com/gotrain/gotrain/torch/optim"
)

// Option configures a Trainer. Options are the one way to configure it: each setting
// starts at DefaultConfig's value, an option changes it, New validates the result, and
// Trainer.Config reports it. A program with its own configuration (cmd/train's flags
// and files) turns it into options.
type Option func(*Trainer) error

// WithEpochs sets the number of epochs Run trains to.
func WithEpochs(n int) Option { return func(t *Trainer) error { t.cfg.Epochs = n; return nil } }

// WithDevice sets the device ("" or "auto" picks cuda:0 when available, else the CPU).
func WithDevice(dev string) Option {
	return func(t *Trainer) error { t.cfg.Device = dev; return nil }
}

// WithAMP sets mixed precision: amp.Off, amp.BF16 or amp.FP16 (CUDA only).
func WithAMP(mode amp.Mode) Option { return func(t *Trainer) error { t.cfg.AMP = mode; return nil } }

// WithGradClip clips the total gradient norm to maxNorm (0 disables).
func WithGradClip(maxNorm float64) Option {
	return func(t *Trainer) error { t.cfg.GradClip = maxNorm; return nil }
}

// WithAccumulation accumulates gradients over k micro-batches per optimizer step.
func WithAccumulation(k int) Option {
	return func(t *Trainer) error { t.cfg.Accumulation = k; return nil }
}

// WithScheduler steps s after every epoch (PerEpoch) or every optimizer step (PerStep).
// A ReduceLROnPlateau-style scheduler (optim.MetricScheduler) is stepped with the
// monitored metric after validation.
func WithScheduler(s optim.Scheduler, every Interval) Option {
	return func(t *Trainer) error { t.Scheduler = s; t.cfg.SchedulerInterval = every; return nil }
}

// WithCallbacks adds callbacks, run in order after the built-in ones.
func WithCallbacks(cbs ...Callback) Option {
	return func(t *Trainer) error { t.callbacks = append(t.callbacks, cbs...); return nil }
}

// WithRunDir sets the run directory; "" writes no files.
func WithRunDir(dir string) Option { return func(t *Trainer) error { t.RunDir = dir; return nil } }

// WithOutput sends progress and summaries to w (default os.Stdout; io.Discard silences).
func WithOutput(w io.Writer) Option { return func(t *Trainer) error { t.Out = w; return nil } }

// WithSeed seeds libtorch's generators (and the config's record of it).
func WithSeed(seed int64) Option { return func(t *Trainer) error { t.cfg.Seed = seed; return nil } }

// WithDeterministic turns on deterministic algorithms.
func WithDeterministic(on bool) Option {
	return func(t *Trainer) error { t.cfg.Deterministic = on; return nil }
}

// WithMonitor sets the metric that picks the best checkpoint and that early stopping
// watches ("val_acc", "val_loss", "val_<metric>"), and whether it is maximised (Auto: by
// its name).
func WithMonitor(name string, mode Direction) Option {
	return func(t *Trainer) error { t.cfg.Monitor, t.cfg.MonitorMode = name, mode; return nil }
}

// WithEarlyStopping stops training after patience epochs without an improvement of the
// monitored metric (Config.Patience). It needs no run directory.
func WithEarlyStopping(patience int) Option {
	return func(t *Trainer) error { t.cfg.Patience = patience; return nil }
}

// WithModelConfig names the model in the checkpoint's model_config and in config.json
// (default: the model's Go type, "nn.Sequential"); cmd/train gives its --model name or
// the Hugging Face model_type.
func WithModelConfig(name string) Option {
	return func(t *Trainer) error { t.modelConfig = name; return nil }
}

// WithRunConfig records a program's own configuration (anything encoding/json
// writes: cmd/train's data path, model name, learning rate) in config.json and every
// checkpoint, under "run" in the Trainer's record, so a run directory says how the run
// was made and a resume can read it back (ReadRunConfig).
func WithRunConfig(v any) Option {
	return func(t *Trainer) (err error) {
		t.runConfig, err = json.Marshal(v)
		return err
	}
}

// WithClassNames records the data's class names, in class-index order, in config.json
// and in every checkpoint (key class_names).
func WithClassNames(names []string) Option {
	return func(t *Trainer) error { t.cfg.ClassNames = names; return nil }
}

// WithTerminateOnNaN switches the default stop on a NaN or infinite training loss,
// checked at every logging point (Config.LogEvery).
func WithTerminateOnNaN(on bool) Option {
	return func(t *Trainer) error { t.terminateNaN = on; return nil }
}

// WithMaxSteps budgets the run in optimizer steps (Config.MaxSteps): Run trains until
// GlobalStep reaches n, whatever the epochs, ending with an evaluation; a later Run with
// a larger budget goes on from there. 0 trains by epochs.
func WithMaxSteps(n int) Option { return func(t *Trainer) error { t.cfg.MaxSteps = n; return nil } }

// WithEvalEvery makes every n optimizer steps an evaluation point (Config.EvalEvery):
// validation, a History record carrying the step, the best and last checkpoints, early
// stopping and a metric scheduler then run there instead of at the epochs' ends, and
// Evaluated fires. Epochs still end (EpochBegin, EpochEnd, a per-epoch scheduler).
func WithEvalEvery(n int) Option { return func(t *Trainer) error { t.cfg.EvalEvery = n; return nil } }

// WithSaveEvery writes the run directory's checkpoints/last.pt every n optimizer steps
// too (Config.SaveEvery), from which a run resumes exactly, mid-epoch included.
func WithSaveEvery(n int) Option { return func(t *Trainer) error { t.cfg.SaveEvery = n; return nil } }

// WithTopK also keeps the checkpoints of the k best epochs by the monitored metric.
func WithTopK(k int) Option { return func(t *Trainer) error { t.cfg.TopK = k; return nil } }

// WithThreads sets libtorch's intra-op thread count (0: libtorch's default).
func WithThreads(n int) Option { return func(t *Trainer) error { t.cfg.Threads = n; return nil } }

// WithLogEvery sets the number of batches between logging points: progress lines, the
// read of the training metrics from the device and the NaN check (default: about ten
// an epoch).
func WithLogEvery(n int) Option { return func(t *Trainer) error { t.cfg.LogEvery = n; return nil } }
