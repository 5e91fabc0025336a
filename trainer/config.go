package trainer

import (
	"fmt"
	"math"

	"github.com/gotrain/gotrain/amp"
)

// Config is what the Trainer itself is configured with: how long to train, precision,
// clipping, accumulation, the metric it monitors, seeding, the device and logging. The
// model, data, optimizer and scheduler are the Trainer's arguments and options, not
// configuration; a program's own settings (cmd/train's data path, learning rate, ...)
// belong to the program, which can record them in the run with WithRunConfig. The
// Trainer writes Config to config.json in the run directory and stores it in every
// checkpoint, together with the names of the model, optimizer and scheduler it was
// given (see Trainer's doc).
type Config struct {
	Epochs int `json:"epochs" yaml:"epochs"`
	// MaxSteps > 0 is a budget in optimizer steps that replaces Epochs: the run ends
	// after that many steps, mid-epoch if it falls there, with an evaluation.
	MaxSteps int `json:"max_steps,omitempty" yaml:"max_steps"`
	// EvalEvery > 0 makes every EvalEvery optimizer steps the evaluation points
	// (validation, a History record, checkpoints, early stopping) instead of the
	// epochs' ends.
	EvalEvery int `json:"eval_every,omitempty" yaml:"eval_every"`
	// SaveEvery > 0 also writes the run directory's last.pt every SaveEvery steps.
	SaveEvery int `json:"save_every,omitempty" yaml:"save_every"`
	// SchedulerInterval is PerEpoch ("epoch": step the scheduler after each epoch, the
	// seed's behaviour) or PerStep ("step": after each optimizer step that was not
	// skipped). WithScheduler sets it.
	SchedulerInterval Interval `json:"scheduler_interval" yaml:"scheduler_interval"`

	// AMP is amp.Off ("none"), amp.BF16 ("bf16") or amp.FP16 ("fp16", with a GradScaler;
	// CUDA only).
	AMP          amp.Mode `json:"amp" yaml:"amp"`
	GradClip     float64  `json:"grad_clip" yaml:"grad_clip"`
	Accumulation int      `json:"accumulation" yaml:"accumulation"`
	// Patience > 0 adds early stopping on Monitor.
	Patience int `json:"patience" yaml:"patience"`
	// Monitor is the metric that decides the best checkpoint (and early stopping):
	// "val_acc" (the seed's choice), "val_loss", or any recorded metric.
	Monitor string `json:"monitor" yaml:"monitor"`
	// MonitorMode says whether Monitor is maximised or minimised; Auto takes it from the
	// metric's name (DirectionOf) and is an error for a name it does not know.
	MonitorMode Direction `json:"monitor_mode" yaml:"monitor_mode"`
	// TopK > 0 also keeps the checkpoints of the k best epochs.
	TopK int `json:"top_k" yaml:"top_k"`
	// ClassNames are the data's class names in class-index order, recorded in
	// config.json and every checkpoint so that a service maps outputs back to names.
	ClassNames []string `json:"class_names,omitempty" yaml:"class_names"`

	Seed          int64 `json:"seed" yaml:"seed"`
	Deterministic bool  `json:"deterministic" yaml:"deterministic"`
	// CUDAGraphs runs the training step as a CUDA graph (WithCUDAGraphs).
	CUDAGraphs bool   `json:"cuda_graphs,omitempty" yaml:"cuda_graphs"`
	Device     string `json:"device" yaml:"device"`
	Threads    int    `json:"threads" yaml:"threads"`
	// LogEvery is the number of batches between logging points: progress lines (when
	// the output is not a terminal), the read of the training metrics and the NaN
	// check (0: about ten an epoch).
	LogEvery int `json:"log_every" yaml:"log_every"`
}

// DefaultConfig is the Trainer's default configuration: 5 epochs, full precision, the
// best checkpoint by validation accuracy, seed 42.
func DefaultConfig() Config {
	return Config{
		Epochs:            5,
		SchedulerInterval: PerEpoch,
		Accumulation:      1,
		Monitor:           "val_acc",
		Seed:              42,
	}
}

// Validate reports the first field out of its range, by its config name.
func (c Config) Validate() error {
	ints := []struct {
		name string
		v    int
		min  int
	}{
		{"epochs", c.Epochs, 1}, {"accumulation", c.Accumulation, 1}, {"patience", c.Patience, 0},
		{"top_k", c.TopK, 0}, {"threads", c.Threads, 0}, {"log_every", c.LogEvery, 0},
		{"max_steps", c.MaxSteps, 0}, {"eval_every", c.EvalEvery, 0}, {"save_every", c.SaveEvery, 0},
	}
	for _, f := range ints {
		if f.v < f.min {
			return &FieldError{Field: f.name, Msg: fmt.Sprintf("must be >= %d, got %d", f.min, f.v)}
		}
	}
	if !(c.GradClip >= 0 && !math.IsInf(c.GradClip, 1)) { // NaN fails the comparison too
		return &FieldError{Field: "grad_clip", Msg: fmt.Sprintf("must be a finite number >= 0 (0: off), got %g", c.GradClip)}
	}
	if _, err := c.AMP.MarshalText(); err != nil {
		return &FieldError{Field: "amp", Msg: "must be none, bf16 or fp16"}
	}
	if _, err := c.SchedulerInterval.MarshalText(); err != nil {
		return &FieldError{Field: "scheduler_interval", Msg: "must be epoch or step"}
	}
	if c.Monitor == "" {
		return &FieldError{Field: "monitor", Msg: "must name a metric (val_acc, val_loss, ...)"}
	}
	if _, err := c.MonitorMode.resolve(c.Monitor); err != nil {
		return &FieldError{Field: "monitor_mode", Msg: fmt.Sprintf("must be min or max for monitor %q, a name that does not say whether it is maximised", c.Monitor)}
	}
	return nil
}

// FieldError is an invalid config field, named as in config files ("batch_size").
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return "config: " + e.Field + " " + e.Msg }

// MonitorDirection is the direction of the monitored metric, Min or Max: MonitorMode, or
// the one its name implies (Validate reports a name of unknown direction).
func (c Config) MonitorDirection() Direction {
	d, _ := c.MonitorMode.resolve(c.Monitor)
	return d
}
