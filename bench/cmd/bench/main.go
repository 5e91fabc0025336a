// Command bench runs the gotrain-vs-Python-vs-C++ benchmarks that `make bench` runs, and
// writes bench/results/<date>-<host>.{json,md}.
//
//	bench [-quick] [-threads 1,2] [-workloads mlp,mlp256,cnn,cnn-bf16] [-readme README.md]
//
// For each workload it has goloop draw the dataset and initial weights once, then, for
// each thread count, runs every implementation (see impls) as a separate process, one
// after the other, with OMP_NUM_THREADS and MKL_NUM_THREADS set and the same count passed
// to set_num_threads in each, and glibc's malloc thresholds set the same for all
// (mallocEnv). Implementations are grouped by the Adam kernel they run (fused, foreach,
// single); each group has a C++ twin that calls the same ATen functions, and every ratio
// the table scores pairs an implementation with its twin. It checks each group's losses
// against its C++ twin exactly and the groups' twins against each other within a
// tolerance per dtype, runs the per-op microbenchmark (opbench, bench/cpp/ops.cpp,
// bench/python/ops.py), bench/checkpoint and bench/data, prints markdown tables, and with
// -readme replaces the text between README's bench markers with them.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gotrain/gotrain/bench/internal/loopio"
)

// impl is one implementation of the training loop.
type impl struct {
	name, label string
	// adam is the Adam kernel it runs: "fused" (ATen's _fused_adam_, PyTorch's
	// fused=True, gotrain's default), "foreach" (the multi-tensor _foreach_* ops,
	// PyTorch's foreach=True, gotrain's Fused: false) or "single" (per-tensor ops,
	// torch.optim's _single_tensor_adam: PyTorch's default on the CPU, which the seed
	// runs; multi-tensor is its default only on CUDA).
	adam string
	// quick: part of a quick run.
	quick bool
}

// impls are the implementations in table order, grouped by Adam kernel; the last of
// each group is the C++ twin the group is measured and checked against.
var impls = []impl{
	{"go", "gotrain", "fused", true},
	{"go-raw", "gotrain (raw loop)", "fused", false},
	{"go-own", "gotrain (own layers)", "fused", false},
	{"python-fused", "Python (fused)", "fused", true},
	{"cpp-fused", "C++ (fused)", "fused", true},
	{"go-unfused", "gotrain (unfused)", "foreach", true},
	{"python-foreach", "Python (foreach)", "foreach", true},
	{"cpp-foreach", "C++ (foreach)", "foreach", true},
	{"python", "Python (seed: CPU default, single-tensor)", "single", true},
	{"python-batches", "Python (batches, single-tensor)", "single", false},
	{"cpp-single", "C++ (single-tensor)", "single", true},
}

func lookupImpl(name string) impl {
	for _, im := range impls {
		if im.name == name {
			return im
		}
	}
	panic("bench: no implementation " + name)
}

// twin is the C++ loop that runs the same Adam kernel as name: the reference for its
// losses and the denominator of its scored ratios.
func twin(name string) string { return "cpp-" + lookupImpl(name).adam }

// mallocEnv is glibc's allocator setting for every process the driver starts. cgotorch
// raises the mmap and trim thresholds to these values at start-up unless a MALLOC_*
// variable is set (a training step frees its tensors together, and with glibc's defaults
// the heap top went back to the kernel and faulted in again every step); setting the
// variables gives the C++ and Python loops the same allocator, and gotrain's own mallopt
// then steps aside.
var mallocEnv = []string{"MALLOC_MMAP_THRESHOLD_=67108864", "MALLOC_TRIM_THRESHOLD_=268435456"}

// Loss tolerances. Implementations running the same kernel must agree exactly (the same
// ATen calls in the same order on the same libtorch). The kernels' twins differ in
// rounding (the fused kernel computes the update in one expression), and the difference
// grows with the steps: 2e-7 to 5e-7 in float32 over the checked steps (2026-12-01, 1
// and 2 threads), so 1e-5 leaves a margin of 20. Under bf16 autocast a parameter that
// rounds differently can flip the bfloat16 rounding of an activation, a relative 4e-3
// step; the measured difference was 0, and 1e-3 on a loss near 2.3 allows a few flips.
const sameKernelTol = 0.0

