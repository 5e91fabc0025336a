// Command bench runs the gotrain-vs-Python-vs-C++ benchmarks that `make bench` runs, and
// writes bench/results/<date>-<host>.{json,md}.
//
//	bench [-quick] [-threads 1,2] [-workloads mlp,mlp256,cnn,cnn-bf16] [-readme README.md]
//
// For each workload it has goloop draw the dataset and initial weights once, then, for
// each thread count, runs the three implementations as separate processes, one after the
// other, with OMP_NUM_THREADS and MKL_NUM_THREADS set and the same count passed to
// set_num_threads in each: gotrain's Trainer (build/bench/goloop), the seed's Python loop
// fed by a DataLoader (bench/python/seed_loop.py) and by pre-sliced batches, and the
// libtorch C++ loop (build/bench/loop). It checks that their first-epoch losses agree
// within 1e-4, then runs bench/checkpoint and bench/data, prints a markdown table, and
// with -readme replaces the text between README's bench markers with it.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"log"
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

// The implementations, in table order. "go" is the Trainer with its default fused Adam;
// "go-raw" is the loop written directly against package torch over pre-sliced batches
// (the binding without Trainer and Loader); "go-unfused" is the Trainer with PyTorch's
// default (multi-tensor, unfused) Adam arithmetic, the same algorithm as the C++ loop;
// "python-fused" is the seed's loop with Adam(fused=True), gotrain's default's twin;
// "python-batches" is the seed's loop with the DataLoader replaced by a list of batch
// tensors (Python's floor).
var impls = []string{"go", "go-raw", "go-unfused", "python", "python-batches", "python-fused", "cpp"}

// lossRef is the implementation whose losses impl's must match (within 1e-4): the one
// running the same Adam kernel. The fused kernel rounds differently from the multi-tensor
// ops, and under bf16 autocast that grows past 1e-4 within the checked steps.
func lossRef(impl string) string {
	switch impl {
	case "go", "go-raw", "python-fused":
		return "python-fused"
	}
	return "cpp"
}

type config struct {
	bin, python string
	warmup      int
	reps        int
	seed        int64
	steps       map[string]int
	impls       []string
	rounds      int
}

// Measurement is one implementation on one workload and thread count.
type Measurement struct {
	loopio.Result
	Name         string     `json:"name"`
	StepUS       float64    `json:"step_us_median"`
	StepUSMin    float64    `json:"step_us_min"`
	StepUSMax    float64    `json:"step_us_max"`
	SamplesPerS  float64    `json:"samples_per_s"`
	OverCppUS    float64    `json:"overhead_over_cpp_us"`
	RSSGrowthPct float64    `json:"rss_growth_pct_epoch2_to_last"`
	LossDiff     float64    `json:"max_loss_diff_vs_same_kernel"`
	Load         [2]float64 `json:"loadavg_before_after"`
	// Timed holds the timed epochs of every round.
	Timed []float64 `json:"timed_epoch_s"`
}

// Case is one workload at one thread count.
type Case struct {
	Workload    string                  `json:"workload"`
	Desc        string                  `json:"desc"`
	Threads     int                     `json:"threads"`
	Impl        map[string]*Measurement `json:"impl"`
	LossCheckOK bool                    `json:"loss_check_ok"`
	GoLoaderUS  float64                 `json:"go_loader_us_per_step"`
}

// Results is the JSON file.
type Results struct {
	Date       string    `json:"date"`
	Host       string    `json:"host"`
	CPU        string    `json:"cpu"`
	Cores      int       `json:"cores"`
	Torch      string    `json:"torch"`
	Command    string    `json:"command"`
	Quick      bool      `json:"quick"`
	Rounds     int       `json:"rounds"`
	LoadStart  string    `json:"loadavg_start"`
	LoadEnd    string    `json:"loadavg_end"`
	Cases      []*Case   `json:"cases"`
	Checkpoint string    `json:"checkpoint_table"`
	CkptGo     []float64 `json:"checkpoint_go_s"`     // save (no fsync), save+fsync, load
	CkptPy     []float64 `json:"checkpoint_python_s"` // the same for torch.save / torch.load
	DataTable  string    `json:"data_table"`
	Targets    []string  `json:"targets"`
}

