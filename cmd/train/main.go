// Command train trains a model with gotrain's Trainer. By default it trains a small CNN
// on Fashion-MNIST (Debian's dataset-fashion-mnist) and writes the run directory
// runs/<experiment>/ with config.json, checkpoints/, history.jsonl, a TensorBoard event
// file and curves.png.
//
//	go run ./cmd/train                          # the default run
//	go run ./cmd/train --model mlp --epochs 3 --amp bf16
//	go run ./cmd/train --config exp.yaml --lr 3e-4   # flags override the file
//	go run ./cmd/train --resume runs/cnn-.../checkpoints/last.pt
//	go run ./cmd/train --nproc-per-node 2        # data-parallel on 2 local processes
//	torchrun --no-python --nproc-per-node 2 ./train ...   # the same, under torchrun
//
// SIGINT or SIGTERM finishes the current step, writes last.pt and exits with status 130,
// printing the command that resumes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch/distributed"
	"github.com/gotrain/gotrain/trainer"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "train:", err)
		var ie *trainer.InterruptedError
		if errors.As(err, &ie) {
			os.Exit(130)
		}
		var le *launchError // --nproc-per-node (launch.go): a failed rank's status
		if errors.As(err, &le) && le.code > 0 {
			os.Exit(le.code)
		}
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	c := trainer.DefaultConfig()
	configPath := fs.String("config", "", "JSON or YAML config file (flags given too override it)")
	resume := fs.String("resume", "", "checkpoint to resume from (its run directory and config are reused)")
	fs.IntVar(&c.Synthetic, "synthetic", c.Synthetic, "train on N seeded synthetic samples instead of Fashion-MNIST (for machines without the data)")
	fs.IntVar(&c.Limit, "limit", c.Limit, "use only the first N training samples (smoke runs)")
	fs.StringVar(&c.Model, "model", c.Model, "model: mlp, cnn, resnet18, vit, or gpt (for a text file)")
	fs.StringVar(&c.DataDir, "data", c.DataDir, "training data: an ImageFolder tree (with train/ and val/, or --val-split), a CSV file (--label-column), a text file (--model gpt) or the Fashion-MNIST directory (default: Debian's)")
	fs.IntVar(&c.ImageSize, "image-size", c.ImageSize, "resize ImageFolder images to N x N (0: the data's size)")
	fs.Float64Var(&c.ValSplit, "val-split", c.ValSplit, "hold out this fraction of a single folder or file for validation")
	fs.StringVar(&c.LabelColumn, "label-column", c.LabelColumn, "a CSV's label column (the other columns are the features)")
	fs.IntVar(&c.BlockSize, "block-size", c.BlockSize, "a text file's context length in bytes (0: 128)")
	fs.IntVar(&c.Epochs, "epochs", c.Epochs, "epochs to train")
	fs.IntVar(&c.BatchSize, "batch-size", c.BatchSize, "batch size")
	fs.IntVar(&c.Workers, "workers", c.Workers, "data loader worker goroutines")
	fs.StringVar(&c.Optimizer, "optimizer", c.Optimizer, "optimizer: sgd, adam, adamw, rmsprop, adagrad")
	fs.Float64Var(&c.LR, "lr", c.LR, "learning rate")
	fs.Float64Var(&c.WeightDecay, "weight-decay", c.WeightDecay, "weight decay")
	fs.BoolVar(&c.Fused, "fused", c.Fused, "fused Adam/AdamW kernels (PyTorch's fused=True); --fused=false for PyTorch's default arithmetic")
	fs.Float64Var(&c.Momentum, "momentum", c.Momentum, "SGD momentum")
	fs.StringVar(&c.Scheduler, "scheduler", c.Scheduler, "LR scheduler: none, step, cosine, exponential, onecycle, plateau")
	fs.TextVar(&c.AMP, "amp", c.AMP, "mixed precision: none, bf16, fp16 (fp16 needs CUDA)")
	fs.Float64Var(&c.GradClip, "grad-clip", c.GradClip, "clip the gradient norm to this value (0: off)")
	fs.IntVar(&c.Accumulation, "accumulation", c.Accumulation, "micro-batches per optimizer step")
	fs.IntVar(&c.Patience, "patience", c.Patience, "early-stopping patience in epochs (0: off)")
	fs.StringVar(&c.Monitor, "monitor", c.Monitor, "metric for the best checkpoint and early stopping")
	fs.TextVar(&c.MonitorMode, "monitor-mode", c.MonitorMode, "whether --monitor is minimised or maximised: auto (by its name), min, max")
	fs.IntVar(&c.TopK, "top-k", c.TopK, "also keep the k best epochs' checkpoints")
	fs.Int64Var(&c.Seed, "seed", c.Seed, "random seed")
	fs.BoolVar(&c.Deterministic, "deterministic", c.Deterministic, "deterministic algorithms (bitwise-repeatable runs)")
	fs.StringVar(&c.Device, "device", c.Device, "device: auto, cpu, cuda, cuda:N")
	fs.IntVar(&c.Threads, "threads", c.Threads, "libtorch intra-op threads (0: libtorch's default)")
	fs.StringVar(&c.Experiment, "experiment", c.Experiment, "experiment id (run directory name; default model-date-time)")
	fs.StringVar(&c.RunsDir, "runs-dir", c.RunsDir, "parent directory of run directories")
	fs.IntVar(&c.LogEvery, "log-every", c.LogEvery, "batches between progress lines when not on a terminal")
	// Multi-process training (launch.go).
	nproc := fs.Int("nproc-per-node", 1, "start this many local ranks of data-parallel training (torchrun --standalone)")
	masterPort := fs.Int("master-port", 0, "rendezvous port for --nproc-per-node (0: a free one)")
	distBackend := fs.String("dist-backend", "auto", "process group backend: auto (nccl on GPUs when built with it, else gloo), gloo, nccl")
	distTimeout := fs.Duration("dist-timeout", distributed.DefaultTimeout, "distributed collective timeout (a lost or hung rank fails the others after at most this)")
	rdzvTimeout := fs.Duration("rdzv-timeout", 0, "distributed rendezvous and process-group start-up timeout; its error names the ranks that did not arrive (0: $GOTRAIN_RDZV_TIMEOUT, else 5m)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case *nproc < 1:
		return fmt.Errorf("--nproc-per-node must be >= 1, got %d", *nproc)
	case *masterPort < 0 || *masterPort > 65535:
		return fmt.Errorf("--master-port must be in [0, 65535], got %d", *masterPort)
	case *distTimeout <= 0:
		return fmt.Errorf("--dist-timeout must be > 0, got %s", *distTimeout)
	case *rdzvTimeout < 0:
		return fmt.Errorf("--rdzv-timeout must be >= 0, got %s", *rdzvTimeout)
	}
	flagged := c
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	runDir := ""
	switch {
	case *resume != "":
		saved, dir, err := configFromCheckpoint(*resume)
		if err != nil {
			return err
		}
		c, runDir = overlay(saved, flagged, set), dir
	case *configPath != "":
		fromFile, err := trainer.LoadConfig(*configPath, trainer.DefaultConfig())
		if err != nil {
			return err
		}
		c = overlay(fromFile, flagged, set)
	}
	if err := c.Validate(); err != nil {
		return flagError(err, fs)
	}
	if *nproc > 1 { // launch.go: the ranks, on this node
		return launch(launchPlan{n: *nproc, port: *masterPort, args: stripLaunchFlags(args), config: c, runDir: runDir, backend: *distBackend})
	}
	if runDir == "" {
		runDir = trainer.RunDirFor(&c)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	backend := *distBackend
	if backend == "auto" && c.Device == "cpu" {
		backend = distributed.Gloo
	}
	pg, err := joinProcessGroup(ctx, c.Device, backend, *distTimeout, *rdzvTimeout) // nil unless started by a launcher (launch.go)
	if err != nil {
		return err
	}
	defer pg.Close()
	t, err := build(c, runDir, pg)
	if err != nil {
		return err
	}
	if *resume != "" {
		if err := t.LoadCheckpoint(*resume); err != nil {
			return err
		}
	}
	return t.Run(ctx)
}