func crossKernelTol(bf16 bool) float64 {
	if bf16 {
		return 1e-3
	}
	return 1e-5
}

type config struct {
	bin, python string
	warmup      int
	reps        int
	seed        int64
	steps       map[string]int
	impls       []string
	rounds      int
	pairReps    int
	pairProcs   int
}

// Measurement is one implementation on one workload and thread count.
type Measurement struct {
	loopio.Result
	Name string `json:"name"`
	// StepUS is the scored step time: the fastest run's median epoch (see runCase).
	StepUS float64 `json:"step_us_best_run"`
	// StepUSMedian is the median over the runs of their median epochs.
	StepUSMedian float64 `json:"step_us_median_run"`
	StepUSMin    float64 `json:"step_us_min"`
	StepUSMax    float64 `json:"step_us_max"`
	SamplesPerS  float64 `json:"samples_per_s"`
	// OverTwinUS is the median step time minus that of the C++ loop running the same
	// Adam kernel.
	OverTwinUS   float64 `json:"overhead_over_cpp_twin_us"`
	RSSGrowthPct float64 `json:"rss_growth_pct_epoch2_to_last"`
	// PeakOverBaseMB is the peak RSS minus the RSS at start-up (libraries loaded).
	PeakOverBaseMB float64 `json:"peak_rss_over_base_mb"`
	// LossDiff is the largest first-epoch loss difference from the C++ twin.
	LossDiff float64    `json:"max_loss_diff_vs_cpp_twin"`
	Load     [2]float64 `json:"loadavg_before_after"`
	// Timed holds the timed epochs of every round; RunMedians each run's median epoch.
	Timed      []float64 `json:"timed_epoch_s"`
	RunMedians []float64 `json:"run_median_epoch_s"`
}

// Case is one workload at one thread count.
type Case struct {
	Workload string                  `json:"workload"`
	Desc     string                  `json:"desc"`
	Threads  int                     `json:"threads"`
	BF16     bool                    `json:"bf16"`
	Impl     map[string]*Measurement `json:"impl"`
	// SameKernelDiff is the largest loss difference of an implementation from its C++
	// twin (tolerance sameKernelTol); CrossKernelDiff the largest between the twins of
	// the three kernels (tolerance CrossKernelTol).
	SameKernelDiff  float64  `json:"max_loss_diff_same_kernel"`
	CrossKernelDiff float64  `json:"max_loss_diff_across_kernels"`
	CrossKernelTol  float64  `json:"loss_tol_across_kernels"`
	LossCheckOK     bool     `json:"loss_check_ok"`
	LossProblems    []string `json:"loss_problems,omitempty"`
	GoLoaderUS      float64  `json:"go_loader_us_per_step"`
	// Paired are the like-for-like pairs measured in turns (pair.go), by gotrain loop.
	Paired map[string]*Paired `json:"paired,omitempty"`
}

// OpResult is one language's run of the per-op microbenchmark.
type OpResult struct {
	Impl    string               `json:"impl"`
	Torch   string               `json:"torch"`
	Threads int                  `json:"threads"`
	Block   int                  `json:"block"`
	N       int                  `json:"n"`
	NsPerOp map[string][]float64 `json:"ns_per_op"` // every timed rep of every run
	Runs    int                  `json:"runs"`      // processes whose reps NsPerOp pools
	Load    [2]float64           `json:"loadavg_before_after"`
}

// Median is the median ns per op of op over every rep of every run.
func (o *OpResult) Median(op string) float64 {
	if o == nil || len(o.NsPerOp[op]) == 0 {
		return math.NaN()
	}
	return median(o.NsPerOp[op])
}

// Best is the fastest rep of op over every run, the scored per-op cost: interference only
// adds time, so the fastest rep is the closest to the call's own cost (timeit's advice).
func (o *OpResult) Best(op string) float64 {
	if o == nil || len(o.NsPerOp[op]) == 0 {
		return math.NaN()
	}
	return slices.Min(o.NsPerOp[op])
}

