// Command llm benchmarks a small Llama on the CPU, gotrain against transformers, peft
// and tokenizers on the same libtorch, the same weights, data and thread count:
// full fine-tuning and LoRA fine-tuning tokens/s and peak RSS (LoRA with and without
// gradient checkpointing), greedy generation with the KV cache (new tokens/s), and the
// tokenizer's encode throughput (MB/s) on the same tokenizer.json. Run it from the module
// root:
//
//	go run -tags cpu ./bench/llm [-rounds 5] [-cpumem build/bench/libcpumem.so] [-results bench/results]
//
// bench.py setup trains a Llama-3-style byte-level BPE on the corpus with tokenizers and
// saves a LlamaForCausalLM with random weights next to it; both sides load that
// directory. Each workload runs in its own process (this program again, or bench.py), so
// each peak RSS is one workload's, and the processes take turns: a round runs every
// workload in gotrain and in Python, alternating which goes first, and each figure is the
// best of the rounds, since other jobs on a shared machine only ever slow a run down.
// It prints a markdown table and one JSON line, and with -results writes both to
// DIR/<date>-llm.{md,json}. It exits non-zero when the two sides did not compute the same
// thing: first losses apart, different greedy tokens or different token ids.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/gotrain/gotrain/bench/internal/lmbench"
	"github.com/gotrain/gotrain/bench/internal/loopio"
	"github.com/gotrain/gotrain/torch"
)

// spec is the benchmark's configuration, written to DIR/spec.json for every process
// (bench.py reads the same keys).
type spec struct {
	lmbench.Shape
	MaxPositions int      `json:"max_positions"`
	Batch        int      `json:"batch"`
	Seq          int      `json:"seq"`
	Warmup       int      `json:"warmup"`
	Steps        int      `json:"steps"`
	LR           float64  `json:"lr"`
	LoraR        int      `json:"lora_r"`
	LoraAlpha    float64  `json:"lora_alpha"`
	LoraTargets  []string `json:"lora_targets"`
	// The moe workload's Mixtral: the Llama's sizes with Experts experts of width
	// MoEIntermediate in each layer, TopK per token.
	Experts         int    `json:"experts"`
	TopK            int    `json:"top_k"`
	MoEIntermediate int    `json:"moe_intermediate"`
	Threads         int    `json:"threads"`
	Prompt          int    `json:"prompt"`
	NewTokens       int    `json:"new_tokens"`
	GenReps         int    `json:"gen_reps"`
	Corpus          string `json:"corpus"`
	CountTensors    bool   `json:"count_tensors"`
	CPUMemLibrary   string `json:"cpumem,omitempty"`
}

func readSpec(dir string) (spec, error) {
	var s spec
	raw, err := os.ReadFile(filepath.Join(dir, "spec.json"))
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(raw, &s)
}

// result is one process's numbers; bench.py prints the same keys.
type result struct {
	Impl     string `json:"impl"`
	Workload string `json:"workload"`
	Threads  int    `json:"threads"`
	Torch    string `json:"torch"`
	// Training: tokens/s and tokens per CPU-second of the median timed step.
	TokensPerS    float64   `json:"tokens_per_s,omitempty"`
	TokensPerCPUS float64   `json:"tokens_per_cpu_s,omitempty"`
	StepS         []float64 `json:"step_s,omitempty"`
	StepCPUS      []float64 `json:"step_cpu_s,omitempty"`
	Losses        []float64 `json:"losses,omitempty"`
	Trainable     int64     `json:"trainable,omitempty"`
	// Generation: new tokens/s of the best run.
	GenTokensPerS    float64 `json:"gen_tokens_per_s,omitempty"`
	GenTokensPerCPUS float64 `json:"gen_tokens_per_cpu_s,omitempty"`
	Generated        []int64 `json:"generated,omitempty"`
	// Tokenizer: MB/s of the best of two passes over the corpus, each with a fresh
	// tokenizer; the ids' SHA-256 (int64 little-endian).
	TokBytes       int     `json:"tok_bytes,omitempty"`
	TokMBPerS      float64 `json:"tok_mb_per_s,omitempty"`
	TokMBPerCPUS   float64 `json:"tok_mb_per_cpu_s,omitempty"`
	TokLoopMBPerS  float64 `json:"tok_loop_mb_per_s,omitempty"` // Python only: a loop of encode
	TokCPUOverWall float64 `json:"tok_cpu_over_wall,omitempty"`
	TokSHA256      string  `json:"tok_sha256,omitempty"`
	// Memory: VmRSS before the model is loaded, VmHWM at the end, and the peak of the
	// bytes of live CPU tensor storages during the timed work (the counting allocator of
	// cgotorch/cpumem.cc in both processes; only with -cpumem).
	BaseRSSMB    float64 `json:"base_rss_mb"`
	PeakRSSMB    float64 `json:"peak_rss_mb"`
	TensorPeakMB float64 `json:"tensor_peak_mb,omitempty"`
}

