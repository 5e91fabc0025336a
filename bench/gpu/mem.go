package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/gotrain/gotrain/torch"
)

// memOptions are mem's own flags.
type memOptions struct {
	models, precisions []string
	python             string // the Python with torch, torchvision and transformers
	cpumem             string // cgotorch/cpumem.cc compiled into a shared object, for Python
	requireLE          bool   // fail when gotrain's peak exceeds PyTorch's
}

// memRow is one model and precision: both sides' training-step results.
type memRow struct {
	Model     string       `json:"model"`
	Precision string       `json:"precision"`
	Batch     int64        `json:"batch"`
	Seq       int64        `json:"seq,omitempty"`
	Go        *trainResult `json:"gotrain"`
	Python    *trainResult `json:"python"`
	PeakRatio float64      `json:"peak_ratio"` // gotrain / PyTorch
	StepRatio float64      `json:"step_ratio"` // the same of peak − baseline
	LossMatch bool         `json:"first_loss_match"`
}

// memResult is mem's output.
type memResult struct {
	Device string   `json:"device"`
	Torch  string   `json:"torch"`
	Rows   []memRow `json:"rows"`
	Method string   `json:"method"`
}

// runMem measures the peak memory of one training step (after warm-up) of each model and
// precision in gotrain (runTrain) and in PyTorch (bench.py train on the same weights,
// batches and step), and prints a table. On the CPU both sides count with the allocator
// of cgotorch/cpumem.cc, installed before the models are built: gotrain through
// torch.CountCPUMemory, Python by loading mo.cpumem with ctypes. On CUDA both read the
// caching allocator's statistics.
func runMem(o options, mo memOptions) (any, bool, error) {
	res := memResult{Device: o.device.String(), Torch: torch.Version()}
	if o.device.IsCUDA() {
		res.Method = "the CUDA caching allocator's allocated bytes (torch.CUDAMemoryStats, torch.cuda.max_memory_allocated)"
	} else {
		if mo.cpumem == "" {
			return nil, false, fmt.Errorf("mem: -cpumem is required on the CPU (cgotorch/cpumem.cc compiled with -shared; make bench builds it)")
		}
		if _, err := os.Stat(mo.cpumem); err != nil {
			return nil, false, fmt.Errorf("mem: -cpumem: %w", err)
		}
		torch.CountCPUMemory()
		res.Method = "the bytes of CPU tensor storages, counted by cgotorch/cpumem.cc in front of c10's CPU allocator in both processes"
	}
	base := o.dir
	if base == "" {
		d, err := os.MkdirTemp("", "gotrain-mem")
		if err != nil {
			return nil, false, err
		}
		defer os.RemoveAll(d)
		base = d
	}
	ok := true
	for _, m := range mo.models {
		for _, p := range mo.precisions {
			oo := o
			oo.model, oo.precision, oo.dir = m, p, filepath.Join(base, m+"-"+p)
			row, err := memOne(oo, mo)
			if err != nil {
				return nil, false, fmt.Errorf("mem %s %s: %w", m, p, err)
			}
			if !row.LossMatch || (mo.requireLE && row.PeakRatio > 1) {
				ok = false
			}
			res.Rows = append(res.Rows, row)
		}
	}
	printMemTable(os.Stderr, res)
	return res, ok, nil
}

// memOne runs one model and precision on both sides.
func memOne(o options, mo memOptions) (memRow, error) {
	gr, ok, err := runTrain(o)
	if err != nil || !ok {
		return memRow{}, fmt.Errorf("gotrain: %v", err)
	}
	defer os.RemoveAll(o.dir) // GPT-2 small's weights are 500 MB
	g := gr.(*trainResult)
	args := []string{"bench/gpu/bench.py", "train", o.dir}
	if mo.cpumem != "" && !o.device.IsCUDA() {
		args = append(args, "--cpumem", mo.cpumem)
	}
	cmd := exec.Command(mo.python, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return memRow{}, fmt.Errorf("%s %s: %v", mo.python, strings.Join(args, " "), err)
	}
	var py trainResult // the eager mode's line, the only one
	if err := json.NewDecoder(bytes.NewReader(out)).Decode(&py); err != nil {
		return memRow{}, fmt.Errorf("bench.py output: %v", err)
	}
	var s spec
	raw, err := os.ReadFile(filepath.Join(o.dir, "spec.json"))
	if err != nil {
		return memRow{}, err
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return memRow{}, err
	}
	row := memRow{Model: o.model, Precision: o.precision, Batch: s.Batch, Seq: s.Seq, Go: g, Python: &py}
	if py.PeakBytes > 0 {
		row.PeakRatio = float64(g.PeakBytes) / float64(py.PeakBytes)
	}
	if d := py.PeakBytes - py.BaselineBytes; d > 0 {
		row.StepRatio = float64(g.PeakBytes-g.BaselineBytes) / float64(d)
	}
	row.LossMatch = lossMatch(o.precision, g.FirstLoss, py.FirstLoss)
	return row, nil
}

// lossMatch reports whether two first losses of the same model, weights and batch agree
// to the precision's rounding (run.sh's check).
func lossMatch(precision string, a, b float64) bool {
	tol := 1e-3
	if precision == "bf16" {
		tol = 2e-2
	}
	return math.Abs(a-b) <= tol*math.Abs(b)
}

func mib(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

// printMemTable writes the rows as a markdown table.
func printMemTable(w *os.File, r memResult) {
	fmt.Fprintf(w, "\npeak memory of one training step after warm-up (zero_grad, forward and loss, backward, fused AdamW), %s, torch %s:\n%s\n\n", r.Device, r.Torch, r.Method)
	fmt.Fprintln(w, "| model | precision | batch | gotrain peak MiB | PyTorch peak MiB | ratio | gotrain step MiB | PyTorch step MiB | ratio | first loss gotrain / PyTorch |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|---|")
	for _, x := range r.Rows {
		batch := fmt.Sprint(x.Batch)
		if x.Seq > 0 {
			batch = fmt.Sprintf("%d×%d", x.Batch, x.Seq)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %.3f | %s | %s | %.3f | %.5f / %.5f%s |\n", x.Model, x.Precision, batch,
			mib(x.Go.PeakBytes), mib(x.Python.PeakBytes), x.PeakRatio,
			mib(x.Go.PeakBytes-x.Go.BaselineBytes), mib(x.Python.PeakBytes-x.Python.BaselineBytes), x.StepRatio,
			x.Go.FirstLoss, x.Python.FirstLoss, map[bool]string{true: "", false: " MISMATCH"}[x.LossMatch])
	}
	fmt.Fprintln(w, "\npeak: the most bytes allocated at once during the step; step: peak less the bytes allocated when the step began (weights, gradients, optimizer state, batches)")
}