// Results is the JSON file.
type Results struct {
	Date      string               `json:"date"`
	Host      string               `json:"host"`
	CPU       string               `json:"cpu"`
	Cores     int                  `json:"cores"`
	Torch     string               `json:"torch"`
	Command   string               `json:"command"`
	Quick     bool                 `json:"quick"`
	Rounds    int                  `json:"rounds"`
	MallocEnv []string             `json:"malloc_env"`
	LoadStart string               `json:"loadavg_start"`
	LoadEnd   string               `json:"loadavg_end"`
	Cases     []*Case              `json:"cases"`
	Ops       map[string]*OpResult `json:"ops"`
	// OpsPaired are gotrain's per-op benchmark against C++'s in turns, by op (pair.go).
	OpsPaired  map[string]*Paired `json:"ops_paired,omitempty"`
	Checkpoint string             `json:"checkpoint_table"`
	CkptGo     []float64          `json:"checkpoint_go_s"`     // medians: save (no fsync), save+fsync, load
	CkptPy     []float64          `json:"checkpoint_python_s"` // the same for torch.save / torch.load
	DataTable  string             `json:"data_table"`
	Targets    []string           `json:"targets"`
}

func main() {
	quick := flag.Bool("quick", false, "smoke run: fewer steps and epochs, a 100 MB checkpoint, no floors or variants")
	threadList := flag.String("threads", "1,2", "comma-separated thread counts")
	workloads := flag.String("workloads", "mlp,mlp256,cnn,cnn-bf16", "comma-separated workloads")
	reps := flag.Int("reps", 4, "timed epochs per run after the warm-up epoch (RSS growth is epoch 2 to the last)")
	bin := flag.String("bin", "build/bench", "directory of goloop, loop, opbench, ops, checkpointbench and databench")
	python := flag.String("python", ".venv/bin/python", "Python with torch")
	readme := flag.String("readme", "", "README to update between <!-- bench:begin --> and <!-- bench:end -->")
	outDir := flag.String("out", "bench/results", "results directory")
	skipExtra := flag.Bool("loops-only", false, "skip the per-op, checkpoint and data benchmarks")
	rounds := flag.Int("rounds", 4, "runs of each implementation per case, and of each per-op benchmark, in rotated order")
	pairReps := flag.Int("pair-reps", 16, "timed epochs of each loop of a pair measured in turns (0: none)")
	pairProcs := flag.Int("pair-procs", 8, "pairs of processes the turns of a pair are spread over (each process keeps its speed for its life)")
	stepsFlag := flag.String("steps", "", "steps per epoch by workload, overriding the defaults: mlp=2000,cnn=24")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("bench: ")

	cfg := config{bin: *bin, python: *python, warmup: 1, reps: *reps, seed: 1,
		steps: map[string]int{"mlp": 400, "mlp256": 150, "cnn": 12, "cnn-bf16": 12}, rounds: *rounds, pairReps: *pairReps, pairProcs: *pairProcs}
	for _, im := range impls {
		if im.quick || !*quick {
			cfg.impls = append(cfg.impls, im.name)
		}
	}
	opsN, opsReps, ckptMB, ckptReps, dataSteps := "100000", "7", "500", "5", "60"
	if *quick {
		cfg.reps = min(cfg.reps, 2)
		cfg.steps = map[string]int{"mlp": 50, "mlp256": 25, "cnn": 2, "cnn-bf16": 2}
		cfg.rounds = 1
		cfg.pairReps = min(cfg.pairReps, 3)
		cfg.pairProcs = 1
		opsN, opsReps, ckptMB, dataSteps = "20000", "5", "100", "0"
	}
	if err := overrideSteps(cfg.steps, *stepsFlag); err != nil {
		log.Fatal(err)
	}
	host, _ := os.Hostname()
	res := &Results{
		Date: time.Now().Format("2006-01-02"), Host: host, CPU: cpuModel(), Cores: runtime.NumCPU(),
		Command: commandLine(*quick), Quick: *quick,
		MallocEnv: mallocEnv, LoadStart: loopio.LoadAvg(),
	}
	res.Rounds = cfg.rounds
	for _, name := range strings.Split(*workloads, ",") {
		w, err := loopio.Lookup(name)
		if err != nil {
			log.Fatal(err)
		}
		dir := filepath.Join(cfg.bin, "work", w.Name)
		if err := run(nil, filepath.Join(cfg.bin, "goloop"), "-prep", dir, "-workload", w.Name,
			"-steps", fmt.Sprint(cfg.steps[w.Name]), "-seed", fmt.Sprint(cfg.seed)); err != nil {
			log.Fatal(err)
		}
		for _, ts := range strings.Split(*threadList, ",") {
			th, err := strconv.Atoi(ts)
			if err != nil {
				log.Fatalf("bad -threads %q", *threadList)
			}
			c, err := runCase(cfg, w, dir, th)
			if err != nil {
				log.Fatal(err)
			}
			res.Cases = append(res.Cases, c)
			if res.Torch == "" {
				res.Torch = c.Impl["python"].Torch
			}
		}
	}
	if !*skipExtra {
		var err error
		if res.Ops, err = runOps(cfg, opsN, opsReps); err != nil {
			log.Fatal(err)
		}
		if cfg.pairReps > 0 {
			if res.OpsPaired, err = runOpsPaired(cfg, opsN, cfg.pairReps); err != nil {
				log.Fatal(err)
			}
		}
		out, err := output(mallocEnv, filepath.Join(cfg.bin, "checkpointbench"), "-mb", ckptMB, "-reps", ckptReps, "-python", cfg.python)
		if err != nil {
			log.Fatal(err)
		}
		res.Checkpoint = strings.TrimSpace(out)
		res.CkptGo, res.CkptPy = parseCheckpoint(out)
		out, err = output(nil, filepath.Join(cfg.bin, "databench"), "-workers", "1,2", "-train-steps", dataSteps)
		if err != nil {
			log.Fatal(err)
		}
		res.DataTable = strings.TrimSpace(out)
	}
	res.LoadEnd = loopio.LoadAvg()
	res.Targets = targets(res)
	md := markdown(res)
	fmt.Print(md)

	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		log.Fatal(err)
	}
	base := filepath.Join(*outDir, res.Date+"-"+host)
	if *quick {
		base += "-quick"
	}
	js, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(base+".json", append(js, '\n'), 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(base+".md", []byte(md), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("\nwrote %s.json and %s.md\n", base, base)
	if *readme != "" {
		if err := updateReadme(*readme, md); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("updated %s\n", *readme)
	}
	for _, c := range res.Cases {
		if !c.LossCheckOK {
			log.Fatalf("%s with %d threads: losses disagree: %s", c.Workload, c.Threads, strings.Join(c.LossProblems, "; "))
		}
	}
}

// pairedRuns are the like-for-like pairs also measured in turns: {C++ twin, gotrain loop}.
var pairedRuns = [][2]string{{"cpp-fused", "go"}, {"cpp-fused", "go-raw"}, {"cpp-fused", "go-own"}, {"cpp-foreach", "go-unfused"}}

func runCase(cfg config, w loopio.Workload, dir string, threads int) (*Case, error) {
	c := &Case{Workload: w.Name, Desc: w.Desc, Threads: threads, BF16: w.BF16, Impl: map[string]*Measurement{},
		CrossKernelTol: crossKernelTol(w.BF16)}
	for r := range cfg.rounds {
		// Each round runs every implementation as a new process, in rotated order, so
		// that a change in the machine's load does not fall on one implementation.
		order := append(slices.Clone(cfg.impls[r%len(cfg.impls):]), cfg.impls[:r%len(cfg.impls)]...)
		for _, impl := range order {
			if err := runImpl(cfg, c, w, dir, threads, impl, cfg.reps); err != nil {
				return nil, err
			}
		}
	}
	for _, m := range c.Impl {
		steps := float64(m.Steps)
		// A run's median epoch discards the epochs another job hit; across runs, the
		// machine's interference only ever adds time (a process here keeps one speed for
		// its life, up to 30% slower than the next: bench/README.md), so the fastest run
		// is the estimate of the code's own cost, as timeit takes the fastest repeat.
		// Every implementation gets the same runs in rotated order.
		m.StepUS = slices.Min(m.RunMedians) / steps * 1e6
		m.StepUSMedian = median(m.RunMedians) / steps * 1e6
		m.StepUSMin = slices.Min(m.Timed) / steps * 1e6
		m.StepUSMax = slices.Max(m.Timed) / steps * 1e6
		m.SamplesPerS = steps * float64(m.Batch) / median(m.Timed)
	}
	checkLosses(c)
	for _, pr := range pairedRuns {
		if !slices.Contains(cfg.impls, pr[0]) || !slices.Contains(cfg.impls, pr[1]) || cfg.pairReps == 0 {
			continue
		}
		p, err := runPaired(cfg, c, w, dir, threads, pr[0], pr[1], cfg.pairReps)
		if err != nil {
			return nil, err
		}
		if c.Paired == nil {
			c.Paired = map[string]*Paired{}
		}
		c.Paired[pr[1]] = p
	}
	for name, m := range c.Impl {
		m.OverTwinUS = m.StepUS - c.Impl[twin(name)].StepUS
	}
	if g := c.Impl["go"]; g != nil && g.LoaderS > 0 {
		c.GoLoaderUS = g.LoaderS / float64(g.Steps) * 1e6
	}
	return c, nil
}

// checkLosses compares every implementation's first-epoch losses with its C++ twin's
// (exactly), and the twins of the kernels with each other (within CrossKernelTol).
func checkLosses(c *Case) {
	c.LossCheckOK = true
	fail := func(format string, args ...any) {
		c.LossCheckOK = false
		c.LossProblems = append(c.LossProblems, fmt.Sprintf(format, args...))
	}
	compare := func(a, b string, tol float64) float64 {
		ma, mb := c.Impl[a], c.Impl[b]
		if ma == nil || mb == nil {
			return 0
		}
		if len(ma.Losses) == 0 || len(ma.Losses) != len(mb.Losses) {
			fail("%s has %d losses, %s %d", a, len(ma.Losses), b, len(mb.Losses))
			return math.Inf(1)
		}
		d := maxDiff(ma.Losses, mb.Losses)
		if d > tol {
			fail("%s vs %s: %.3g > %g", a, b, d, tol)
		}
		return d
	}
	for name, m := range c.Impl {
		if t := twin(name); t != name {
			if c.Impl[t] == nil {
				fail("%s ran without its twin %s", name, t)
				continue
			}
			m.LossDiff = compare(name, t, sameKernelTol)
			c.SameKernelDiff = max(c.SameKernelDiff, m.LossDiff)
		}
	}
	for _, pair := range [][2]string{{"cpp-foreach", "cpp-fused"}, {"cpp-single", "cpp-fused"}, {"cpp-single", "cpp-foreach"}} {
		c.CrossKernelDiff = max(c.CrossKernelDiff, compare(pair[0], pair[1], c.CrossKernelTol))
	}
}

// overrideSteps sets steps[w] for each "w=n" of the comma-separated spec, all of them or,
// when one is not valid, none.
func overrideSteps(steps map[string]int, spec string) error {
	if spec == "" {
		return nil
	}
	set := map[string]int{}
	for _, kv := range strings.Split(spec, ",") {
		w, v, ok := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if _, known := steps[w]; !ok || err != nil || n < 1 || !known {
			return fmt.Errorf("-steps: %q is not workload=steps with a known workload and steps >= 1", kv)
		}
		set[w] = n
	}
	maps.Copy(steps, set)
	return nil
}

// commandLine is how the results say they were made: make bench, with the flags that
// differ from its defaults as BENCH_ARGS (the -quick and -readme that make passes aside).
func commandLine(quick bool) string {
	cmd := "make bench"
	if quick {
		cmd += " BENCH_QUICK=1"
	}
	var args []string
	flag.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "quick", "readme", "python", "bin", "out":
			return
		}
		// -name=value: a bool flag takes no separate value ("-loops-only true" would end
		// the flags at "true" and drop every flag after it).
		args = append(args, "-"+f.Name+"="+f.Value.String())
	})
	if len(args) > 0 {
		cmd += " BENCH_ARGS='" + strings.Join(args, " ") + "'"
	}
	return cmd
}

