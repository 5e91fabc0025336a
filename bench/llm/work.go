package main

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gotrain/gotrain/bench/internal/loopio"
	"github.com/gotrain/gotrain/tokenizer"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/lora"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
)

// cpuSeconds is the process's user and system CPU time: with one intra-op thread it is
// the work done, whatever share of the cores the other jobs of a loaded machine left.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// worker runs one workload in this process and returns its result (bench.py's fields).
func worker(workload, dir string) (*result, error) {
	runtime.LockOSThread() // libtorch's grad mode is per thread
	s, err := readSpec(dir)
	if err != nil {
		return nil, err
	}
	torch.SetNumThreads(s.Threads)
	if s.CountTensors {
		torch.CountCPUMemory() // before the model, as bench.py loads the same allocator
	}
	base := loopio.RSSMB("VmRSS:")
	var r *result
	switch workload {
	case "train", "lora", "lora-ckpt", "moe":
		r, err = goTrain(dir, s, workload)
	case "gen":
		r, err = goGen(dir, s)
	default:
		err = fmt.Errorf("unknown workload %q", workload)
	}
	if err != nil {
		return nil, err
	}
	r.Impl, r.Workload, r.Threads, r.Torch = "gotrain", workload, s.Threads, torch.Version()
	r.BaseRSSMB, r.PeakRSSMB = base, loopio.RSSMB("VmHWM:")
	if s.CountTensors {
		r.TensorPeakMB = float64(torch.CPUMemoryStats().PeakAllocated-tensorsAtStart) / (1 << 20)
	}
	return r, nil
}

// tensorsAtStart is what the counting allocator held when the timed work began.
var tensorsAtStart int64

// startCounting starts the peak of the timed work: the peak is then taken over the bytes
// held at this point (the weights: gotrain copies them into its allocations, while
// transformers leaves float32 weights in the safetensors file's mapping, which the
// allocator does not see), so that both sides count what their steps add.
func startCounting(s spec) {
	if s.CountTensors {
		torch.ResetCPUPeakMemory()
		tensorsAtStart = torch.CPUMemoryStats().Allocated
	}
}