// overlay applies the explicitly set flags over a config from a file or checkpoint.
func overlay(base, flagged trainer.Config, set map[string]bool) trainer.Config {
	fields := map[string]func(){
		"model": func() { base.Model = flagged.Model }, "data": func() { base.DataDir = flagged.DataDir },
		"epochs": func() { base.Epochs = flagged.Epochs }, "batch-size": func() { base.BatchSize = flagged.BatchSize },
		"workers": func() { base.Workers = flagged.Workers }, "optimizer": func() { base.Optimizer = flagged.Optimizer },
		"lr": func() { base.LR = flagged.LR }, "weight-decay": func() { base.WeightDecay = flagged.WeightDecay },
		"momentum": func() { base.Momentum = flagged.Momentum }, "scheduler": func() { base.Scheduler = flagged.Scheduler },
		"amp": func() { base.AMP = flagged.AMP }, "grad-clip": func() { base.GradClip = flagged.GradClip },
		"accumulation": func() { base.Accumulation = flagged.Accumulation }, "patience": func() { base.Patience = flagged.Patience },
		"monitor": func() { base.Monitor = flagged.Monitor }, "top-k": func() { base.TopK = flagged.TopK },
		"seed": func() { base.Seed = flagged.Seed }, "deterministic": func() { base.Deterministic = flagged.Deterministic },
		"device": func() { base.Device = flagged.Device }, "threads": func() { base.Threads = flagged.Threads },
		"experiment": func() { base.Experiment = flagged.Experiment }, "runs-dir": func() { base.RunsDir = flagged.RunsDir },
		"log-every": func() { base.LogEvery = flagged.LogEvery }, "synthetic": func() { base.Synthetic = flagged.Synthetic },
		"limit": func() { base.Limit = flagged.Limit }, "fused": func() { base.Fused = flagged.Fused },
		"image-size": func() { base.ImageSize = flagged.ImageSize }, "val-split": func() { base.ValSplit = flagged.ValSplit },
		"block-size":   func() { base.BlockSize = flagged.BlockSize },
		"label-column": func() { base.LabelColumn = flagged.LabelColumn },
		"monitor-mode": func() { base.MonitorMode = flagged.MonitorMode },
	}
	for name := range set {
		if f, ok := fields[name]; ok {
			f()
		}
	}
	return base
}