// implArgs is the command line of one implementation.
func implArgs(cfg config, impl string, common []string) []string {
	goloop, loop := filepath.Join(cfg.bin, "goloop"), filepath.Join(cfg.bin, "loop")
	py := []string{cfg.python, "bench/python/seed_loop.py"}
	var args []string
	switch impl {
	case "go":
		args = []string{goloop}
	case "go-raw":
		args = []string{goloop, "-raw"}
	case "go-own":
		args = []string{goloop, "-own-layers"}
	case "go-unfused":
		args = []string{goloop, "-fused=false"}
	case "python":
		args = py
	case "python-batches":
		args = append(py, "--loader", "batches")
	case "python-fused", "python-foreach":
		args = append(py, "--adam", strings.TrimPrefix(impl, "python-"))
	case "cpp-fused", "cpp-foreach", "cpp-single":
		args = []string{loop, "--adam", strings.TrimPrefix(impl, "cpp-")}
	default:
		panic("bench: no command for " + impl)
	}
	return append(slices.Clone(args), common...)
}

// loopCommand is the environment and command line of one run of impl.
func loopCommand(cfg config, w loopio.Workload, dir string, threads int, impl string, reps int) (env, args []string) {
	env = append([]string{fmt.Sprintf("OMP_NUM_THREADS=%d", threads), fmt.Sprintf("MKL_NUM_THREADS=%d", threads)}, mallocEnv...)
	common := []string{"--workload", w.Name, "--dir", dir, "--threads", fmt.Sprint(threads),
		"--warmup", fmt.Sprint(cfg.warmup), "--reps", fmt.Sprint(reps), "--seed", fmt.Sprint(cfg.seed)}
	return env, implArgs(cfg, impl, common)
}