var workloads = []string{"train", "lora", "lora-ckpt", "gen", "moe"}

func main() {
	log.SetFlags(0)
	log.SetPrefix("bench/llm: ")
	work := flag.String("worker", "", "internal: run one workload (train, lora, lora-ckpt, gen, moe) on -dir and print its JSON")
	dir := flag.String("dir", "", "internal: the directory bench.py setup wrote, for -worker")
	s := spec{MaxPositions: 512, LR: 1e-3}
	s.Shape = lmbench.Shape{Vocab: 8000, Hidden: 256, Intermediate: 688, Layers: 4, Heads: 8, KVHeads: 4}
	s.Shape.Flags(flag.CommandLine)
	flag.Lookup("vocab").Usage = "BPE vocabulary the tokenizer is trained to"
	flag.IntVar(&s.LoraR, "lora-r", 8, "LoRA rank")
	flag.Float64Var(&s.LoraAlpha, "lora-alpha", 16, "LoRA alpha")
	targets := flag.String("lora-targets", "q_proj,v_proj", "LoRA target modules")
	flag.IntVar(&s.Experts, "experts", 8, "the moe workload's experts per layer (num_local_experts)")
	flag.IntVar(&s.TopK, "top-k", 2, "the moe workload's experts per token (num_experts_per_tok)")
	flag.IntVar(&s.MoEIntermediate, "moe-intermediate", 344, "the moe workload's expert width (intermediate_size)")
	flag.IntVar(&s.Prompt, "prompt", 16, "prompt tokens for generation")
	shape := lmbench.Run{Batch: 8, Seq: 128, Warmup: 2, Steps: 4, NewTokens: 128, Threads: 1}
	shape.Flags(flag.CommandLine)
	flag.Lookup("steps").Usage += " (the median step is scored)"
	flag.Lookup("threads").Usage += " in every process"
	flag.IntVar(&s.GenReps, "gen-reps", 5, "timed generation runs per process (the best is scored)")
	flag.StringVar(&s.Corpus, "corpus", ".cache/corpus/kjv.txt", "text the tokenizer is trained on and encodes, and the training data (scripts/setup.sh downloads the KJV)")
	rounds := flag.Int("rounds", 3, "rounds of every workload in both implementations, taken in turns")
	only := flag.String("workloads", strings.Join(workloads, ","), "workloads to run")
	python := flag.String("python", ".venv/bin/python", "Python with torch, transformers, peft and tokenizers")
	flag.StringVar(&s.CPUMemLibrary, "cpumem", "", "cgotorch/cpumem.cc as a shared object (make bench builds build/bench/libcpumem.so): count tensor memory in both processes")
	results := flag.String("results", "", "write DIR/<date>-llm.{md,json}")
	flag.Parse()
	s.Batch, s.Seq, s.Warmup, s.Steps, s.NewTokens, s.Threads = shape.Batch, shape.Seq, shape.Warmup, shape.Steps, shape.NewTokens, shape.Threads

	if *work != "" {
		r, err := worker(*work, *dir)
		if err != nil {
			log.Fatalf("%s: %v", *work, err)
		}
		json.NewEncoder(os.Stdout).Encode(r)
		return
	}
	s.LoraTargets = strings.Split(*targets, ",")
	s.CountTensors = s.CPUMemLibrary != ""
	if err := run(s, *rounds, strings.Split(*only, ","), *python, *results); err != nil {
		log.Fatal(err)
	}
}

