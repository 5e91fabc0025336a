// Command gpu measures gotrain's CUDA path against PyTorch on the same GPU, with the
// real models of torch/nn/models (GPT-2 and ViT-B/16 shapes); bench/gpu/bench.py is its
// Python twin, and scripts/gpu/run.sh runs both and puts the figures side by side.
//
//	gpu sdpa     [-device cuda] [-smoke]      the SDPA backend CUDA picks for the GPT and
//	                                          ViT attention shapes in bf16 and fp16, and
//	                                          its outputs and gradients against an fp32
//	                                          reference written with plain ops
//	gpu train    -model gpt|vit -precision fp32|bf16 -dir DIR [-device cuda] [-smoke]
//	                                          median training-step time, tokens/s or
//	                                          samples/s and peak GPU memory; writes the
//	                                          weights and DIR/spec.json for bench.py
//	gpu hostsync -model gpt|vit [-precision bf16] [-device cuda] [-smoke]
//	                                          torch.HostReads across optimizer steps of
//	                                          the Trainer between logging points
//
// -smoke shrinks every shape to one that runs in seconds on a CPU (the dry run of
// scripts/gpu/run.sh). Each subcommand prints one JSON object on stdout and exits 1
// when its check fails (after printing it).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"slices"

	"github.com/gotrain/gotrain/torch"
)

// options are the flags every subcommand shares.
type options struct {
	device    torch.Device
	smoke     bool
	model     string
	precision string
	dir       string
	warmup    int
	steps     int
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("bench/gpu: ")
	if len(os.Args) < 2 {
		log.Fatal("usage: gpu sdpa|train|hostsync [flags]")
	}
	cmd := os.Args[1]
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	device := fs.String("device", "cuda", "device: cuda, cuda:N or cpu")
	var o options
	fs.BoolVar(&o.smoke, "smoke", false, "tiny shapes that run on a CPU in seconds")
	fs.StringVar(&o.model, "model", "gpt", "gpt | vit")
	fs.StringVar(&o.precision, "precision", "bf16", "fp32 | bf16 (autocast)")
	fs.StringVar(&o.dir, "dir", "", "directory for the weights and spec.json bench.py reads (train)")
	fs.IntVar(&o.warmup, "warmup", 5, "untimed steps first (train)")
	fs.IntVar(&o.steps, "steps", 20, "timed steps (train), optimizer steps between two logging points (hostsync)")
	threads := fs.Int("threads", 0, "libtorch intra-op threads (0: libtorch's default)")
	_ = fs.Parse(os.Args[2:])
	dev, err := torch.ParseDevice(*device)
	if err != nil {
		log.Fatal(err)
	}
	if dev.IsCUDA() && dev.Index < 0 {
		dev.Index = 0
	}
	o.device = dev
	if *threads > 0 {
		torch.SetNumThreads(*threads)
	}
	// libtorch's autocast and grad mode are per OS thread.
	runtime.LockOSThread()

	var res any
	var ok bool
	switch cmd {
	case "sdpa":
		res, ok, err = runSDPA(o)
	case "train":
		res, ok, err = runTrain(o)
	case "hostsync":
		res, ok, err = runHostSync(o)
	default:
		log.Fatalf("unknown subcommand %q (sdpa, train, hostsync)", cmd)
	}
	if err != nil {
		log.Fatal(err)
	}
	out, _ := json.MarshalIndent(res, "", "  ")
	fmt.Println(string(out))
	if !ok {
		os.Exit(1)
	}
}

// synchronize waits for the device's queued work, so that a wall-clock interval covers
// the kernels it launched.
func synchronize(dev torch.Device) {
	if dev.IsCUDA() {
		if err := torch.CUDASynchronize(dev.Index); err != nil {
			panic(err)
		}
	}
}

// median returns the median of xs (the mean of the middle two for an even count).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