// loopResult parses and checks the result line of a run of impl.
func loopResult(out, impl string, w loopio.Workload, threads int) (*loopio.Result, error) {
	var res loopio.Result
	if err := json.Unmarshal([]byte(lastLine(out)), &res); err != nil {
		return nil, fmt.Errorf("%s %s: output %q: %w", impl, w.Name, out, err)
	}
	if res.Threads != threads {
		return nil, fmt.Errorf("%s ran with %d threads, not %d", impl, res.Threads, threads)
	}
	if want := lookupImpl(impl).adam; res.Adam != want {
		return nil, fmt.Errorf("%s ran Adam %q, not %q", impl, res.Adam, want)
	}
	// The Trainer columns measure its default step as a user gets it: in one call into
	// libtorch per step (trainer.WithOneCallStep).
	if (impl == "go" || impl == "go-own" || impl == "go-unfused") && !w.BF16 && !res.FusedStep {
		return nil, fmt.Errorf("%s %s: the Trainer did not run its fused step", impl, w.Name)
	}
	return &res, nil
}

// runImpl runs one implementation once. The first run of an implementation gives its
// losses and RSS series; the timed epochs of every run are pooled.
func runImpl(cfg config, c *Case, w loopio.Workload, dir string, threads int, impl string, reps int) error {
	env, args := loopCommand(cfg, w, dir, threads, impl, reps)
	before := load1()
	out, err := output(env, args[0], args[1:]...)
	if err != nil {
		return fmt.Errorf("%s %s: %w", impl, w.Name, err)
	}
	res, err := loopResult(out, impl, w, threads)
	if err != nil {
		return err
	}
	after := load1()
	m := c.Impl[impl]
	if m == nil {
		m = &Measurement{Result: *res, Name: impl, Load: [2]float64{before, after}}
		if len(m.RSSMB) > 2 {
			first, last := m.RSSMB[1], m.RSSMB[len(m.RSSMB)-1]
			m.RSSGrowthPct = (last - first) / first * 100
		}
		c.Impl[impl] = m
	}
	m.Timed = append(m.Timed, res.EpochS[res.Warmup:]...)
	m.RunMedians = append(m.RunMedians, median(res.EpochS[res.Warmup:]))
	if res.PeakRSSMB > m.PeakRSSMB {
		m.PeakRSSMB, m.BaseRSSMB = res.PeakRSSMB, res.BaseRSSMB
	}
	m.PeakOverBaseMB = m.PeakRSSMB - m.BaseRSSMB
	m.Load = [2]float64{max(m.Load[0], before), max(m.Load[1], after)}
	fmt.Fprintf(os.Stderr, "%-9s %d thr  %-15s %9.1f µs/step  (load %.1f→%.1f)\n", w.Name, threads, impl,
		median(res.EpochS[res.Warmup:])/float64(res.Steps)*1e6, before, after)
	return nil
}

