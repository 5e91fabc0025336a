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
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch/distributed"
	"github.com/gotrain/gotrain/trainer"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "train:", err)
		var ie *trainer.InterruptedError
		if errors.As(err, &ie) {
			if os.Getenv("WORLD_SIZE") == "" { // a rank's launcher prints its own resume command
				fmt.Fprintf(os.Stderr, "train: resume with: go run ./cmd/train --resume %s\n", ie.Checkpoint)
			}
			os.Exit(130)
		}
		var le *launchError // --nproc-per-node (launch.go): a failed rank's status
		if errors.As(err, &le) && le.code > 0 {
			os.Exit(le.code)
		}
		os.Exit(1)
	}
}

// flags are the command's flags besides those of Config.
type flags struct {
	config, resume           string
	nproc, masterPort        int
	distBackend              string
	distTimeout, rdzvTimeout time.Duration
}

// newFlagSet binds every flag: the config's to c's fields, the others to f's.
func newFlagSet(c *Config, f *flags) *flag.FlagSet {
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	fs.StringVar(&f.config, "config", "", "JSON or YAML config file (flags given too override it)")
	fs.StringVar(&f.resume, "resume", "", "checkpoint to resume from (its run directory and config are reused)")
	bindFlags(fs, c)
	// Multi-process training (launch.go).
	fs.IntVar(&f.nproc, "nproc-per-node", 1, "start this many local ranks of data-parallel training (torchrun --standalone)")
	fs.IntVar(&f.masterPort, "master-port", 0, "rendezvous port for --nproc-per-node (0: a free one)")
	fs.StringVar(&f.distBackend, "dist-backend", "auto", "process group backend: auto (nccl on GPUs when built with it, else gloo), gloo, nccl")
	fs.DurationVar(&f.distTimeout, "dist-timeout", distributed.DefaultTimeout, "distributed collective timeout (a lost or hung rank fails the others after at most this)")
	fs.DurationVar(&f.rdzvTimeout, "rdzv-timeout", 0, "distributed rendezvous and process-group start-up timeout; its error names the ranks that did not arrive (0: $GOTRAIN_RDZV_TIMEOUT, else 5m)")
	return fs
}

func run(args []string) error {
	var f flags
	c := defaultConfig()
	fs := newFlagSet(&c, &f)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case f.nproc < 1:
		return fmt.Errorf("--nproc-per-node must be >= 1, got %d", f.nproc)
	case f.masterPort < 0 || f.masterPort > 65535:
		return fmt.Errorf("--master-port must be in [0, 65535], got %d", f.masterPort)
	case f.distTimeout <= 0:
		return fmt.Errorf("--dist-timeout must be > 0, got %s", f.distTimeout)
	case f.rdzvTimeout < 0:
		return fmt.Errorf("--rdzv-timeout must be >= 0, got %s", f.rdzvTimeout)
	}
	// A config file or a checkpoint gives the base configuration; the flags are parsed
	// again over it, so that exactly the flags given override it.
	runDir := ""
	if f.resume != "" || f.config != "" {
		var err error
		if f.resume != "" {
			c, runDir, err = configFromCheckpoint(f.resume)
		} else {
			c, err = loadConfig(f.config, defaultConfig())
		}
		if err != nil {
			return err
		}
		again := newFlagSet(&c, &flags{})
		again.SetOutput(io.Discard)
		if err := again.Parse(args); err != nil {
			return err
		}
	}
	if err := c.validate(); err != nil {
		return flagError(err, fs)
	}
	if f.nproc > 1 { // launch.go: the ranks, on this node
		return launch(launchPlan{n: f.nproc, port: f.masterPort, args: stripLaunchFlags(args), config: c, runDir: runDir, backend: f.distBackend})
	}
	if runDir == "" {
		runDir = c.runDir()
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	backend := f.distBackend
	if backend == "auto" && c.Device == "cpu" {
		backend = distributed.Gloo
	}
	pg, err := joinProcessGroup(ctx, c.Device, backend, f.distTimeout, f.rdzvTimeout) // nil unless started by a launcher (launch.go)
	if err != nil {
		return err
	}
	defer pg.Close()
	if c.FSDP && pg == nil {
		return errors.New("--fsdp shards across ranks: start several with --nproc-per-node N or torchrun")
	}
	t, err := build(c, runDir, pg)
	if err != nil {
		return err
	}
	if f.resume != "" {
		if err := t.LoadCheckpoint(f.resume); err != nil {
			return err
		}
	}
	err = t.Run(ctx)
	if err == nil && afterRun != nil {
		err = afterRun(t)
	}
	return err
}

// afterRun, when set, runs in every rank after a successful Run (a hook for tests: a
// rank that writes its shards).
var afterRun func(t *trainer.Trainer) error

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

// configFromCheckpoint reads the command's configuration that a gotrain checkpoint
// records and the run directory it belongs to (the parent of its checkpoints/
// directory). A checkpoint of an earlier gotrain, which recorded one flat config, is
// read as that.
func configFromCheckpoint(path string) (Config, string, error) {
	c := defaultConfig()
	ok, err := trainer.ReadRunConfig(path, &c)
	if err != nil {
		return c, "", fmt.Errorf("--resume: %w", err)
	}
	if !ok {
		v, err := checkpoint.Read(path)
		if err != nil {
			return c, "", fmt.Errorf("--resume: %w", err)
		}
		if s, err := checkpoint.GetString(v, "config"); err == nil {
			if err := json.Unmarshal([]byte(s), &c); err != nil {
				return c, "", fmt.Errorf("--resume %s: config: %w", path, err)
			}
		}
	}
	dir := filepath.Dir(filepath.Dir(path))
	if filepath.Base(filepath.Dir(path)) != "checkpoints" {
		dir = strings.TrimSuffix(path, filepath.Ext(path)) + "-resumed"
	}
	return c, dir, c.validate()
}
