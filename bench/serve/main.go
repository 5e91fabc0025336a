// Command serve benchmarks serving: the same workload of concurrent streaming
// completions against gotrain's server (package serve, in this process) and, when the
// virtualenv has transformers' serving extras (fastapi, uvicorn), against
// `transformers serve --continuous-batching` on the same model directory. Run it from
// the module root:
//
//	go run -tags cpu ./bench/serve [-model DIR] [-clients 16] [-requests 64] [-max-tokens 48]
//
// Without -model it builds a small random Llama directory with the virtualenv's
// transformers. Each request streams a greedy completion of a prompt of mixed length;
// the figures are requests/s, generated tokens/s (a streamed chunk counted as a token)
// and the median and 90th-percentile time to first token. Timings vary with the
// machine: compare the two servers of one run, not runs.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gotrain/gotrain/serve"
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
tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=1000, special_tokens=["<|endoftext|>"],
                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(d)
torch.manual_seed(0)
LlamaForCausalLM(LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=256, intermediate_size=688,
    num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512,
    eos_token_id=tok.token_to_id("<|endoftext|>"))).save_pretrained(d)
`

type result struct {
	tokens int
	ttft   time.Duration
	err    error
}

func main() {
	model := flag.String("model", "", "Hugging Face model `DIR` (default: a small random Llama)")
	python := flag.String("python", ".venv/bin/python", "the virtualenv's `PYTHON`")
	clients := flag.Int("clients", 16, "concurrent clients")
	requests := flag.Int("requests", 64, "requests in all")
	maxTokens := flag.Int("max-tokens", 48, "max_tokens of each request")
	flag.Parse()
	dir := *model
	if dir == "" {
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
	}
	e, err := serve.NewEngine(serve.Config{Model: dir, Name: "m", MaxBatch: *clients})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go http.Serve(ln, serve.NewHandler(e, serve.HandlerOptions{}))
	fmt.Printf("| server | requests/s | tokens/s | TTFT p50 | TTFT p90 |\n|---|---|---|---|---|\n")
	report("gotrain serve", "http://"+ln.Addr().String(), "m", *clients, *requests, *maxTokens)
	if exec.Command(*python, "-c", "import fastapi, uvicorn").Run() != nil {
		fmt.Println("\ntransformers serve: skipped (pip install 'transformers[serving]' into the virtualenv to compare)")
		return
	}
	stop, url, err := startTransformers(*python, dir)
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	report("transformers serve --continuous-batching", url, dir, *clients, *requests, *maxTokens)
}

// startTransformers runs transformers serve on dir and waits until it answers.
func startTransformers(python, dir string) (stop func(), url string, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(filepath.Join(filepath.Dir(python), "transformers"), "serve", "--continuous-batching",
		"--device", "cpu", "--host", "127.0.0.1", "--port", fmt.Sprint(port), dir)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	url = fmt.Sprintf("http://127.0.0.1:%d", port)
	for range 600 {
		if resp, err := http.Get(url + "/health"); err == nil {
			resp.Body.Close()
			return func() { cmd.Process.Kill(); cmd.Wait() }, url, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	cmd.Process.Kill()
	return nil, "", fmt.Errorf("transformers serve did not start")
}

// report runs the workload against url and prints its row.
func report(name, url, model string, clients, requests, maxTokens int) {
	words := strings.Fields(strings.Repeat("The quick brown fox jumps over the lazy dog. Once upon a time there was a model. ", 8))
	jobs := make(chan int)
	results := make([]result, requests)
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				prompt := strings.Join(words[:4+(i*7)%60], " ")
				results[i] = stream(url, model, prompt, maxTokens)
			}
		}()
	}
	for i := range requests {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	wall := time.Since(start)
	var tokens int
	var ttfts []time.Duration
	for _, r := range results {
		if r.err != nil {
			log.Fatalf("%s: %v", name, r.err)
		}
		tokens += r.tokens
		ttfts = append(ttfts, r.ttft)
	}
	slices.Sort(ttfts)
	fmt.Printf("| %s | %.1f | %.0f | %v | %v |\n", name, float64(requests)/wall.Seconds(), float64(tokens)/wall.Seconds(),
		ttfts[len(ttfts)/2].Round(time.Millisecond), ttfts[len(ttfts)*9/10].Round(time.Millisecond))
}

// stream sends one streaming completion and counts its chunks.
func stream(url, model, prompt string, maxTokens int) result {
	body, _ := json.Marshal(map[string]any{"model": model, "prompt": prompt, "max_tokens": maxTokens, "temperature": 0, "stream": true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/completions", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return result{err: fmt.Errorf("status %s", resp.Status)}
	}
	var r result
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct{ Text string } `json:"choices"`
		}
		if json.Unmarshal([]byte(data), &chunk) == nil && len(chunk.Choices) > 0 && chunk.Choices[0].Text != "" {
			if r.tokens == 0 {
				r.ttft = time.Since(start)
			}
			r.tokens++
		}
	}
	r.err = sc.Err()
	return r
}
