package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gotrain/gotrain/internal/fsutil"
	"github.com/gotrain/gotrain/trainer"
)

// Config is the command's configuration: what a --config file and the flags set. The
// Trainer's own settings are the embedded trainer.Config; the rest (data, model,
// optimizer, scheduler, run directory) is the command's, which it builds the Trainer
// from and records in the run (trainer.WithRunConfig), so --resume reads it back.
type Config struct {
	// Experiment names the run: its directory is RunsDir/Experiment.
	Experiment string `json:"experiment" yaml:"experiment"`
	RunsDir    string `json:"runs_dir" yaml:"runs_dir"`

	// Model is a built-in model's name (mlp, cnn, resnet18, vit, gpt) or a Hugging Face
	// model directory (config.json, safetensors, tokenizer.json) to fine-tune.
	Model string `json:"model" yaml:"model"`
	// DType is the dtype of a Hugging Face model's weights while training ("" or
	// float32, bfloat16, float16).
	DType string `json:"dtype,omitempty" yaml:"dtype"`
	// LoRA: rank (0: no adapters, the whole model trains), alpha, dropout and the
	// target modules ("q_proj,v_proj" or "all-linear"), with PEFT's meanings.
	LoraR       int     `json:"lora_r,omitempty" yaml:"lora_r"`
	LoraAlpha   float64 `json:"lora_alpha,omitempty" yaml:"lora_alpha"`
	LoraDropout float64 `json:"lora_dropout,omitempty" yaml:"lora_dropout"`
	LoraTargets string  `json:"lora_targets,omitempty" yaml:"lora_targets"`
	// GradientCheckpointing recomputes each decoder layer's activations in the
	// backward pass instead of keeping them.
	GradientCheckpointing bool `json:"gradient_checkpointing,omitempty" yaml:"gradient_checkpointing"`
	// FSDP shards the trainable parameters' gradients and optimizer state across the
	// ranks (trainer.FullyShardedDataParallel) instead of data parallelism's replicas.
	FSDP bool `json:"fsdp,omitempty" yaml:"fsdp"`
	// FSDPReshard, with FSDP, also frees each decoder layer's parameters between its
	// forward and its backward and between steps (ZeRO-3, FSDP2's reshard_after_forward).
	FSDPReshard bool `json:"fsdp_reshard,omitempty" yaml:"fsdp_reshard"`
	// FSDPMixedPrecision, with FSDP, is the mixed-precision policy: "bf16" keeps the
	// model's parameters in bf16 (gathered in bf16, gradients reduce-scattered in fp32)
	// over fp32 shards and optimizer state (trainer.FSDPMixedPrecision); "" is off.
	FSDPMixedPrecision string `json:"fsdp_mixed_precision,omitempty" yaml:"fsdp_mixed_precision"`
	// DataDir is the training data: the Fashion-MNIST directory (the default), an
	// ImageFolder tree, a CSV file, a text file or a token file.
	DataDir string `json:"data_dir" yaml:"data_dir"`
	// ImageSize > 0 resizes ImageFolder images to ImageSize x ImageSize.
	ImageSize int `json:"image_size,omitempty" yaml:"image_size"`
	// ValSplit in (0, 1) holds out that fraction of a single folder or file for validation.
	ValSplit float64 `json:"val_split,omitempty" yaml:"val_split"`
	// LabelColumn names a CSV's label column; the other columns are features.
	LabelColumn string `json:"label_column,omitempty" yaml:"label_column"`
	// BlockSize is a text's context length.
	BlockSize int `json:"block_size,omitempty" yaml:"block_size"`
	// Packing keeps the documents packed into a model directory's text windows apart:
	// positions restart at each document and attention stays within it
	// (data.LMOptions.SeparateDocuments); on {"messages"} data it packs whole
	// conversations into windows of BlockSize tokens the same way
	// (data.ChatOptions.Packing).
	Packing bool `json:"packing,omitempty" yaml:"packing"`
	// ChatDate (YYYY-MM-DD) is the date a chat template's strftime_now sees when
	// {"messages"} data is rendered; the run records the day it started ("" on the
	// command line), so a resumed run renders the same text. TemplateKwargs are further
	// template variables (enable_thinking: false).
	ChatDate       string         `json:"chat_date,omitempty" yaml:"chat_date"`
	TemplateKwargs templateKwargs `json:"template_kwargs,omitempty" yaml:"template_kwargs"`
	// Synthetic > 0 trains on that many seeded synthetic samples instead of the data set;
	// Limit > 0 uses only the first Limit samples (smoke runs).
	Synthetic int `json:"synthetic,omitempty" yaml:"synthetic"`
	Limit     int `json:"limit,omitempty" yaml:"limit"`
	BatchSize int `json:"batch_size" yaml:"batch_size"`
	Workers   int `json:"workers" yaml:"workers"`

	Optimizer   string  `json:"optimizer" yaml:"optimizer"`
	LR          float64 `json:"lr" yaml:"lr"`
	WeightDecay float64 `json:"weight_decay" yaml:"weight_decay"`
	Momentum    float64 `json:"momentum" yaml:"momentum"`
	// AdamKernel is "fused" (PyTorch's fused=True Adam/AdamW kernels, one pass per
	// parameter; the default) or "foreach" (PyTorch's default implementation, equal to
	// it to the last bit).
	AdamKernel string `json:"adam_kernel" yaml:"adam_kernel"`
	Scheduler  string `json:"scheduler" yaml:"scheduler"`
	// WarmupSteps or WarmupRatio (a fraction of the run's optimizer steps, rounded up,
	// as transformers does) raise the learning rate linearly from 0 before the
	// schedule; a warmup, or a step budget (max_steps), makes the scheduler step per
	// optimizer step.
	WarmupSteps int     `json:"warmup_steps,omitempty" yaml:"warmup_steps"`
	WarmupRatio float64 `json:"warmup_ratio,omitempty" yaml:"warmup_ratio"`

	trainer.Config `yaml:",inline"`
}

