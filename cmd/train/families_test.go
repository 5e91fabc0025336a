package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testpy"
)

// tinyFamilyPy saves a tiny random model of the family argv[2] (vocabulary 32, as the
// tiny Llama tokenizer's) with transformers in argv[1].
const tinyFamilyPy = `
import sys, torch, transformers as T
T.logging.set_verbosity_error()
d, family = sys.argv[1], sys.argv[2]
small = dict(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, bos_token_id=1, eos_token_id=2)
torch.manual_seed(0)
if family == "qwen3":
    m = T.Qwen3ForCausalLM(T.Qwen3Config(head_dim=16, tie_word_embeddings=True, **small))
elif family == "gemma3_text":
    m = T.Gemma3ForCausalLM(T.Gemma3TextConfig(head_dim=16, query_pre_attn_scalar=16, sliding_window=4,
                                                layer_types=["sliding_attention", "full_attention"], pad_token_id=0, **small))
else:
    raise SystemExit("unknown family " + family)
m.save_pretrained(d)
print("ok")
`

// peftFamilyCheckPy loads a gotrain adapter with peft, checks that its LoRA weights are
// exactly the modules PEFT's own all-linear selects on the base, and prints PEFT's
// greedy continuation of the prompt.
const peftFamilyCheckPy = `
import json, sys, torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM
from peft import LoraConfig, PeftModel, get_peft_model
base_dir, adapter_dir = sys.argv[1], sys.argv[2]
ids = json.loads(sys.argv[3])
def modules(keys):
    return sorted({k.split(".lora_")[0].removeprefix("base_model.model.") for k in keys if ".lora_" in k})
ours = modules(safe_open(adapter_dir + "/adapter_model.safetensors", "pt").keys())
peft_all = get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir), LoraConfig(r=2, target_modules="all-linear"))
theirs = modules(k for k, _ in peft_all.named_parameters())
assert ours == theirs, ("all-linear differs from PEFT's", ours, theirs)
m = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), adapter_dir)
m.eval()
m.generation_config.eos_token_id = None  # the whole 10 tokens, as Go's IgnoreEOS
out = m.generate(torch.tensor([ids]), max_new_tokens=10, do_sample=False, pad_token_id=0)
print(json.dumps(out[0, len(ids):].tolist()))
`

// tinyFamilyDir is a Hugging Face directory of family (a model_type) with the tiny
// Llama tokenizer.
func tinyFamilyDir(t *testing.T, family string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny-"+family)
	out := testpy.Run(t, tinyFamilyPy, []string{"torch", "transformers"}, dir, family)
	require.Equal(t, "ok", strings.TrimSpace(string(out)))
	addTinyTokenizer(t, dir)
	return dir
}

// loraFamilies are the model types TestLoRAFineTuneFamilies fine-tunes.
var loraFamilies = []string{"qwen3", "gemma3_text"}

// TestLoRAFineTuneFamilies is issue 41's acceptance 3 for Qwen3 and Gemma 3 (Mixtral's
// is TestLoRAFineTuneMoE): cmd/train --lora-r with --lora-targets all-linear on each
// directory writes an adapter whose modules are those PEFT's all-linear selects, and
// that PEFT loads onto the base to gotrain's greedy continuation.
func TestLoRAFineTuneFamilies(t *testing.T) {
	pairs := pairsFile(t)
	for _, family := range loraFamilies {
		t.Run(family, func(t *testing.T) {
			model, runs := tinyFamilyDir(t, family), t.TempDir()
			out, err := child("--model", model, "--data", pairs, "--batch-size", "4", "--optimizer", "adamw", "--lr", "5e-2",
				"--scheduler", "none", "--deterministic", "--threads", "1", "--lora-r", "8", "--lora-alpha", "16",
				"--lora-targets", "all-linear", "--epochs", "1", "--runs-dir", runs, "--experiment", "lora").CombinedOutput()
			require.NoError(t, err, "%s", out)
			adapter := filepath.Join(runs, "lora", "hf", "last")
			gen := loraGreedy(t, model, adapter)
			assert.NotEqual(t, loraGreedy(t, model, ""), gen, "the adapter changes the continuation (else the check below checks little)")
			raw, _ := json.Marshal(loraPrompt)
			res := testpy.Run(t, peftFamilyCheckPy, []string{"torch", "transformers", "peft", "safetensors"}, model, adapter, string(raw))
			var want []int64
			require.NoError(t, json.Unmarshal(res, &want), "%s", res)
			assert.Equal(t, want, gen, "PEFT's greedy continuation")
		})
	}
}