func main() {
	quick := flag.Bool("quick", false, "smoke run: fewer steps and epochs, a 100 MB checkpoint")
	threadList := flag.String("threads", "1,2", "comma-separated thread counts")
	workloads := flag.String("workloads", "mlp,mlp256,cnn,cnn-bf16", "comma-separated workloads")
	reps := flag.Int("reps", 9, "timed epochs after the warm-up epoch (RSS growth is epoch 2 to the last)")
	bin := flag.String("bin", "build/bench", "directory of goloop, loop and the data bench")
	python := flag.String("python", ".venv/bin/python", "Python with torch")
	readme := flag.String("readme", "", "README to update between <!-- bench:begin --> and <!-- bench:end -->")
	outDir := flag.String("out", "bench/results", "results directory")
	skipExtra := flag.Bool("loops-only", false, "skip the checkpoint and data benchmarks")
	rounds := flag.Int("rounds", 2, "runs of each implementation per case, in rotated order (later ones with 3 timed epochs)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("bench: ")

	cfg := config{bin: *bin, python: *python, warmup: 1, reps: *reps, seed: 1,
		steps: map[string]int{"mlp": 400, "mlp256": 150, "cnn": 12, "cnn-bf16": 12}, impls: impls, rounds: *rounds}
	if *quick {
		cfg.reps = min(cfg.reps, 2)
		cfg.steps = map[string]int{"mlp": 50, "mlp256": 25, "cnn": 2, "cnn-bf16": 2}
		cfg.impls = []string{"go", "python", "python-fused", "cpp"} // the three and go's twin; floors and variants only in full runs
		cfg.rounds = 1
	}
	host, _ := os.Hostname()
	res := &Results{
		Date: time.Now().Format("2006-01-02"), Host: host, CPU: cpuModel(), Cores: runtime.NumCPU(),
		Command: "make bench" + map[bool]string{true: " BENCH_QUICK=1"}[*quick], Quick: *quick, LoadStart: loadavg(),
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
		mb, creps := "500", "3"
		if *quick {
			mb, creps = "100", "1"
		}
		out, err := output(nil, "go", "run", "./bench/checkpoint", "-mb", mb, "-reps", creps)
		if err != nil {
			log.Fatal(err)
		}
		res.Checkpoint = strings.TrimSpace(out)
		res.CkptGo, res.CkptPy = parseCheckpoint(out)
		steps := "60"
		if *quick {
			steps = "0"
		}
		out, err = output(nil, filepath.Join(cfg.bin, "databench"), "-workers", "1,2", "-train-steps", steps)
		if err != nil {
			log.Fatal(err)
		}
		res.DataTable = strings.TrimSpace(out)
	}
	res.LoadEnd = loadavg()
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
			log.Fatalf("%s with %d threads: the implementations' losses differ by more than 1e-4", c.Workload, c.Threads)
		}
	}
}

func runCase(cfg config, w loopio.Workload, dir string, threads int) (*Case, error) {
	c := &Case{Workload: w.Name, Desc: w.Desc, Threads: threads, Impl: map[string]*Measurement{}, LossCheckOK: true}
	for r := range cfg.rounds {
		// Later rounds run the implementations in rotated order with fewer epochs, so
		// that a change in the machine's load does not fall on one implementation.
		order := append(slices.Clone(cfg.impls[r%len(cfg.impls):]), cfg.impls[:r%len(cfg.impls)]...)
		reps := cfg.reps
		if r > 0 {
			reps = min(reps, 3)
		}
		for _, impl := range order {
			if err := runImpl(cfg, c, w, dir, threads, impl, reps); err != nil {
				return nil, err
			}
		}
	}
	for _, m := range c.Impl {
		steps := float64(m.Steps)
		m.StepUS = median(m.Timed) / steps * 1e6
		m.StepUSMin = slices.Min(m.Timed) / steps * 1e6
		m.StepUSMax = slices.Max(m.Timed) / steps * 1e6
		m.SamplesPerS = steps * float64(m.Batch) / median(m.Timed)
	}
	cpp := c.Impl["cpp"]
	for name, m := range c.Impl {
		m.OverCppUS = m.StepUS - cpp.StepUS
		ref := c.Impl[lossRef(name)]
		m.LossDiff = maxDiff(m.Losses, ref.Losses)
		if m.LossDiff > 1e-4 || len(m.Losses) != len(ref.Losses) || len(m.Losses) == 0 {
			c.LossCheckOK = false
		}
	}
	if g := c.Impl["go"]; g != nil && g.LoaderS > 0 {
		c.GoLoaderUS = g.LoaderS / float64(g.Steps) * 1e6
	}
	return c, nil
}