// defaultConfig is `make train`'s configuration: the small CNN on Fashion-MNIST with
// Adam and a cosine schedule.
func defaultConfig() Config {
	return Config{
		RunsDir:     "runs",
		Model:       "cnn",
		LoraAlpha:   16,
		LoraTargets: "q_proj,v_proj",
		BatchSize:   128,
		Workers:     2,
		Optimizer:   "adam",
		LR:          1e-3,
		AdamKernel:  "fused",
		Scheduler:   "cosine",
		Config:      trainer.DefaultConfig(),
	}
}

// runDir returns RunsDir/Experiment, choosing an experiment id from the model and the
// time ("cnn-20261201-134502") when there is none.
func (c *Config) runDir() string {
	if c.Experiment == "" {
		c.Experiment = filepath.Base(c.Model) + "-" + time.Now().Format("20060102-150405")
	}
	if c.RunsDir == "" {
		c.RunsDir = "runs"
	}
	return filepath.Join(c.RunsDir, c.Experiment)
}

// validate reports the first field out of its range, by its config name.
func (c Config) validate() error {
	ints := []struct {
		name string
		v    int
		min  int
	}{
		{"batch_size", c.BatchSize, 1}, {"workers", c.Workers, 0}, {"synthetic", c.Synthetic, 0},
		{"limit", c.Limit, 0}, {"image_size", c.ImageSize, 0}, {"block_size", c.BlockSize, 0}, {"lora_r", c.LoraR, 0},
		{"warmup_steps", c.WarmupSteps, 0},
	}
	for _, f := range ints {
		if f.v < f.min {
			return &trainer.FieldError{Field: f.name, Msg: fmt.Sprintf("must be >= %d, got %d", f.min, f.v)}
		}
	}
	floats := []struct {
		name string
		v    float64
		ok   bool
		rng  string
	}{
		{"lr", c.LR, c.LR > 0 && !math.IsInf(c.LR, 1), "a finite number > 0"},
		{"weight_decay", c.WeightDecay, c.WeightDecay >= 0 && !math.IsInf(c.WeightDecay, 1), "a finite number >= 0"},
		{"momentum", c.Momentum, c.Momentum >= 0 && c.Momentum < 1, "in [0, 1)"},
		{"val_split", c.ValSplit, c.ValSplit >= 0 && c.ValSplit < 1, "in [0, 1) (0: none)"},
		{"lora_alpha", c.LoraAlpha, c.LoraAlpha > 0 && !math.IsInf(c.LoraAlpha, 1), "a finite number > 0"},
		{"lora_dropout", c.LoraDropout, c.LoraDropout >= 0 && c.LoraDropout < 1, "in [0, 1)"},
		{"warmup_ratio", c.WarmupRatio, c.WarmupRatio >= 0 && c.WarmupRatio < 1, "in [0, 1) (0: none)"},
	}
	for _, f := range floats {
		if !f.ok { // NaN fails every comparison, so it lands here too
			return &trainer.FieldError{Field: f.name, Msg: fmt.Sprintf("must be %s, got %g", f.rng, f.v)}
		}
	}
	if _, err := parseChatDate(c.ChatDate); err != nil {
		return &trainer.FieldError{Field: "chat_date", Msg: err.Error()}
	}
	if c.WarmupSteps > 0 && c.WarmupRatio > 0 {
		return &trainer.FieldError{Field: "warmup_ratio", Msg: "and warmup_steps are two ways to say one thing: give one"}
	}
	if c.FSDPReshard && !c.FSDP {
		return &trainer.FieldError{Field: "fsdp_reshard", Msg: "needs fsdp (--fsdp): it reshards sharded training"}
	}
	if c.FSDPMixedPrecision != "" && c.FSDPMixedPrecision != "bf16" {
		return &trainer.FieldError{Field: "fsdp_mixed_precision", Msg: fmt.Sprintf("must be bf16 (or empty: off), got %q", c.FSDPMixedPrecision)}
	}
	if c.FSDPMixedPrecision != "" && !c.FSDP {
		return &trainer.FieldError{Field: "fsdp_mixed_precision", Msg: "needs fsdp (--fsdp): it is sharded training's policy"}
	}
	if c.AdamKernel != "fused" && c.AdamKernel != "foreach" {
		return &trainer.FieldError{Field: "adam_kernel", Msg: fmt.Sprintf("must be fused or foreach, got %q", c.AdamKernel)}
	}
	return c.Config.Validate()
}

