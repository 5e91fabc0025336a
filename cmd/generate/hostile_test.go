package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/tokenizer"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/lora"
	"github.com/gotrain/gotrain/torch/nn/models"
)

// editTokenizer changes the fields of dir's tokenizer.json.
func editTokenizer(t *testing.T, dir string, edit func(m map[string]any)) {
	t.Helper()
	path := filepath.Join(dir, "tokenizer.json")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	edit(m)
	writeJSON(t, path, m)
}

func replaceNormalizer(pattern, content string) map[string]any {
	return map[string]any{"type": "Replace", "pattern": map[string]any{"String": pattern}, "content": content}
}

// measuredRun runs the command in-process and returns, with its exit status and
// stderr, the bytes of Go memory it allocated (runtime.MemStats.TotalAlloc) and the CPU
// tensors it allocated (the counting allocator's count). A run that has not returned
// after two minutes is a reader that blocked: the test fails rather than hang.
func measuredRun(t *testing.T, args ...string) (code int, stderr string, goBytes uint64, tensors int64) {
	t.Helper()
	torch.CountCPUMemory()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	n0 := torch.CPUMemoryStats().Allocations
	done := make(chan struct{})
	go func() {
		defer close(done)
		code, _, stderr = runCmd(args...)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("generate %q has not returned after two minutes: a reader blocked", args)
	}
	runtime.ReadMemStats(&after)
	return code, stderr, after.TotalAlloc - before.TotalAlloc, torch.CPUMemoryStats().Allocations - n0
}

// TestScaledInputs is issue 42's acceptance 2 for cmd/generate: the growing-normalizer
// tokenizer (three chained Replace of "a" by a thousand "a": 10 GB for a 10-byte
// prompt), one such Replace on a 1 MB prompt file, a prompt file of 2 MB (past the
// 128 KiB a single argument may be) and 500 added tokens "a…ab" on a 256 KB prompt file
// of "a" (the review's 130 KB prompt ran 16.7 s) each end with an error that says why,
// never a fatal error, within a bound on the Go memory allocated over a run of the same
// directory on a short prompt: 40 bytes a byte of the prompt (the list of pieces of a
// ByteLevel line alone took 52 to 58), 128 for the line of "a", one BPE word in which
// every pair merges (about 90 here: the heap of queued merges refills at each merge).
// The budget errors come before the model loads: no tensor is allocated.
func TestScaledInputs(t *testing.T) {
	dir, _, _ := gpt2Dir(t)
	k := strings.Repeat("a", 1000)
	chained := copyDir(t, dir)
	editTokenizer(t, chained, func(m map[string]any) {
		m["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{
			replaceNormalizer("a", k), replaceNormalizer("a", k), replaceNormalizer("a", k)}}
	})
	one := copyDir(t, dir)
	editTokenizer(t, one, func(m map[string]any) { m["normalizer"] = replaceNormalizer("a", k) })
	added := copyDir(t, dir)
	editTokenizer(t, added, func(m map[string]any) {
		list := m["added_tokens"].([]any)
		for i := range 500 {
			list = append(list, map[string]any{"id": 10000 + i, "content": strings.Repeat("a", i) + "b",
				"special": false, "normalized": false, "single_word": false, "lstrip": false, "rstrip": false})
		}
		m["added_tokens"] = list
	})
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 2<<20/45)

	// What a run on a short prompt allocates, for each directory: the tokenizer, the
	// model and four new tokens.
	short := map[string]uint64{}
	for _, d := range []string{chained, one, dir, added} {
		code, stderr, goBytes, _ := measuredRun(t, "--model", d, "--prompt", "The dog", "--max-new-tokens", "4", "--greedy")
		require.Equal(t, 0, code, stderr)
		short[d] = goBytes
	}
	for _, c := range []struct {
		name     string
		model    string
		prompt   string
		file     bool // the prompt as --prompt-file
		want     []string
		perByte  int
		noTensor bool
	}{
		{"three chained growing Replace", chained, "aaaaaaaaaa", false,
			[]string{"encoding the prompt", `would make 10000 bytes of a text of 10 bytes, over the limit of 4416`}, 40, true},
		{"a growing Replace on a 1 MB prompt file", one, strings.Repeat("a", 1<<20), true,
			[]string{"encoding the prompt", "over the limit of"}, 40, true},
		{"a 2 MB prompt file", dir, text, true,
			[]string{"the prompt is ", "context of 64 positions"}, 40, false},
		{"500 added tokens on a 256 KB prompt file", added, strings.Repeat("a", 256<<10), true,
			[]string{"the prompt is ", "context of 64 positions"}, 128, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"--model", c.model, "--max-new-tokens", "4", "--greedy"}
			if c.file {
				args = append(args, "--prompt-file", writeTemp(t, c.prompt))
			} else {
				args = append(args, "--prompt", c.prompt)
			}
			code, stderr, goBytes, tensors := measuredRun(t, args...)
			t.Logf("%d bytes of prompt: %d bytes allocated, %.1f a byte over a short prompt's %d, %d tensors", len(c.prompt), goBytes,
				(float64(goBytes)-float64(short[c.model]))/float64(len(c.prompt)), short[c.model], tensors)
			assert.Equal(t, 1, code, stderr)
			for _, m := range c.want {
				assert.Contains(t, stderr, m)
			}
			assert.NotContains(t, stderr, "goroutine", "no panic")
			assert.Less(t, goBytes, short[c.model]+uint64(c.perByte*len(c.prompt)), "Go memory allocated")
			if c.noTensor {
				assert.Zero(t, tensors, "refused before the model loads")
			}
		})
	}
}

