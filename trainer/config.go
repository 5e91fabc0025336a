package trainer

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/gotrain/gotrain/amp"
)

// Config is the experiment configuration: what `cmd/train` reads from flags or a
// --config file, what the Trainer writes to config.json in the run directory and stores
// in every checkpoint. Fields the trainer does not use itself (model, optimizer, data)
// are carried for the record, so a run directory says how it was made.
type Config struct {
	// Experiment identifies the run: the run directory is RunsDir/Experiment.
	Experiment string `json:"experiment" yaml:"experiment"`
	RunsDir    string `json:"runs_dir" yaml:"runs_dir"`

	Model string `json:"model" yaml:"model"`
	// DataDir is the training data: the Fashion-MNIST directory (the default), an
	// ImageFolder tree, a CSV file or a text file (cmd/train's --data).
	DataDir string `json:"data_dir" yaml:"data_dir"`
	// ImageSize > 0 resizes ImageFolder images to ImageSize x ImageSize.
	ImageSize int `json:"image_size,omitempty" yaml:"image_size"`
	// ValSplit in (0, 1) holds out that fraction of a single folder or file for validation.
	ValSplit float64 `json:"val_split,omitempty" yaml:"val_split"`
	// LabelColumn names a CSV's label column; the other columns are features.
	LabelColumn string `json:"label_column,omitempty" yaml:"label_column"`
	// BlockSize is a text's context length (cmd/train's --block-size).
	BlockSize int `json:"block_size,omitempty" yaml:"block_size"`
	// ClassNames are the data's class names in class-index order (ImageFolder folders,
	// CSV string labels), recorded so that a service maps outputs back to names.
	ClassNames []string `json:"class_names,omitempty" yaml:"class_names"`
	// Synthetic > 0 trains on that many seeded synthetic samples instead of the data set;
	// Limit > 0 uses only the first Limit samples (smoke runs).
	Synthetic int `json:"synthetic,omitempty" yaml:"synthetic"`
	Limit     int `json:"limit,omitempty" yaml:"limit"`
	Epochs    int `json:"epochs" yaml:"epochs"`
	BatchSize int `json:"batch_size" yaml:"batch_size"`
	Workers   int `json:"workers" yaml:"workers"`

	Optimizer   string  `json:"optimizer" yaml:"optimizer"`
	LR          float64 `json:"lr" yaml:"lr"`
	WeightDecay float64 `json:"weight_decay" yaml:"weight_decay"`
	Momentum    float64 `json:"momentum" yaml:"momentum"`
	// Fused selects the fused Adam/AdamW kernels (PyTorch's fused=True; the default):
	// one pass per parameter instead of seven multi-tensor operations. False gives
	// PyTorch's default implementation, equal to it to the last bit.
	Fused     bool   `json:"fused" yaml:"fused"`
	Scheduler string `json:"scheduler" yaml:"scheduler"`
	// SchedulerInterval is PerEpoch ("epoch": step the scheduler after each epoch, the
	// seed's behaviour) or PerStep ("step": after each optimizer step that was not skipped).
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
	TopK        int       `json:"top_k" yaml:"top_k"`

	Seed          int64  `json:"seed" yaml:"seed"`
	Deterministic bool   `json:"deterministic" yaml:"deterministic"`
	Device        string `json:"device" yaml:"device"`
	Threads       int    `json:"threads" yaml:"threads"`
	// LogEvery is the number of batches between progress lines when stdout is not a
	// terminal (default: about ten lines an epoch).
	LogEvery int `json:"log_every" yaml:"log_every"`
}

// DefaultConfig is the configuration `make train` uses: the small CNN on Fashion-MNIST.
func DefaultConfig() Config {
	return Config{
		RunsDir:           "runs",
		Model:             "cnn",
		Epochs:            5,
		BatchSize:         128,
		Workers:           2,
		Optimizer:         "adam",
		LR:                1e-3,
		Fused:             true,
		Scheduler:         "cosine",
		SchedulerInterval: PerEpoch,
		Accumulation:      1,
		Monitor:           "val_acc",
		Seed:              42,
	}
}

// LoadConfig reads a JSON or YAML config file (by extension; YAML otherwise) over base,
// so unset fields keep base's values. Unknown keys are an error naming them.
func LoadConfig(path string, base Config) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return base, err
	}
	c := base
	if strings.EqualFold(filepath.Ext(path), ".json") {
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		err = dec.Decode(&c)
	} else {
		dec := yaml.NewDecoder(strings.NewReader(string(b)))
		dec.KnownFields(true)
		err = dec.Decode(&c)
	}
	if err != nil {
		return base, fmt.Errorf("config %s: %w", path, err)
	}
	return c, c.Validate()
}

// Validate reports the first field out of its range, by its config name.
func (c Config) Validate() error {
	ints := []struct {
		name string
		v    int
		min  int
	}{
		{"epochs", c.Epochs, 1}, {"batch_size", c.BatchSize, 1}, {"workers", c.Workers, 0},
		{"accumulation", c.Accumulation, 1}, {"patience", c.Patience, 0}, {"top_k", c.TopK, 0},
		{"threads", c.Threads, 0}, {"log_every", c.LogEvery, 0}, {"synthetic", c.Synthetic, 0},
		{"limit", c.Limit, 0}, {"image_size", c.ImageSize, 0}, {"block_size", c.BlockSize, 0},
	}
	for _, f := range ints {
		if f.v < f.min {
			return &FieldError{Field: f.name, Msg: fmt.Sprintf("must be >= %d, got %d", f.min, f.v)}
		}
	}
	// Each float field is checked against its range, written as in the message.
	floats := []struct {
		name string
		v    float64
		ok   bool
		rng  string
	}{
		{"lr", c.LR, c.LR > 0 && !math.IsInf(c.LR, 1), "a finite number > 0"},
		{"weight_decay", c.WeightDecay, c.WeightDecay >= 0 && !math.IsInf(c.WeightDecay, 1), "a finite number >= 0"},
		{"momentum", c.Momentum, c.Momentum >= 0 && c.Momentum < 1, "in [0, 1)"},
		{"grad_clip", c.GradClip, c.GradClip >= 0 && !math.IsInf(c.GradClip, 1), "a finite number >= 0 (0: off)"},
		{"val_split", c.ValSplit, c.ValSplit >= 0 && c.ValSplit < 1, "in [0, 1) (0: none)"},
	}
	for _, f := range floats {
		if !f.ok { // NaN fails every comparison, so it lands here too
			return &FieldError{Field: f.name, Msg: fmt.Sprintf("must be %s, got %g", f.rng, f.v)}
		}
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

// ParseConfigJSON decodes a config saved in a checkpoint or config.json over base.
func ParseConfigJSON(s string, base Config) (Config, error) {
	c := base
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		return base, fmt.Errorf("config: %w", err)
	}
	return c, c.Validate()
}