// trainerOptions turns the Trainer's part of the command's configuration into the
// Trainer's options, field by field (options are the one way to configure a Trainer).
// The scheduler's interval goes with the scheduler (trainer.WithScheduler).
func trainerOptions(c trainer.Config) []trainer.Option {
	return []trainer.Option{
		trainer.WithEpochs(c.Epochs), trainer.WithAMP(c.AMP), trainer.WithGradClip(c.GradClip),
		trainer.WithAccumulation(c.Accumulation), trainer.WithEarlyStopping(c.Patience),
		trainer.WithMonitor(c.Monitor, c.MonitorMode), trainer.WithTopK(c.TopK), trainer.WithClassNames(c.ClassNames),
		trainer.WithSeed(c.Seed), trainer.WithDeterministic(c.Deterministic), trainer.WithDevice(c.Device), trainer.WithCUDAGraphs(c.CUDAGraphs),
		trainer.WithThreads(c.Threads), trainer.WithLogEvery(c.LogEvery),
		trainer.WithMaxSteps(c.MaxSteps), trainer.WithEvalEvery(c.EvalEvery), trainer.WithSaveEvery(c.SaveEvery),
	}
}

// bindFlags binds the command's flags to c's fields: parsing sets exactly the fields of
// the flags given, so flags parsed over a config read from a file or a checkpoint
// override just those.
func bindFlags(fs *flag.FlagSet, c *Config) {
	fs.IntVar(&c.Synthetic, "synthetic", c.Synthetic, "train on N seeded synthetic samples instead of Fashion-MNIST (for machines without the data)")
	fs.IntVar(&c.Limit, "limit", c.Limit, "use only the first N training samples (smoke runs)")
	fs.StringVar(&c.Model, "model", c.Model, "model: mlp, cnn, resnet18, vit, gpt (for a text file), or a Hugging Face model directory to fine-tune")
	fs.StringVar(&c.DType, "dtype", c.DType, "a Hugging Face model's weight dtype while training: float32, bfloat16, float16")
	fs.IntVar(&c.LoraR, "lora-r", c.LoraR, "LoRA rank for a Hugging Face model (0: train the whole model)")
	fs.Float64Var(&c.LoraAlpha, "lora-alpha", c.LoraAlpha, "LoRA alpha (scaling alpha/r)")
	fs.Float64Var(&c.LoraDropout, "lora-dropout", c.LoraDropout, "LoRA dropout")
	fs.StringVar(&c.LoraTargets, "lora-targets", c.LoraTargets, "LoRA target modules: names (q_proj,v_proj; Phi-3's fused qkv_proj,gate_up_proj) or all-linear")
	fs.BoolVar(&c.FSDP, "fsdp", c.FSDP, "with several ranks: shard gradients and optimizer state across them (FSDP, ZeRO-2 memory; sharded checkpoints) instead of data parallelism")
	fs.BoolVar(&c.FSDPReshard, "fsdp-reshard", c.FSDPReshard, "with --fsdp: also free each decoder layer's parameters outside its forward and backward (ZeRO-3)")
	fs.StringVar(&c.FSDPMixedPrecision, "fsdp-mixed-precision", c.FSDPMixedPrecision, "with --fsdp: bf16 keeps the model's parameters in bf16 (gathered in bf16, reduced in fp32) over fp32 shards and optimizer state")
	fs.BoolVar(&c.GradientCheckpointing, "gradient-checkpointing", c.GradientCheckpointing, "recompute each decoder layer's activations in backward (less memory, more time)")
	fs.StringVar(&c.DataDir, "data", c.DataDir, "training data: an ImageFolder tree (with train/ and val/, or --val-split), a CSV file (--label-column), a text file (--model gpt) or the Fashion-MNIST directory (default: Debian's)")
	fs.IntVar(&c.ImageSize, "image-size", c.ImageSize, "resize ImageFolder images to N x N (0: the data's size)")
	fs.Float64Var(&c.ValSplit, "val-split", c.ValSplit, "hold out this fraction of a single folder or file for validation")
	fs.StringVar(&c.LabelColumn, "label-column", c.LabelColumn, "a CSV's label column (the other columns are the features)")
	fs.IntVar(&c.BlockSize, "block-size", c.BlockSize, "a text file's context length in bytes (0: 128)")
	fs.BoolVar(&c.Packing, "packing", c.Packing, "with --model DIR: documents packed into a text window restart their positions and attend within themselves only; {\"messages\"} data is packed into windows of whole conversations, each apart")
	fs.StringVar(&c.ChatDate, "chat-date", c.ChatDate, "the `YYYY-MM-DD` a chat template's strftime_now sees for {\"messages\"} data (default today, recorded for --resume)")
	fs.Var(&c.TemplateKwargs, "template-kwarg", "a chat template variable `KEY=JSON` for {\"messages\"} data, such as enable_thinking=false (repeatable)")
	fs.IntVar(&c.Epochs, "epochs", c.Epochs, "epochs to train")
	fs.IntVar(&c.BatchSize, "batch-size", c.BatchSize, "batch size")
	fs.IntVar(&c.Workers, "workers", c.Workers, "data loader worker goroutines")
	fs.StringVar(&c.Optimizer, "optimizer", c.Optimizer, "optimizer: sgd, adam, adamw, rmsprop, adagrad")
	fs.Float64Var(&c.LR, "lr", c.LR, "learning rate")
	fs.Float64Var(&c.WeightDecay, "weight-decay", c.WeightDecay, "weight decay")
	fs.StringVar(&c.AdamKernel, "adam-kernel", c.AdamKernel, "Adam/AdamW kernels: fused (PyTorch's fused=True) or foreach (PyTorch's default arithmetic, to the last bit)")
	fs.Float64Var(&c.Momentum, "momentum", c.Momentum, "SGD momentum")
	fs.StringVar(&c.Scheduler, "scheduler", c.Scheduler, "LR scheduler: none, step, cosine, exponential, onecycle, plateau, linear (to 0 at the run's last step), constant")
	fs.IntVar(&c.WarmupSteps, "warmup-steps", c.WarmupSteps, "optimizer steps of linear warmup before the schedule (linear, constant, cosine)")
	fs.Float64Var(&c.WarmupRatio, "warmup-ratio", c.WarmupRatio, "warmup as a fraction of the run's optimizer steps, rounded up")
	fs.IntVar(&c.MaxSteps, "max-steps", c.MaxSteps, "train for N optimizer steps instead of --epochs (ending mid-epoch if it falls there)")
	fs.IntVar(&c.EvalEvery, "eval-every", c.EvalEvery, "validate, record and checkpoint every N optimizer steps instead of every epoch")
	fs.IntVar(&c.SaveEvery, "save-every", c.SaveEvery, "also save checkpoints/last.pt (and a model directory's hf/) every N optimizer steps")
	fs.TextVar(&c.AMP, "amp", c.AMP, "mixed precision: none, bf16, fp16 (fp16 needs CUDA)")
	fs.Float64Var(&c.GradClip, "grad-clip", c.GradClip, "clip the gradient norm to this value (0: off)")
	fs.IntVar(&c.Accumulation, "accumulation", c.Accumulation, "micro-batches per optimizer step")
	fs.IntVar(&c.Patience, "patience", c.Patience, "early-stopping patience in epochs (0: off)")
	fs.StringVar(&c.Monitor, "monitor", c.Monitor, "metric for the best checkpoint and early stopping")
	fs.TextVar(&c.MonitorMode, "monitor-mode", c.MonitorMode, "whether --monitor is minimised or maximised: auto (by its name), min, max")
	fs.IntVar(&c.TopK, "top-k", c.TopK, "also keep the k best epochs' checkpoints")
	fs.Int64Var(&c.Seed, "seed", c.Seed, "random seed")
	fs.BoolVar(&c.Deterministic, "deterministic", c.Deterministic, "deterministic algorithms (bitwise-repeatable runs)")
	fs.BoolVar(&c.CUDAGraphs, "cuda-graphs", c.CUDAGraphs, "run the training step as a CUDA graph (CUDA only; SGD or fused Adam/AdamW, one process, no fp16 or accumulation)")
	fs.StringVar(&c.Device, "device", c.Device, "device: auto, cpu, cuda, cuda:N")
	fs.IntVar(&c.Threads, "threads", c.Threads, "libtorch intra-op threads (0: libtorch's default)")
	fs.StringVar(&c.Experiment, "experiment", c.Experiment, "experiment id (run directory name; default model-date-time)")
	fs.StringVar(&c.RunsDir, "runs-dir", c.RunsDir, "parent directory of run directories")
	fs.IntVar(&c.LogEvery, "log-every", c.LogEvery, "batches between progress lines when not on a terminal")
}

// maxConfigFile bounds a --config file: real ones are a few hundred bytes.
const maxConfigFile = 1 << 20

// loadConfig reads a JSON or YAML config file (by extension; YAML otherwise) over base,
// so unset fields keep base's values. Unknown keys, an empty file and a second YAML
// document are errors; the file must be a regular file.
func loadConfig(path string, base Config) (Config, error) {
	b, err := fsutil.ReadFile(path, maxConfigFile)
	if err != nil {
		return base, fmt.Errorf("--config: %w", err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return base, fmt.Errorf("--config %s is empty", path)
	}
	c := base
	if strings.EqualFold(filepath.Ext(path), ".json") {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err = dec.Decode(&c); err == nil && dec.More() {
			err = errors.New("more than one JSON value")
		}
	} else {
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err = dec.Decode(&c); err == nil {
			var extra any
			if dec.Decode(&extra) != io.EOF {
				err = errors.New("more than one YAML document")
			}
		}
	}
	if err != nil {
		return base, fmt.Errorf("config %s: %w", path, err)
	}
	return c, c.validate()
}