// TestHostileModelFiles: a file of the model directory (or the adapter's) that is a
// named pipe, or a link out of the directory, is refused naming it, before anything
// blocks or is read (the readers opened a FIFO and waited forever; a link to a file
// outside was read), and before the model loads: no tensor is allocated, and the Go
// memory allocated stays under 8 MB (a link to /dev/zero read whole would not end).
func TestHostileModelFiles(t *testing.T) {
	dir, _, _ := gpt2Dir(t)
	adapter := tinyAdapter(t, filepath.Join(filepath.Dir(dir), "llama"), 8)
	secret := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(secret, []byte("root:x:0:0:root:/root:/bin/bash\n"), 0o600))
	for _, c := range []struct {
		name, file, link string // link "": a FIFO
		args             []string
		want             []string
	}{
		{"tokenizer.json a FIFO", "tokenizer.json", "", nil, []string{"tokenizer.json", "named pipe (FIFO)"}},
		{"tokenizer_config.json a FIFO", "tokenizer_config.json", "", nil, []string{"tokenizer_config.json", "named pipe (FIFO)"}},
		{"generation_config.json a FIFO", "generation_config.json", "", nil, []string{"generation_config.json", "named pipe (FIFO)"}},
		{"config.json a FIFO", "config.json", "", nil, []string{"config.json", "named pipe (FIFO)"}},
		{"adapter_config.json a FIFO", "adapter/adapter_config.json", "", nil, []string{"--adapter", "adapter_config.json", "named pipe (FIFO)"}},
		{"chat template a FIFO", "chat_template.jinja", "", []string{"--chat"}, []string{"chat_template.jinja", "named pipe (FIFO)"}},
		{"tokenizer.json a link outside", "tokenizer.json", secret, nil, []string{"tokenizer.json leads to " + secret, "outside"}},
		{"tokenizer_config.json a link outside", "tokenizer_config.json", secret, nil, []string{"tokenizer_config.json leads to " + secret}},
		{"generation_config.json a link outside", "generation_config.json", secret, nil, []string{"generation_config.json leads to " + secret}},
		{"config.json a link to /dev/zero", "config.json", "/dev/zero", nil, []string{"config.json leads to /dev/zero"}},
		{"adapter_config.json a link outside", "adapter/adapter_config.json", secret, nil, []string{"adapter_config.json leads to " + secret}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := copyDir(t, dir)
			a := filepath.Join(d, "adapter")
			require.NoError(t, os.MkdirAll(a, 0o755))
			for _, f := range []string{"adapter_config.json", "adapter_model.safetensors"} {
				b, err := os.ReadFile(filepath.Join(adapter, f))
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join(a, f), b, 0o644))
			}
			p := filepath.Join(d, c.file)
			_ = os.Remove(p)
			if c.link == "" {
				require.NoError(t, syscall.Mkfifo(p, 0o644))
			} else {
				require.NoError(t, os.Symlink(c.link, p))
			}
			args := append([]string{"--model", d, "--prompt", "hello", "--max-new-tokens", "2"}, c.args...)
			if strings.HasPrefix(c.file, "adapter/") {
				args = append(args, "--adapter", a)
			}
			code, stderr, goBytes, tensors := measuredRun(t, args...)
			assert.Equal(t, 1, code, stderr)
			for _, m := range c.want {
				assert.Contains(t, stderr, m)
			}
			assert.NotContains(t, stderr, "root:x", "no contents in the message")
			assert.Zero(t, tensors, "refused before the model loads")
			assert.Less(t, goBytes, uint64(8<<20), "Go memory allocated")
		})
	}
}