// relative writes the arguments that are paths under the working directory relative to
// it, so that the recorded command holds no path of this machine.
func relative(args []string) []string {
	wd, err := os.Getwd()
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if r, rerr := filepath.Rel(wd, a); err == nil && rerr == nil && filepath.IsAbs(a) && !strings.HasPrefix(r, "..") {
			out[i] = r
		}
	}
	return out
}

// report is what the run writes: the configuration, every process's result, the scored
// summary and the checks.
type report struct {
	Date      string               `json:"date"`
	Command   string               `json:"command"`
	Torch     string               `json:"torch"`
	CPUs      int                  `json:"cpus"`
	LoadStart string               `json:"loadavg_start"`
	LoadEnd   string               `json:"loadavg_end"`
	WallS     float64              `json:"wall_s"`
	Spec      spec                 `json:"spec"`
	Setup     map[string]any       `json:"setup"`
	Runs      []*result            `json:"runs"`
	Best      map[string][2]result `json:"best"` // workload → [gotrain, python]
	Rows      []row                `json:"rows"`
	Checks    []string             `json:"checks"`
	OK        bool                 `json:"ok"`
}

func run(s spec, rounds int, only []string, python, results string) error {
	start := time.Now()
	rep := report{Date: start.Format("2006-01-02"), Torch: torch.Version(), CPUs: runtime.NumCPU(), LoadStart: loopio.LoadAvg(), Spec: s,
		Command: "go run -tags cpu ./bench/llm " + strings.Join(relative(os.Args[1:]), " ")}
	if _, err := os.Stat(s.Corpus); err != nil {
		return fmt.Errorf("the corpus: %w (scripts/setup.sh downloads it)", err)
	}
	if abs, err := filepath.Abs(s.Corpus); err == nil {
		s.Corpus = abs
	}
	if s.CPUMemLibrary != "" {
		if _, err := os.Stat(s.CPUMemLibrary); err != nil {
			return fmt.Errorf("-cpumem: %w (make bench builds it)", err)
		}
	}
	dir, err := os.MkdirTemp("", "gotrain-llm-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	raw, _ := json.Marshal(s)
	if err := os.WriteFile(filepath.Join(dir, "spec.json"), raw, 0o644); err != nil {
		return err
	}
	log.Printf("training the tokenizer and saving the model (bench.py setup); load average %s", rep.LoadStart)
	setup := command(python, "bench/llm/bench.py", "setup", dir, s.Corpus)
	var stderr bytes.Buffer
	setup.Stderr = &stderr
	if err := setup.Run(); err != nil {
		return fmt.Errorf("bench.py setup: %w\n%s", err, stderr.String())
	}
	raw, err = os.ReadFile(filepath.Join(dir, "ids.json"))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, &rep.Setup); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	goArgs := func(w string) []string { return []string{self, "-worker", w, "-dir", dir} }
	pyArgs := func(w string) []string {
		a := []string{python, "bench/llm/bench.py", w, dir}
		if s.CPUMemLibrary != "" {
			a = append(a, "--cpumem", s.CPUMemLibrary)
		}
		return a
	}
	for r := range rounds {
		for i, w := range only {
			sides := [][]string{goArgs(w), pyArgs(w)}
			if (r+i)%2 == 1 { // alternate who goes first
				sides[0], sides[1] = sides[1], sides[0]
			}
			for _, args := range sides {
				res, err := runJSON(args)
				if err != nil {
					return err
				}
				log.Printf("round %d %-9s %-7s %s", r+1, w, res.Impl, brief(res))
				rep.Runs = append(rep.Runs, res)
			}
		}
	}
	rep.LoadEnd, rep.WallS = loopio.LoadAvg(), time.Since(start).Seconds()
	summarize(&rep)
	md := markdown(rep)
	fmt.Print(md)
	js, _ := json.Marshal(rep)
	fmt.Println(string(js))
	if results != "" {
		base := filepath.Join(results, rep.Date+"-llm")
		if err := os.WriteFile(base+".md", []byte(md), 0o644); err != nil {
			return err
		}
		js, _ = json.MarshalIndent(rep, "", " ")
		if err := os.WriteFile(base+".json", append(js, '\n'), 0o644); err != nil {
			return err
		}
		log.Printf("wrote %s.{md,json}", base)
	}
	if !rep.OK {
		return fmt.Errorf("the two sides disagree: %s", strings.Join(rep.Checks, "; "))
	}
	return nil
}

