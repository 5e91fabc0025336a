// Command gpt benchmarks a small byte-level GPT-2 on the CPU: training steps as tokens/s
// and greedy generation with the KV cache as new tokens/s, for gotrain and for the same
// model in Python (transformers' GPT2LMHeadModel, bench/gpt/bench.py) on the same
// libtorch, the same weights (written as a Hugging Face directory and loaded with
// from_pretrained), the same batches and the same thread count, and for the C++ twin
// bench/cpp/gpt.cpp when it is built. Run it from the module root:
//
//	g++ -std=c++20 -O2 $CGO_CXXFLAGS bench/cpp/gpt.cpp -o build/bench/gpt $CGO_LDFLAGS -ltorch -ltorch_cpu -lc10
//	go run -tags cpu ./bench/gpt [-threads 2] [-steps 20] [-new 128]
//
// It prints a markdown table and one JSON line with the numbers.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/gotrain/gotrain/bench/internal/lmbench"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
)

// result is one side's numbers; bench.py prints the same fields.
type result struct {
	TrainTokensPerS float64 `json:"train_tokens_per_s"`
	GenTokensPerS   float64 `json:"gen_tokens_per_s"`
	FirstLoss       float64 `json:"first_loss"`
	Generated       []int64 `json:"generated"`
}

func config(seq int) models.GPT2Config {
	c := models.DefaultGPT2Config()
	c.VocabSize, c.NPositions, c.NEmbd, c.NLayer, c.NHead = 256, int64(seq)*2, 128, 4, 4
	c.ResidPdrop, c.EmbdPdrop, c.AttnPdrop = 0, 0, 0
	c.BOSTokenID, c.EOSTokenID = nil, nil
	return c
}

func main() {
	s := lmbench.Run{Batch: 16, Seq: 128, Warmup: 3, Steps: 20, NewTokens: 128, Threads: 2}
	s.Flags(flag.CommandLine)
	python := flag.String("python", ".venv/bin/python", "Python with torch and transformers")
	cpp := flag.String("cpp", "build/bench/gpt", "the C++ twin compiled from bench/cpp/gpt.cpp (skipped when absent)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("bench/gpt: ")
	runtime.LockOSThread()
	torch.SetNumThreads(s.Threads)

	dir, err := os.MkdirTemp("", "gotrain-gpt-bench")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	torch.ManualSeed(0)
	m, err := models.NewGPT2LMHeadModel(config(s.Seq))
	if err != nil {
		log.Fatal(err)
	}
	if err := m.SavePretrained(filepath.Join(dir, "model")); err != nil {
		log.Fatal(err)
	}
	goRes := runGo(m, s)

	args := []string{fmt.Sprint(s.Batch), fmt.Sprint(s.Seq), fmt.Sprint(s.Steps), fmt.Sprint(s.Warmup),
		fmt.Sprint(s.NewTokens), fmt.Sprint(s.Threads)}
	pyRes := runTwin(*python, append([]string{"bench/gpt/bench.py", filepath.Join(dir, "model")}, args...)...)
	var cppRes *result
	if _, err := os.Stat(*cpp); err == nil {
		r := runTwin(*cpp, args...)
		cppRes = &r
	}
	same := fmt.Sprint(goRes.Generated) == fmt.Sprint(pyRes.Generated)
	c := config(s.Seq)
	fmt.Printf("GPT-2 %d layers × %d wide, %d heads, vocab %d; batch %d × %d tokens; AdamW (fused); %d threads; %s\n\n",
		c.NLayer, c.NEmbd, c.NHead, c.VocabSize, s.Batch, s.Seq, s.Threads, torch.Version())
	fmt.Println("| | gotrain | Python (transformers) | ratio |")
	fmt.Println("|---|---|---|---|")
	fmt.Printf("| training, tokens/s | %.0f | %.0f | %.2f× |\n", goRes.TrainTokensPerS, pyRes.TrainTokensPerS, goRes.TrainTokensPerS/pyRes.TrainTokensPerS)
	fmt.Printf("| greedy generation with KV cache, new tokens/s (batch 1, %d new) | %.0f | %.0f | %.2f× |\n", s.NewTokens, goRes.GenTokensPerS, pyRes.GenTokensPerS, goRes.GenTokensPerS/pyRes.GenTokensPerS)
	if cppRes != nil {
		fmt.Printf("| C++ twin (gpt.cpp): training %.0f tokens/s, generation %.0f tokens/s | gotrain / C++: %.2f×, %.2f× | | |\n",
			cppRes.TrainTokensPerS, cppRes.GenTokensPerS, goRes.TrainTokensPerS/cppRes.TrainTokensPerS, goRes.GenTokensPerS/cppRes.GenTokensPerS)
	}
	fmt.Printf("\nfirst loss: gotrain %.6f, Python %.6f; same generated tokens: %v\n", goRes.FirstLoss, pyRes.FirstLoss, same)
	js, _ := json.Marshal(map[string]any{"go": goRes, "python": pyRes, "cpp": cppRes, "same_tokens": same})
	fmt.Println(string(js))
}

// batchIDs draws the training batches as bench.py does: torch.manual_seed(1), then one
// randint per step.
func batchIDs(s lmbench.Run, vocab int64) []*torch.Tensor {
	torch.ManualSeed(1)
	out := make([]*torch.Tensor, s.Warmup+s.Steps)
	for i := range out {
		out[i] = torch.Randint(0, vocab, []int64{int64(s.Batch), int64(s.Seq)}, torch.Int64, torch.CPU).Escape()
	}
	return out
}

func runGo(m *models.GPT2LMHeadModel, s lmbench.Run) result {
	var r result
	prompt := make([]int64, 16)
	for i := range prompt {
		prompt[i] = int64(i*7) % m.Config.VocabSize
	}
	// Generation first, on the weights bench.py loads.
	nn.SetTraining(m, false)
	if _, err := models.Generate(m, [][]int64{prompt}, models.GenerateOptions{MaxNewTokens: 4, IgnoreEOS: true}); err != nil { // warm-up
		log.Fatal(err)
	}
	start := time.Now()
	gens, err := models.Generate(m, [][]int64{prompt}, models.GenerateOptions{MaxNewTokens: s.NewTokens, IgnoreEOS: true})
	if err != nil {
		log.Fatal(err)
	}
	gen := gens[0]
	r.GenTokensPerS = float64(len(gen)) / time.Since(start).Seconds()
	r.Generated = gen

	nn.SetTraining(m, true)
	batches := batchIDs(s, m.Config.VocabSize)
	opt, err := optim.NewAdamW(nn.Parameters(m), optim.AdamOptions{LR: 1e-3, WeightDecay: 1e-2, Fused: true})
	if err != nil {
		log.Fatal(err)
	}
	for i, ids := range batches {
		if i == s.Warmup {
			start = time.Now()
		}
		torch.WithScope(func() {
			opt.ZeroGrad(true)
			loss := m.Loss(ids)
			loss.Backward()
			if err := opt.Step(); err != nil {
				log.Fatal(err)
			}
			l := loss.Item()
			if i == 0 {
				r.FirstLoss = l
			}
		})
	}
	r.TrainTokensPerS = float64(s.Steps*s.Batch*s.Seq) / time.Since(start).Seconds()
	return r
}

// runTwin runs the Python or C++ side and decodes the JSON result it prints.
func runTwin(prog string, args ...string) result {
	cmd := exec.Command(prog, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		log.Fatalf("%s: %v", prog, err)
	}
	var r result
	if err := json.Unmarshal(out, &r); err != nil {
		log.Fatalf("%s output: %v", prog, err)
	}
	return r
}