// TestWeightsNotSafetensors: a model.safetensors that is text (a copy of /etc/passwd)
// is refused as not a safetensors file naming it, and its first 8 bytes are not printed
// as the "header length" (3475222254926655346 is "root:x:0").
func TestWeightsNotSafetensors(t *testing.T) {
	dir, _, _ := gpt2Dir(t)
	d := copyDir(t, dir)
	require.NoError(t, os.WriteFile(filepath.Join(d, "model.safetensors"), []byte("root:x:0:0:root:/root:/bin/bash\n"), 0o644))
	code, _, stderr := runCmd("--model", d, "--prompt", "hello", "--max-new-tokens", "2")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, filepath.Join(d, "model.safetensors"))
	assert.Contains(t, stderr, "not a safetensors file")
	assert.NotContains(t, stderr, "3475222254926655346")
	assert.NotContains(t, stderr, "root:x")
}

// TestLongPromptFile: a prompt file of nearly the whole context (a Llama of 1024
// positions and a 32000-token vocabulary, where the logits of every prompt position
// would be 128 MB) is continued holding at most the weights plus a quarter of those
// logits in CPU tensors (the counting allocator's peak): the prompt's forward computes
// the last position's logits only. (The review's 8181-token prompt, vocabulary 49152,
// asked for 1.6 GB of logits and failed.)
func TestLongPromptFile(t *testing.T) {
	dir, _, _ := gpt2Dir(t)
	model := t.TempDir()
	c := models.DefaultLlamaConfig()
	c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 32000, 16, 32, 1
	c.NumAttentionHeads, c.NumKeyValueHeads, c.MaxPositionEmbeddings = 2, 2, 1024
	c.BOSTokenID, c.EOSTokenID = nil, nil
	var weights int64
	torch.WithScope(func() {
		torch.ManualSeed(3)
		m, err := models.NewLlamaForCausalLM(c)
		require.NoError(t, err)
		defer nn.Free(m)
		for _, e := range nn.StateTensors(m) {
			weights += e.Tensor.Numel() * int64(e.Tensor.DType().Size())
		}
		require.NoError(t, models.SavePretrained(model, m, models.SaveOptions{}))
	})
	b, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(model, "tokenizer.json"), b, 0o644))
	tok, err := tokenizer.LoadDir(model)
	require.NoError(t, err)
	unit := "The quick brown fox jumps over the lazy dog. "
	text := strings.Repeat(unit, 1000/len(tok.Encode(unit, false)))
	for len(tok.Encode(text, true)) > 1020 {
		text = text[:len(text)-len(unit)]
	}
	n := len(tok.Encode(text, true))
	require.Greater(t, n, 900)

	const fullLogits = 1000 * 32000 * 4
	torch.CountCPUMemory()
	torch.ResetCPUPeakMemory()
	base := torch.CPUMemoryStats().Allocated
	code, stdout, stderr := runCmd("--model", model, "--prompt-file", writeTemp(t, text), "--max-new-tokens", "2", "--greedy", "--json")
	peak := torch.CPUMemoryStats().PeakAllocated - base
	t.Logf("a %d-token prompt: peak %d bytes of CPU tensors, weights %d (all the prompt's logits: %d)", n, peak, weights, fullLogits)
	require.Equal(t, 0, code, stderr)
	var o output
	require.NoError(t, json.Unmarshal([]byte(stdout), &o))
	assert.Len(t, o.PromptIDs, n)
	assert.Len(t, o.NewIDs, 2)
	assert.Less(t, peak, weights+fullLogits/4)
}

// tinyAdapter saves a new LoRA adapter (B zero, as PEFT's default) on the q_proj and
// v_proj of the Llama directory model, with lora_alpha alpha, and returns its directory.
func tinyAdapter(t *testing.T, model string, alpha float64) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "adapter")
	torch.WithScope(func() {
		m, err := models.LoadPretrained(model, models.LoadOptions{})
		require.NoError(t, err)
		defer nn.Free(m)
		a, err := lora.Inject(m, lora.Config{R: 2, Alpha: alpha, TargetModules: lora.Modules("q_proj", "v_proj")})
		require.NoError(t, err)
		require.NoError(t, a.Save(out))
	})
	return out
}

// TestNonFiniteAdapter: an adapter whose lora_alpha is 1e308 (finite, so PEFT's config
// takes it; float32's infinity once it scales the update) makes NaN logits: an error
// naming them, where it generated all-zero ids with exit status 0.
func TestNonFiniteAdapter(t *testing.T) {
	root, _ := hfAnswers(t)
	model := filepath.Join(root, "llama")
	adapter := tinyAdapter(t, model, 1e308)
	for _, args := range [][]string{{"--greedy"}, {"--temperature", "0.8", "--seed", "1"}} {
		code, _, stderr := runCmd(append([]string{"--model", model, "--adapter", adapter, "--prompt", greedyPrompts[0],
			"--max-new-tokens", "4"}, args...)...)
		assert.Equal(t, 1, code, "%v: %s", args, stderr)
		assert.Contains(t, stderr, "logits are NaN at new token 1", args)
	}
}