// command runs a twin with one intra-op thread's worth of helpers: tokenizers' Rayon
// pool and OpenMP limited to one thread too.
func command(prog string, args ...string) *exec.Cmd {
	cmd := exec.Command(prog, args...)
	cmd.Env = append(os.Environ(), "RAYON_NUM_THREADS=1", "TOKENIZERS_PARALLELISM=false", "PYTHONWARNINGS=ignore")
	cmd.Stderr = io.Discard
	return cmd
}

// runJSON runs one worker process and decodes the JSON object it prints last; its
// stderr is shown only when it fails.
func runJSON(args []string) (*result, error) {
	cmd := command(args[0], args[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var r result
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		return nil, fmt.Errorf("%s: its output: %v", strings.Join(args, " "), err)
	}
	return &r, nil
}

func brief(r *result) string {
	if r.Workload == "gen" {
		return fmt.Sprintf("%.0f new tokens/s, tokenizer %.2f MB/s, peak RSS %.0f MiB", r.GenTokensPerS, r.TokMBPerS, r.PeakRSSMB)
	}
	return fmt.Sprintf("%.0f tokens/s (%.0f per CPU-second), peak RSS %.0f MiB", r.TokensPerS, r.TokensPerCPUS, r.PeakRSSMB)
}

// best folds one implementation's runs of a workload: the highest speeds (interference
// only slows a run), the highest memory figures (the least flattering), the first run's
// losses, tokens and ids.
func best(runs []*result) result {
	var b result
	for i, r := range runs {
		if i == 0 {
			b = *r
			continue
		}
		b.TokensPerS, b.TokensPerCPUS = max(b.TokensPerS, r.TokensPerS), max(b.TokensPerCPUS, r.TokensPerCPUS)
		b.GenTokensPerS, b.GenTokensPerCPUS = max(b.GenTokensPerS, r.GenTokensPerS), max(b.GenTokensPerCPUS, r.GenTokensPerCPUS)
		b.TokMBPerS, b.TokMBPerCPUS = max(b.TokMBPerS, r.TokMBPerS), max(b.TokMBPerCPUS, r.TokMBPerCPUS)
		b.TokLoopMBPerS = max(b.TokLoopMBPerS, r.TokLoopMBPerS)
		b.PeakRSSMB, b.TensorPeakMB = max(b.PeakRSSMB, r.PeakRSSMB), max(b.TensorPeakMB, r.TensorPeakMB)
		b.BaseRSSMB = max(b.BaseRSSMB, r.BaseRSSMB)
	}
	b.StepS, b.StepCPUS = nil, nil
	return b
}

// row is one line of the table: gotrain's and Python's figure (the best of the rounds for
// speeds, the highest for memory), their ratio and the goal.
type row struct {
	What   string  `json:"what"`
	Go     float64 `json:"gotrain"`
	Python float64 `json:"python"`
	Ratio  float64 `json:"ratio"`
	// Goal is the ratio to reach: at least Goal when Higher, at most Goal otherwise; 0:
	// shown, not scored.
	Goal   float64 `json:"goal,omitempty"`
	Higher bool    `json:"higher_is_better"`
	Met    *bool   `json:"met,omitempty"`
	// Rounds are the speed ratios of each round's two neighbouring processes.
	Rounds []float64 `json:"rounds,omitempty"`
	Format string    `json:"-"`
}

func summarize(rep *report) {
	rep.Best = map[string][2]result{}
	byWorkload := map[string][2][]*result{}
	for _, w := range workloads {
		var g, p []*result
		for _, r := range rep.Runs {
			if r.Workload == w && r.Impl == "gotrain" {
				g = append(g, r)
			} else if r.Workload == w {
				p = append(p, r)
			}
		}
		if len(g) > 0 && len(p) > 0 {
			rep.Best[w] = [2]result{best(g), best(p)}
			byWorkload[w] = [2][]*result{g, p}
		}
	}
	// rounds returns gotrain ÷ Python of f in each round: two processes that ran one
	// after the other, on much the same machine.
	rounds := func(w string, f func(*result) float64) []float64 {
		var out []float64
		rs := byWorkload[w]
		for i := range min(len(rs[0]), len(rs[1])) {
			out = append(out, f(rs[0][i])/f(rs[1][i]))
		}
		return out
	}
	add := func(what string, g, p, goal float64, higher bool, format string, perRound ...float64) {
		r := row{What: what, Go: g, Python: p, Ratio: g / p, Goal: goal, Higher: higher, Format: format, Rounds: perRound}
		if goal > 0 {
			met := (higher && r.Ratio >= goal) || (!higher && r.Ratio <= goal)
			r.Met = &met
		}
		rep.Rows = append(rep.Rows, r)
	}
	rep.OK = true
	check := func(ok bool, msg string, args ...any) {
		if !ok {
			rep.OK = false
			rep.Checks = append(rep.Checks, "FAILED: "+fmt.Sprintf(msg, args...))
		} else {
			rep.Checks = append(rep.Checks, fmt.Sprintf(msg, args...))
		}
	}
	names := map[string]string{"train": "full fine-tuning", "lora": "LoRA", "lora-ckpt": "LoRA + gradient checkpointing",
		"moe": fmt.Sprintf("Mixtral (%d experts, top %d) full fine-tuning", rep.Spec.Experts, rep.Spec.TopK)}
	for _, w := range []string{"train", "lora", "lora-ckpt", "moe"} {
		b, ok := rep.Best[w]
		if !ok {
			continue
		}
		g, p := b[0], b[1]
		goal, memGoal := 1.2, 1.0
		if w == "lora-ckpt" || w == "moe" {
			goal, memGoal = 0, 0
		}
		add(names[w]+", tokens/s", g.TokensPerS, p.TokensPerS, goal, true, "%.0f",
			rounds(w, func(r *result) float64 { return r.TokensPerS })...)
		add(names[w]+", tokens per CPU-second", g.TokensPerCPUS, p.TokensPerCPUS, goal, true, "%.0f",
			rounds(w, func(r *result) float64 { return r.TokensPerCPUS })...)
		add(names[w]+", peak RSS (VmHWM), MiB", g.PeakRSSMB, p.PeakRSSMB, memGoal, false, "%.0f")
		add(names[w]+", peak RSS − start-up RSS, MiB", g.PeakRSSMB-g.BaseRSSMB, p.PeakRSSMB-p.BaseRSSMB, 0, false, "%.0f")
		if g.TensorPeakMB > 0 && p.TensorPeakMB > 0 {
			add(names[w]+", tensor memory the steps add (allocator's peak − at the first step), MiB", g.TensorPeakMB, p.TensorPeakMB, 0, false, "%.1f")
		}
		if len(g.Losses) > 0 && len(p.Losses) > 0 {
			d := math.Abs(g.Losses[0] - p.Losses[0])
			check(d <= 1e-4, "%s: first loss gotrain %.6f, Python %.6f", names[w], g.Losses[0], p.Losses[0])
		}
	}
	if b, ok := rep.Best["gen"]; ok {
		g, p := b[0], b[1]
		add(fmt.Sprintf("greedy generation with KV cache, new tokens/s (batch 1, %d-token prompt, %d new)", rep.Spec.Prompt, rep.Spec.NewTokens),
			g.GenTokensPerS, p.GenTokensPerS, 2, true, "%.0f", rounds("gen", func(r *result) float64 { return r.GenTokensPerS })...)
		add("the same, new tokens per CPU-second", g.GenTokensPerCPUS, p.GenTokensPerCPUS, 2, true, "%.0f",
			rounds("gen", func(r *result) float64 { return r.GenTokensPerCPUS })...)
		add("tokenizer encode, MB/s (one thread, fresh tokenizer, whole corpus)", g.TokMBPerS, p.TokMBPerS, 1, true, "%.2f",
			rounds("gen", func(r *result) float64 { return r.TokMBPerS })...)
		add("the same, MB per CPU-second", g.TokMBPerCPUS, p.TokMBPerCPUS, 1, true, "%.2f",
			rounds("gen", func(r *result) float64 { return r.TokMBPerCPUS })...)
		check(fmt.Sprint(g.Generated) == fmt.Sprint(p.Generated), "greedy generation: the same %d tokens on both sides", len(g.Generated))
		sha, _ := rep.Setup["sha256"].(string)
		check(g.TokSHA256 == sha && p.TokSHA256 == sha, "tokenizer: gotrain's ids of the whole corpus equal tokenizers' (%v tokens)", rep.Setup["tokens"])
	}
	if b, ok := rep.Best["lora"]; ok {
		if c, ok := rep.Best["lora-ckpt"]; ok {
			for i, side := range []string{"gotrain", "Python"} {
				rep.Checks = append(rep.Checks, fmt.Sprintf("%s gradient checkpointing: tensor memory of the steps %.1f → %.1f MiB, peak RSS %.0f → %.0f MiB, tokens/s %.0f → %.0f",
					side, b[i].TensorPeakMB, c[i].TensorPeakMB, b[i].PeakRSSMB, c[i].PeakRSSMB, b[i].TokensPerS, c[i].TokensPerS))
			}
		}
	}
}

func markdown(rep report) string {
	var b strings.Builder
	s := rep.Spec
	fmt.Fprintf(&b, "Llama %d layers × %d wide (intermediate %d), %d heads / %d KV heads, vocabulary %d (%v parameters); "+
		"batches %d × %d tokens of the corpus; AdamW (fused); LoRA r %d, alpha %g on %s; %d thread(s); torch %s; "+
		"best of %d process(es) per side and workload, in turns; load average %s at the start, %s at the end, %d CPUs; %.0f s\n\n",
		s.Layers, s.Hidden, s.Intermediate, s.Heads, s.KVHeads, s.Vocab, rep.Setup["params"], s.Batch, s.Seq, s.LoraR, s.LoraAlpha,
		strings.Join(s.LoraTargets, ","), s.Threads, rep.Torch, len(rep.Runs)/max(1, 2*len(rep.Best)), rep.LoadStart, rep.LoadEnd, rep.CPUs, rep.WallS)
	if _, ok := rep.Best["moe"]; ok {
		fmt.Fprintf(&b, "moe: MixtralForCausalLM of the same sizes with %d experts of width %d per layer, %d per token (%v parameters), the same batches\n\n",
			s.Experts, s.MoEIntermediate, s.TopK, rep.Setup["moe_params"])
	}
	fmt.Fprintf(&b, "`%s`\n\n", rep.Command)
	b.WriteString("| | gotrain | Python | gotrain ÷ Python | each round's pair | goal |\n|---|---|---|---|---|---|\n")
	for _, r := range rep.Rows {
		goal := ""
		if r.Goal > 0 {
			op, verdict := "≥", "missed"
			if !r.Higher {
				op = "≤"
			}
			if *r.Met {
				verdict = "met"
			}
			goal = fmt.Sprintf("%s %.1f×: %s", op, r.Goal, verdict)
		}
		var pairs []string
		for _, x := range r.Rounds {
			pairs = append(pairs, fmt.Sprintf("%.2f", x))
		}
		fmt.Fprintf(&b, "| %s | "+r.Format+" | "+r.Format+" | %.2f× | %s | %s |\n", r.What, r.Go, r.Python, r.Ratio, strings.Join(pairs, ", "), goal)
	}
	b.WriteString("\n")
	for _, c := range rep.Checks {
		fmt.Fprintf(&b, "- %s\n", c)
	}
	return b.String()
}
