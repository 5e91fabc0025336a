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
//	gpu mem      [-models vit,gpt,resnet18,cnn] [-precisions fp32,bf16] [-device cpu]
//	             -cpumem LIB [-python PY] [-smoke]
//	                                          the peak memory of one training step in
//	                                          gotrain and in PyTorch (bench.py train),
//	                                          counted the same way on both sides (on the
//	                                          CPU by cgotorch/cpumem.cc, LIB being it
//	                                          compiled for Python to load)
//	gpu profile  -model gpt|vit|resnet18|cnn -precision fp32|bf16 [-device cuda] [-smoke]
//	             [-python PY] [-modes eager,default]
//	                                          kernels per training step and time per
//	                                          kernel class (matmul, attention, norm,
//	                                          elementwise, loss, optimizer, ...) in
//	                                          gotrain (torch.Profile) and in PyTorch's
//	                                          modes (torch.profiler); on a CPU, ATen ops
//	                                          by self time
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
	"strings"

	"github.com/gotrain/gotrain/torch"
)

// options are the flags every subcommand shares.
type options struct {
	device    torch.Device
	smoke     bool
	sz        size // the shapes when not smoke: sizeFull, or sizeMem for `gpu mem` on a CPU
	model     string
	precision string
	dir       string
	warmup    int
	steps     int
	// keepForward: the training step keeps the forward's tensors until it ends (train, mem)
	keepForward bool
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("bench/gpu: ")
	if len(os.Args) < 2 {
		log.Fatal("usage: gpu sdpa|train|hostsync|mem|profile [flags]")
	}
	cmd := os.Args[1]
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	device := fs.String("device", "cuda", "device: cuda, cuda:N or cpu")
	var o options
	fs.BoolVar(&o.smoke, "smoke", false, "tiny shapes that run on a CPU in seconds")
	fs.StringVar(&o.model, "model", "gpt", "gpt | vit | resnet18 | cnn")
	fs.StringVar(&o.precision, "precision", "bf16", "fp32 | bf16 (autocast)")
	fs.StringVar(&o.dir, "dir", "", "directory for the weights and spec.json bench.py reads (train)")
	fs.IntVar(&o.warmup, "warmup", 5, "untimed steps first (train)")
	fs.IntVar(&o.steps, "steps", 20, "timed steps (train), optimizer steps between two logging points (hostsync)")
	fs.BoolVar(&o.keepForward, "keep-forward", false, "gotrain's step keeps every forward tensor until the step ends, as before issue 35 (train, mem: for before/after figures)")
	threads := fs.Int("threads", 0, "libtorch intra-op threads (0: libtorch's default)")
	var mo memOptions
	memModels := fs.String("models", "vit,gpt,resnet18,cnn", "models (mem)")
	memPrecisions := fs.String("precisions", "fp32,bf16", "precisions (mem)")
	fs.StringVar(&mo.python, "python", ".venv/bin/python", "the Python with torch, torchvision and transformers (mem)")
	fs.StringVar(&mo.cpumem, "cpumem", "", "cgotorch/cpumem.cc compiled into a shared object, which Python loads to count CPU memory (mem on the CPU)")
	fs.BoolVar(&mo.requireLE, "require-le", true, "exit 1 when gotrain's peak exceeds PyTorch's (mem)")
	modes := fs.String("modes", "eager,default", "PyTorch's modes to profile beside gotrain: eager, default (torch.compile), reduce-overhead (profile)")
	_ = fs.Parse(os.Args[2:])
	mo.models, mo.precisions = strings.Split(*memModels, ","), strings.Split(*memPrecisions, ",")
	if cmd == "profile" {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["warmup"] {
			o.warmup = 3 // torch.compile compiles (and reduce-overhead records) in these
		}
		if !set["steps"] {
			o.steps = 3
		}
	}
	if cmd == "mem" {
		// One warm-up step makes the optimizer's state; one measured step is the figure.
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["warmup"] {
			o.warmup = 1
		}
		if !set["steps"] {
			o.steps = 1
		}
	}
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
	case "profile":
		res, ok, err = runProfile(o, mo, *modes)
	case "mem":
		if !dev.IsCUDA() {
			o.sz = sizeMem
		}
		res, ok, err = runMem(o, mo)
	default:
		log.Fatalf("unknown subcommand %q (sdpa, train, hostsync, mem, profile)", cmd)
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

// size picks a benchmark's shapes.
type size int

const (
	sizeFull  size = iota // the GPU benchmark's: GPT-2 small on 8 × 1024 tokens, 64 images
	sizeMem               // the CPU memory benchmark's: the same models on small batches
	sizeSmoke             // tiny models that run on a CPU in seconds
)

// size returns the shapes o asks for.
func (o options) size() size {
	if o.smoke {
		return sizeSmoke
	}
	return o.sz
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