// runImpl runs one implementation once. The first run of an implementation gives its
// losses and RSS series; the timed epochs of every run are pooled.
func runImpl(cfg config, c *Case, w loopio.Workload, dir string, threads int, impl string, reps int) error {
	env := []string{fmt.Sprintf("OMP_NUM_THREADS=%d", threads), fmt.Sprintf("MKL_NUM_THREADS=%d", threads)}
	common := []string{"--workload", w.Name, "--dir", dir, "--threads", fmt.Sprint(threads),
		"--warmup", fmt.Sprint(cfg.warmup), "--reps", fmt.Sprint(reps), "--seed", fmt.Sprint(cfg.seed)}
	var args []string
	switch impl {
	case "go":
		args = append([]string{filepath.Join(cfg.bin, "goloop")}, common...)
	case "go-raw":
		args = append([]string{filepath.Join(cfg.bin, "goloop"), "-raw"}, common...)
	case "go-unfused":
		args = append([]string{filepath.Join(cfg.bin, "goloop"), "-fused=false"}, common...)
	case "python":
		args = append([]string{cfg.python, "bench/python/seed_loop.py"}, common...)
	case "python-batches":
		args = append([]string{cfg.python, "bench/python/seed_loop.py", "--loader", "batches"}, common...)
	case "python-fused":
		args = append([]string{cfg.python, "bench/python/seed_loop.py", "--fused"}, common...)
	case "cpp":
		args = append([]string{filepath.Join(cfg.bin, "loop")}, common...)
	}
	before := load1()
	out, err := output(env, args[0], args[1:]...)
	if err != nil {
		return fmt.Errorf("%s %s: %w", impl, w.Name, err)
	}
	var res loopio.Result
	if err := json.Unmarshal([]byte(lastLine(out)), &res); err != nil {
		return fmt.Errorf("%s %s: output %q: %w", impl, w.Name, out, err)
	}
	if res.Threads != threads {
		return fmt.Errorf("%s ran with %d threads, not %d", impl, res.Threads, threads)
	}
	after := load1()
	m := c.Impl[impl]
	if m == nil {
		m = &Measurement{Result: res, Name: impl, Load: [2]float64{before, after}}
		if len(m.RSSMB) > 2 {
			first, last := m.RSSMB[1], m.RSSMB[len(m.RSSMB)-1]
			m.RSSGrowthPct = (last - first) / first * 100
		}
		c.Impl[impl] = m
	}
	m.Timed = append(m.Timed, res.EpochS[res.Warmup:]...)
	m.PeakRSSMB = max(m.PeakRSSMB, res.PeakRSSMB)
	m.Load = [2]float64{max(m.Load[0], before), max(m.Load[1], after)}
	fmt.Fprintf(os.Stderr, "%-9s %d thr  %-15s %9.1f µs/step  (load %.1f→%.1f)\n", w.Name, threads, impl,
		median(res.EpochS[res.Warmup:])/float64(res.Steps)*1e6, before, after)
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

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func load1() float64 {
	v, _ := strconv.ParseFloat(strings.Fields(loadavg() + " 0")[0], 64)
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
