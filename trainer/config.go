package trainer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Config is the experiment configuration: what `cmd/train` reads from flags or a
// --config file, what the Trainer writes to config.json in the run directory and stores
// in every checkpoint. Fields the trainer does not use itself (model, optimizer, data)
// are carried for the record, so a run directory says how it was made.
type Config struct {
	// Experiment identifies the run: the run directory is RunsDir/Experiment.
	Experiment string `json:"experiment" yaml:"experiment"`
	RunsDir    string `json:"runs_dir" yaml:"runs_dir"`

	Model   string `json:"model" yaml:"model"`
	DataDir string `json:"data_dir" yaml:"data_dir"`
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
	// SchedulerInterval is "epoch" (step the scheduler after each epoch, the seed's
	// behaviour) or "step" (after each optimizer step that was not skipped).
	SchedulerInterval string `json:"scheduler_interval" yaml:"scheduler_interval"`

	// AMP is "" or "none", "bf16" or "fp16" (fp16 uses a GradScaler; CUDA only).
	AMP          string  `json:"amp" yaml:"amp"`
	GradClip     float64 `json:"grad_clip" yaml:"grad_clip"`
	Accumulation int     `json:"accumulation" yaml:"accumulation"`
	// Patience > 0 adds early stopping on Monitor.
	Patience int `json:"patience" yaml:"patience"`
	// Monitor is the metric that decides the best checkpoint (and early stopping):
	// "val_acc" (maximised, the seed's choice) or "val_loss" (minimised), or a user metric.
	Monitor string `json:"monitor" yaml:"monitor"`
	TopK    int    `json:"top_k" yaml:"top_k"`

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
		SchedulerInterval: "epoch",
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

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Epochs < 0:
		return fmt.Errorf("config: epochs must be >= 0, got %d", c.Epochs)
	case c.BatchSize < 0:
		return fmt.Errorf("config: batch_size must be > 0, got %d", c.BatchSize)
	case c.Accumulation < 0:
		return fmt.Errorf("config: accumulation must be >= 1, got %d", c.Accumulation)
	case c.GradClip < 0:
		return fmt.Errorf("config: grad_clip must be >= 0, got %g", c.GradClip)
	}
	switch c.AMP {
	case "", "none", "bf16", "fp16":
	default:
		return fmt.Errorf("config: amp must be none, bf16 or fp16, got %q", c.AMP)
	}
	switch c.SchedulerInterval {
	case "", "epoch", "step":
	default:
		return fmt.Errorf("config: scheduler_interval must be epoch or step, got %q", c.SchedulerInterval)
	}
	return nil
}

// monitorMaximises reports whether larger values of the monitored metric are better.
func monitorMaximises(name string) bool {
	return !strings.Contains(name, "loss")
}

// ParseConfigJSON decodes a config saved in a checkpoint or config.json over base.
func ParseConfigJSON(s string, base Config) (Config, error) {
	c := base
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		return base, fmt.Errorf("config: %w", err)
	}
	return c, c.Validate()
}
