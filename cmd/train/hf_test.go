package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/lora"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/trainer"
)

// tinyLlamaPy saves a tiny random LlamaForCausalLM (vocabulary 32) with transformers.
const tinyLlamaPy = `
import sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                  bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
LlamaForCausalLM(cfg).save_pretrained(sys.argv[1])
print("ok")
`

// tinyLlamaDir is a Hugging Face directory: a tiny Llama and a Llama-2-style
// tokenizer.json of 24 tokens.
func tinyLlamaDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny-llama")
	out := testpy.Run(t, tinyLlamaPy, []string{"torch", "transformers"}, dir)
	require.Equal(t, "ok", strings.TrimSpace(string(out)))
	addTinyTokenizer(t, dir)
	return dir
}

// addTinyTokenizer writes the Llama-2-style tokenizer.json of 24 tokens and its
// tokenizer_config.json into the model directory dir.
func addTinyTokenizer(t *testing.T, dir string) {
	t.Helper()
	tok, err := os.ReadFile(filepath.Join("..", "..", "torch", "data", "testdata", "tiny-llama-tokenizer.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), tok, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"bos_token": "<s>", "eos_token": "</s>"}`), 0o644))
}

// loraPrompt is the prompt the LoRA tests continue.
var loraPrompt = []int64{1, 18, 23}

// loraGreedy returns gotrain's greedy continuation of loraPrompt (10 tokens, EOS
// ignored) by the model directory with the adapter loaded ("" for the base alone).
func loraGreedy(t *testing.T, model, adapter string) (gen []int64) {
	t.Helper()
	torch.WithScope(func() {
		m, err := models.LoadPretrained(model, models.LoadOptions{})
		require.NoError(t, err)
		defer nn.Free(m)
		if adapter != "" {
			_, err = lora.Load(m, adapter, lora.LoadOptions{})
			require.NoError(t, err)
		}
		out, err := models.Generate(m, [][]int64{loraPrompt}, models.GenerateOptions{MaxNewTokens: 10, IgnoreEOS: true})
		require.NoError(t, err)
		gen = out[0]
	})
	return gen
}

// requirePEFTGreedy checks that PEFT, loading the adapter onto the base, continues
// loraPrompt as gotrain does.
func requirePEFTGreedy(t *testing.T, model, adapter string) {
	t.Helper()
	gen := loraGreedy(t, model, adapter)
	raw, _ := json.Marshal(loraPrompt)
	res := testpy.Run(t, peftCheckPy, []string{"torch", "transformers", "peft"}, model, adapter, string(raw))
	var want []int64
	require.NoError(t, json.Unmarshal(res, &want), "%s", res)
	assert.Equal(t, want, gen, "PEFT's greedy continuation")
}

// pairsFile is a JSONL file of prompt/completion pairs the tiny tokenizer knows.
func pairsFile(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for i := range 48 {
		if i%2 == 0 {
			b.WriteString(`{"prompt": "hello", "completion": " world"}` + "\n")
		} else {
			b.WriteString(`{"prompt": "hello world", "completion": " hello world"}` + "\n")
		}
	}
	p := filepath.Join(t.TempDir(), "pairs.jsonl")
	require.NoError(t, os.WriteFile(p, []byte(b.String()), 0o644))
	return p
}

// TestFineTuneHFDirectory: --model DIR fine-tunes a Hugging Face decoder on JSONL
// pairs, prints each epoch's validation loss, perplexity and a sample, writes the model
// in Hugging Face's layout after each epoch, and a run resumed from an epoch's last.pt
// ends bitwise equal to an uninterrupted one.
func TestFineTuneHFDirectory(t *testing.T) {
	model, pairs := tinyLlamaDir(t), pairsFile(t)
	runs := t.TempDir()
	args := []string{"--model", model, "--data", pairs, "--batch-size", "4", "--optimizer", "adamw", "--lr", "1e-2",
		"--scheduler", "none", "--deterministic", "--threads", "1", "--workers", "2", "--runs-dir", runs}
	out, err := child(append(args, "--epochs", "2", "--experiment", "ref")...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "perplexity")
	assert.Contains(t, string(out), "sample prompt (held out): ")
	assert.Contains(t, string(out), "continuation: ")
	ref := filepath.Join(runs, "ref")
	for _, f := range []string{"hf/last/config.json", "hf/last/model.safetensors", "hf/best/model.safetensors", "checkpoints/last.pt"} {
		_, err := os.Stat(filepath.Join(ref, f))
		require.NoError(t, err, f)
	}
	m, err := models.LoadPretrained(filepath.Join(ref, "hf", "last"), models.LoadOptions{})
	require.NoError(t, err, "the fine-tuned directory loads as the model it came from")
	nn.Free(m)

	resumesExactly(t, args, runs, ref)

	// hf/last after a kill between its write and the checkpoint's: here it holds the
	// two-epoch run's weights and step while last.pt is at the first epoch. A resume
	// puts hf/last back to the checkpoint's state before it trains.
	one := filepath.Join(t.TempDir(), "one.pt")
	out, err = child(append(args, "--epochs", "1", "--experiment", "again")...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	again := filepath.Join(runs, "again")
	copyFile(t, filepath.Join(again, "checkpoints", "last.pt"), one)
	for _, f := range []string{"model.safetensors", "trainer_state.json"} {
		copyFile(t, filepath.Join(ref, "hf", "last", f), filepath.Join(again, "hf", "last", f))
	}
	out, err = child("--resume", filepath.Join(again, "checkpoints", "last.pt"), "--epochs", "1").CombinedOutput()
	require.NoError(t, err, "%s", out)
	st, err := os.ReadFile(filepath.Join(again, "hf", "last", "trainer_state.json"))
	require.NoError(t, err)
	v, err := checkpoint.Read(one)
	require.NoError(t, err)
	step, err := checkpoint.Get(v, "global_step")
	require.NoError(t, err)
	assert.JSONEq(t, fmt.Sprintf(`{"global_step": %d, "epoch": 1}`, step), string(st))
	w, _, err := checkpoint.ReadSafetensors(filepath.Join(again, "hf", "last", "model.safetensors"))
	require.NoError(t, err)
	sd, err := checkpoint.GetDict(v, "model_state_dict")
	require.NoError(t, err)
	for k, x := range w.All() {
		y, ok := sd.Get(k)
		require.True(t, ok, k)
		require.True(t, bytes.Equal(y.(*checkpoint.Tensor).Bytes(), x.(*checkpoint.Tensor).Bytes()), "hf/last holds last.pt's %v", k)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, 0o644))
}

// resumesExactly runs args for one epoch as experiment "split" in runs, resumes that run
// from its last.pt to the second epoch, and requires its state bitwise equal to the
// uninterrupted two-epoch run's in ref.
func resumesExactly(t *testing.T, args []string, runs, ref string) {
	t.Helper()
	out, err := child(append(args, "--epochs", "1", "--experiment", "split")...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	last := filepath.Join(runs, "split", "checkpoints", "last.pt")
	out, err = child("--resume", last, "--epochs", "2").CombinedOutput()
	require.NoError(t, err, "%s", out)
	sameState(t, filepath.Join(ref, "checkpoints", "last.pt"), last)
}

// TestFineTuneErrors: what cannot be fine-tuned says why.
func TestFineTuneErrors(t *testing.T) {
	model := tinyLlamaDir(t)
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte(`{"prompt": "hello", "completion": " world"}`+"\n"+`{"prompt": "hello"`+"\n"), 0o644))
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"no data":          {[]string{"--model", model}, "needs --data"},
		"malformed line":   {[]string{"--model", model, "--data", bad}, "bad.jsonl:2:"},
		"block too long":   {[]string{"--model", model, "--data", bad, "--block-size", "100"}, "context of 64"},
		"unknown dtype":    {[]string{"--model", model, "--data", bad, "--dtype", "float8"}, "--dtype"},
		"negative lora r":  {[]string{"--model", model, "--data", bad, "--lora-r", "-1"}, "lora_r"},
		"lora dropout 1.5": {[]string{"--model", model, "--data", bad, "--lora-dropout", "1.5"}, "lora_dropout"},
	} {
		out, err := child(append(c.args, "--runs-dir", t.TempDir(), "--epochs", "1")...).CombinedOutput()
		require.Error(t, err, name)
		assert.Contains(t, string(out), c.want, name)
		assert.NotContains(t, string(out), "panic", name)
	}

	// An eos_token_id outside the vocabulary names config.json and the field before any
	// batch, where the embedding would fail with an index error.
	var cfg map[string]any
	raw, err := os.ReadFile(filepath.Join(model, "config.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &cfg))
	cfg["eos_token_id"] = 40
	raw, err = json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(model, "config.json"), raw, 0o644))
	out, err := child("--model", model, "--data", pairsFile(t), "--runs-dir", t.TempDir(), "--epochs", "1").CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "config.json eos_token_id is token 40, outside the model's vocabulary of 32")
}