// readIDs reads the first n token ids of dir/ids.bin (int64, little-endian).
func readIDs(dir string, n int) ([]int64, error) {
	f, err := os.Open(filepath.Join(dir, "ids.bin"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ids := make([]int64, n)
	if err := binary.Read(f, binary.LittleEndian, ids); err != nil {
		if err == io.ErrUnexpectedEOF || err == io.EOF {
			return nil, fmt.Errorf("%s holds fewer than the %d tokens needed", f.Name(), n)
		}
		return nil, err
	}
	return ids, nil
}

// goTrain loads the model and trains it as bench.py's train does: fully, or LoRA on the
// spec's targets (with gradient checkpointing for lora-ckpt), fused AdamW over the
// trainable parameters, the batches cut in order from the corpus's ids; moe trains the
// Mixtral fully.
func goTrain(dir string, s spec, workload string) (*result, error) {
	model := "model"
	if workload == "moe" {
		model = "moe"
	}
	m, err := models.LoadPretrained(filepath.Join(dir, model), models.LoadOptions{})
	if err != nil {
		return nil, err
	}
	nn.SetTraining(m, true)
	if workload == "lora" || workload == "lora-ckpt" {
		if _, err := lora.Inject(m, lora.Config{R: s.LoraR, Alpha: s.LoraAlpha, TargetModules: lora.Modules(s.LoraTargets...)}); err != nil {
			return nil, err
		}
		if err := models.SetGradientCheckpointing(m, workload == "lora-ckpt"); err != nil {
			return nil, err
		}
	}
	params := nn.TrainableParameters(m)
	opt, err := optim.NewAdamW(params, optim.AdamOptions{LR: s.LR, WeightDecay: 0.01, Fused: true})
	if err != nil {
		return nil, err
	}
	n := s.Warmup + s.Steps
	ids, err := readIDs(dir, n*s.Batch*s.Seq)
	if err != nil {
		return nil, err
	}
	all := torch.FromSlice(ids, int64(n), int64(s.Batch), int64(s.Seq))
	lm, ok := m.(interface {
		Loss(*torch.Tensor) *torch.Tensor
	})
	if !ok {
		return nil, fmt.Errorf("%T has no Loss", m)
	}
	r := &result{}
	for _, p := range params {
		r.Trainable += p.Numel()
	}
	startCounting(s)
	for i := range n {
		t, c := time.Now(), cpuSeconds()
		torch.WithScope(func() {
			batch := all.Select(0, int64(i))
			opt.ZeroGrad(true)
			loss := lm.Loss(batch)
			loss.Backward()
			if err = opt.Step(); err == nil {
				r.Losses = append(r.Losses, loss.Item())
			}
		})
		if err != nil {
			return nil, err
		}
		r.StepS = append(r.StepS, time.Since(t).Seconds())
		r.StepCPUS = append(r.StepCPUS, cpuSeconds()-c)
	}
	tokens := float64(s.Batch * s.Seq)
	r.TokensPerS = tokens / median(r.StepS[s.Warmup:])
	r.TokensPerCPUS = tokens / median(r.StepCPUS[s.Warmup:])
	return r, nil
}

// goGen times greedy generation with the KV cache (the best of GenReps runs after a
// warm-up) and then gotrain's tokenizer over the corpus, as bench.py's gen does.
func goGen(dir string, s spec) (*result, error) {
	m, err := models.LoadPretrained(filepath.Join(dir, "model"), models.LoadOptions{})
	if err != nil {
		return nil, err
	}
	prompt, err := readIDs(dir, s.Prompt)
	if err != nil {
		return nil, err
	}
	o := models.GenerateOptions{MaxNewTokens: 4, IgnoreEOS: true}
	if _, err := models.Generate(m, [][]int64{prompt}, o); err != nil { // warm-up
		return nil, err
	}
	startCounting(s)
	r := &result{}
	o.MaxNewTokens = s.NewTokens
	best, bestCPU := 0.0, 0.0
	for range s.GenReps {
		t, c := time.Now(), cpuSeconds()
		out, err := models.Generate(m, [][]int64{prompt}, o)
		if err != nil {
			return nil, err
		}
		if d := time.Since(t).Seconds(); best == 0 || d < best {
			best = d
		}
		if d := cpuSeconds() - c; bestCPU == 0 || d < bestCPU {
			bestCPU = d
		}
		r.Generated = out[0]
	}
	r.GenTokensPerS = float64(len(r.Generated)) / best
	r.GenTokensPerCPUS = float64(len(r.Generated)) / bestCPU

	raw, err := os.ReadFile(s.Corpus)
	if err != nil {
		return nil, err
	}
	text := string(raw)
	lines := strings.SplitAfter(text, "\n")
	lines = slices.DeleteFunc(lines, func(l string) bool { return l == "" })
	r.TokBytes = len(raw)
	var ids []int64
	bestCPU, best = 0, 0
	for range 2 {
		// A fresh tokenizer each pass: its word cache starts empty, as tokenizers' does.
		tok, err := tokenizer.Load(filepath.Join(dir, "model", "tokenizer.json"))
		if err != nil {
			return nil, err
		}
		t, c := time.Now(), cpuSeconds()
		ids = ids[:0]
		for _, l := range lines {
			ids = tok.AppendEncode(ids, l, true)
		}
		d, dc := time.Since(t).Seconds(), cpuSeconds()-c
		if best == 0 || d < best {
			best = d
		}
		if bestCPU == 0 || dc < bestCPU {
			bestCPU = dc
		}
	}
	r.TokMBPerS = float64(len(raw)) / 1e6 / best
	r.TokMBPerCPUS = float64(len(raw)) / 1e6 / bestCPU
	h := sha256.New()
	if err := binary.Write(h, binary.LittleEndian, ids); err != nil {
		return nil, err
	}
	r.TokSHA256 = hex.EncodeToString(h.Sum(nil))
	return r, nil
}

// median returns the middle value of xs (the mean of the two middle ones for an even
// count); a step slowed by another job's burst moves it less than the mean.
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