// flagError names the flag of an invalid config field too: "--batch-size (batch_size)
// must be >= 1, got 0".
func flagError(err error, fs *flag.FlagSet) error {
	var fe *trainer.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	name := strings.ReplaceAll(fe.Field, "_", "-")
	if fe.Field == "data_dir" {
		name = "data"
	}
	if fs.Lookup(name) == nil {
		return err
	}
	return fmt.Errorf("--%s (%s in a config file) %s", name, fe.Field, fe.Msg)
}

// configFromCheckpoint reads the run config a gotrain checkpoint carries and the run
// directory it belongs to (the parent of its checkpoints/ directory).
func configFromCheckpoint(path string) (trainer.Config, string, error) {
	v, err := checkpoint.Read(path)
	if err != nil {
		return trainer.Config{}, "", fmt.Errorf("--resume: %w", err)
	}
	c := trainer.DefaultConfig()
	if s, err := checkpoint.GetString(v, "config"); err == nil {
		if c, err = trainer.ParseConfigJSON(s, c); err != nil {
			return c, "", fmt.Errorf("--resume %s: %w", path, err)
		}
	}
	dir := filepath.Dir(filepath.Dir(path))
	if filepath.Base(filepath.Dir(path)) != "checkpoints" {
		dir = strings.TrimSuffix(path, filepath.Ext(path)) + "-resumed"
	}
	return c, dir, nil
}