// peftCheckPy loads a gotrain adapter with peft and prints PEFT's greedy continuation.
const peftCheckPy = `
import json, sys, torch
from transformers import AutoModelForCausalLM
from peft import PeftModel
base_dir, adapter_dir = sys.argv[1], sys.argv[2]
ids = json.loads(sys.argv[3])
m = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), adapter_dir)
m.eval()
m.generation_config.eos_token_id = None  # the whole 10 tokens, as Go's IgnoreEOS
# generate fails on a mixture of experts with output_router_logits (the load-balancing
# loss gets the cache-long mask); it only adds a loss.
m.config.output_router_logits = False
out = m.generate(torch.tensor([ids]), max_new_tokens=10, do_sample=False, pad_token_id=0)
print(json.dumps(out[0, len(ids):].tolist()))
`

// TestLoRAFineTune: --lora-r trains adapters on a frozen base (optimizer state for the
// adapters only), writes them as PEFT's files that peft loads to the same greedy
// continuation as gotrain's base + adapter, and a LoRA run resumed from an epoch's
// last.pt ends bitwise equal to an uninterrupted one.
func TestLoRAFineTune(t *testing.T) {
	model, pairs := tinyLlamaDir(t), pairsFile(t)
	runs := t.TempDir()
	args := []string{"--model", model, "--data", pairs, "--batch-size", "4", "--optimizer", "adamw", "--lr", "5e-2",
		"--scheduler", "none", "--deterministic", "--threads", "1", "--lora-r", "8", "--lora-alpha", "16",
		"--lora-targets", "all-linear", "--gradient-checkpointing", "--runs-dir", runs}
	out, err := child(append(args, "--epochs", "2", "--experiment", "ref")...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	ref := filepath.Join(runs, "ref")
	adapter := filepath.Join(ref, "hf", "last")
	for _, f := range []string{"adapter_config.json", "adapter_model.safetensors"} {
		_, err := os.Stat(filepath.Join(adapter, f))
		require.NoError(t, err, f)
	}
	_, err = os.Stat(filepath.Join(adapter, "model.safetensors"))
	assert.True(t, os.IsNotExist(err), "only the adapter is written, not the base")

	// The optimizer kept state for the adapters alone.
	v, err := checkpoint.Read(filepath.Join(ref, "checkpoints", "last.pt"))
	require.NoError(t, err)
	st, err := checkpoint.Get(v, "optimizer_state_dict")
	require.NoError(t, err)
	state, err := checkpoint.GetDict(st, "state")
	require.NoError(t, err)
	assert.Equal(t, 2*7*2, state.Len(), "A and B of 7 linear layers in each of 2 layers")

	// gotrain's base + adapter and PEFT's agree on the greedy continuation.
	requirePEFTGreedy(t, model, adapter)

	resumesExactly(t, args, runs, ref)
}

// tinyMixtralPy saves a tiny random MixtralForCausalLM (vocabulary 32, 4 experts, 2 per
// token) whose loss adds the load-balancing loss.
const tinyMixtralPy = `
import sys, torch
from transformers import MixtralConfig, MixtralForCausalLM
torch.manual_seed(0)
cfg = MixtralConfig(vocab_size=32, hidden_size=32, intermediate_size=32, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                    bos_token_id=1, eos_token_id=2, num_local_experts=4, num_experts_per_tok=2,
                    output_router_logits=True, router_aux_loss_coef=0.1)
MixtralForCausalLM(cfg).save_pretrained(sys.argv[1])
print("ok")
`

// TestLoRAFineTuneMoE: on a Mixtral, --lora-targets all-linear adapts what PEFT's
// all-linear does (the attention projections, the router and the fused experts through
// target_parameters), training with the load-balancing loss and gradient
// checkpointing; PEFT loads the adapter to gotrain's greedy continuation.
func TestLoRAFineTuneMoE(t *testing.T) {
	model := filepath.Join(t.TempDir(), "tiny-mixtral")
	out := testpy.Run(t, tinyMixtralPy, []string{"torch", "transformers"}, model)
	require.Equal(t, "ok", strings.TrimSpace(string(out)))
	addTinyTokenizer(t, model)
	runs := t.TempDir()
	out, err := child("--model", model, "--data", pairsFile(t), "--batch-size", "4", "--optimizer", "adamw", "--lr", "5e-2",
		"--scheduler", "none", "--threads", "1", "--lora-r", "4", "--lora-alpha", "8", "--lora-targets", "all-linear",
		"--gradient-checkpointing", "--runs-dir", runs, "--epochs", "1", "--experiment", "moe").CombinedOutput()
	require.NoError(t, err, "%s", out)
	adapter := filepath.Join(runs, "moe", "hf", "last")
	raw, err := os.ReadFile(filepath.Join(adapter, "adapter_config.json"))
	require.NoError(t, err)
	var cfg struct {
		TargetModules    []string       `json:"target_modules"`
		TargetParameters []string       `json:"target_parameters"`
		RankPattern      map[string]int `json:"rank_pattern"`
	}
	require.NoError(t, json.Unmarshal(raw, &cfg))
	assert.ElementsMatch(t, []string{"q_proj", "k_proj", "v_proj", "o_proj"}, cfg.TargetModules)
	assert.ElementsMatch(t, []string{"gate.weight", "gate_up_proj", "down_proj"}, cfg.TargetParameters)
	assert.Equal(t, map[string]int{`.*\.gate_up_proj`: 8}, cfg.RankPattern)

	v, err := checkpoint.Read(filepath.Join(runs, "moe", "checkpoints", "last.pt"))
	require.NoError(t, err)
	st, err := checkpoint.Get(v, "optimizer_state_dict")
	require.NoError(t, err)
	state, err := checkpoint.GetDict(st, "state")
	require.NoError(t, err)
	assert.Equal(t, 2*(4+1+2)*2, state.Len(), "A and B of 4 projections, the router and 2 expert parameters in each of 2 layers")

	requirePEFTGreedy(t, model, adapter)
}

// TestHFSaveReplacesLinks: the run's hf/ saves (the whole model, or the LoRA adapter,
// with the tokenizer's files and trainer_state.json) into a directory whose files are
// symlinks to a file elsewhere leave that file as it was and write regular files.
func TestHFSaveReplacesLinks(t *testing.T) {
	c := models.DefaultLlamaConfig()
	c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 32, 16, 24, 1
	c.NumAttentionHeads, c.NumKeyValueHeads, c.MaxPositionEmbeddings = 2, 2, 64
	torch.ManualSeed(1)
	m, err := models.NewLlamaForCausalLM(c)
	require.NoError(t, err)
	defer nn.Free(m)
	source := t.TempDir()
	addTinyTokenizer(t, source)
	outside := filepath.Join(t.TempDir(), "outside")
	require.NoError(t, os.WriteFile(outside, []byte("not to be overwritten"), 0o644))
	tr := &trainer.Trainer{GlobalStep: 7, Epoch: 2}

	for _, withAdapter := range []bool{false, true} {
		h := &hfCallback{run: hfRun{model: m}, source: source}
		names := []string{"config.json", "model.safetensors"}
		if withAdapter {
			a, err := lora.Inject(m, lora.Config{R: 2, Alpha: 4, TargetModules: lora.Modules("q_proj")})
			require.NoError(t, err)
			defer a.Unload()
			h.adapter = a
			names = []string{lora.ConfigFile, "adapter_model.safetensors"}
		}
		names = append(names, "tokenizer.json", "tokenizer_config.json", hfStateFile)
		dir := t.TempDir()
		for _, name := range names {
			require.NoError(t, os.Symlink(outside, filepath.Join(dir, name)))
		}
		require.NoError(t, h.save(dir, tr))
		kept, err := os.ReadFile(outside)
		require.NoError(t, err)
		require.Equal(t, "not to be overwritten", string(kept), "adapter %v: a link in hf/ was written through", withAdapter)
		for _, name := range names {
			fi, err := os.Lstat(filepath.Join(dir, name))
			require.NoError(t, err)
			assert.True(t, fi.Mode().IsRegular(), "adapter %v: %s", withAdapter, name)
		}
		assert.Equal(t, int64(7), hfStep(dir))
		tok, err := os.ReadFile(filepath.Join(source, "tokenizer.json"))
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
		require.NoError(t, err)
		assert.Equal(t, tok, got)
		if !withAdapter {
			b, err := models.LoadPretrained(dir, models.LoadOptions{})
			require.NoError(t, err)
			nn.Free(b)
		}
	}
}