// opsEnv is the per-op processes' environment: one thread, the loops' allocator setting.
var opsEnv = append([]string{"OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1"}, mallocEnv...)

// runOps runs the per-op microbenchmark in Go, C++ and Python, at one thread, with the
// loops' allocator setting: cfg.rounds runs of each, in rotated order, their reps pooled.
func runOps(cfg config, n, reps string) (map[string]*OpResult, error) {
	env := opsEnv
	flags := []string{"--n", n, "--reps", reps, "--threads", "1"}
	cmds := map[string][]string{
		"go":     append([]string{filepath.Join(cfg.bin, "opbench")}, flags...),
		"cpp":    append([]string{filepath.Join(cfg.bin, "ops")}, flags...),
		"python": append([]string{cfg.python, "bench/python/ops.py"}, flags...),
	}
	out := map[string]*OpResult{}
	langs := []string{"go", "cpp", "python"}
	for r := range cfg.rounds {
		for _, lang := range append(slices.Clone(langs[r%3:]), langs[:r%3]...) {
			if err := runOp(env, cmds[lang], lang, out); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// runOp runs one per-op process and adds its reps to out[lang].
func runOp(env, args []string, lang string, out map[string]*OpResult) error {
	before := load1()
	text, err := output(env, args[0], args[1:]...)
	if err != nil {
		return fmt.Errorf("per-op %s: %w", lang, err)
	}
	var r OpResult
	if err := json.Unmarshal([]byte(lastLine(text)), &r); err != nil {
		return fmt.Errorf("per-op %s: output %q: %w", lang, text, err)
	}
	if r.Threads != 1 {
		return fmt.Errorf("per-op %s ran with %d threads", lang, r.Threads)
	}
	r.Load, r.Runs = [2]float64{before, load1()}, 1
	fmt.Fprintf(os.Stderr, "per-op    %-7s add %6.0f ns  linear %6.0f ns  (median; load %.1f→%.1f)\n", lang,
		r.Median("add"), r.Median("linear"), r.Load[0], r.Load[1])
	acc := out[lang]
	if acc == nil {
		out[lang] = &r
		return nil
	}
	acc.Runs++
	acc.Load = [2]float64{max(acc.Load[0], r.Load[0]), max(acc.Load[1], r.Load[1])}
	for op, v := range r.NsPerOp {
		acc.NsPerOp[op] = append(acc.NsPerOp[op], v...)
	}
	return nil
}

func maxDiff(a, b []float64) float64 {
	d := 0.0
	for i := range min(len(a), len(b)) {
		d = max(d, math.Abs(a[i]-b[i]))
	}
	return d
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func run(env []string, name string, args ...string) error {
	_, err := output(env, name, args...)
	return err
}

func output(env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	var out bytes.Buffer
	cmd.Stdout = &out
	err := cmd.Run()
	return out.String(), err
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func load1() float64 {
	v, _ := strconv.ParseFloat(strings.Fields(loopio.LoadAvg() + " 0")[0], 64)
	return v
}

var ckptRow = regexp.MustCompile(`\|\s*([^|]+?)\s*\|[^|]*\(([\d.]+)s\)\s*\|[^|]*\(([\d.]+)s\)\s*\|`)

// parseCheckpoint picks the Go and Python seconds of bench/checkpoint's three rows:
// write without fsync, write with fsync, read.
func parseCheckpoint(out string) (g, p []float64) {
	for _, m := range ckptRow.FindAllStringSubmatch(out, -1) {
		gs, _ := strconv.ParseFloat(m[2], 64)
		ps, _ := strconv.ParseFloat(m[3], 64)
		g, p = append(g, gs), append(p, ps)
	}
	return g, p
}

func updateReadme(path, md string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	const begin, end = "<!-- bench:begin -->", "<!-- bench:end -->"
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %s ... %s markers", path, begin, end)
	}
	s = s[:i+len(begin)] + "\n" + md + s[j:]
	return os.WriteFile(path, []byte(s), 0o644)
}
