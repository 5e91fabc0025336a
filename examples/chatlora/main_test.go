package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/lora"
	"github.com/gotrain/gotrain/torch/nn/models"
)

// tinyChatModel writes a Hugging Face directory: a tiny random Llama (saved by
// models.SavePretrained, whose files transformers loads: the Llama parity tests), the
// Llama-2-style tokenizer of 24 tokens the data tests use, and a chat template in
// tokenizer_config.json that renders a user turn as "hello" and its text and an
// assistant turn as its text and </s>.
func tinyChatModel(t *testing.T) string {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	dir := filepath.Join(t.TempDir(), "tiny-chat")
	torch.ManualSeed(0)
	c := models.DefaultLlamaConfig()
	c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 24, 32, 64, 2
	c.NumAttentionHeads, c.NumKeyValueHeads, c.MaxPositionEmbeddings = 4, 2, 64
	// Weights far larger than a real model's 0.02, so that LoRA on the attention alone
	// moves the frozen head's logits enough to learn the replies in a few steps.
	c.InitializerRange = 0.5
	m, err := models.NewLlamaForCausalLM(c)
	require.NoError(t, err)
	defer nn.Free(m)
	require.NoError(t, models.SavePretrained(dir, m, models.SaveOptions{}))
	tok, err := os.ReadFile(filepath.Join("..", "..", "torch", "data", "testdata", "tiny-llama-tokenizer.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), tok, 0o644))
	const cfg = `{"bos_token": "<s>", "eos_token": "</s>", "chat_template": "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}{{ 'hello ' + m['content'] }}{% else %}{{ ' ' + m['content'] + eos_token }}{% endif %}{% endfor %}"}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o644))
	return dir
}

// TestChatLoRA fine-tunes the tiny model on conversations with a fixed reply for each
// user turn: the run stops at its step budget after evaluating at every EvalEvery
// steps, the validation loss falls, and the adapter is saved as PEFT's files with the
// configuration it was trained with.
func TestChatLoRA(t *testing.T) {
	model := tinyChatModel(t)
	var lines []string
	for i := range 40 {
		if i%2 == 0 {
			lines = append(lines, `{"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "world"}]}`)
		} else {
			lines = append(lines, `{"messages": [{"role": "user", "content": "world"}, {"role": "assistant", "content": "hello world"}]}`)
		}
	}
	convs := filepath.Join(t.TempDir(), "chat.jsonl")
	require.NoError(t, os.WriteFile(convs, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	out := filepath.Join(t.TempDir(), "adapter")

	tt, err := run(options{Model: model, Data: convs, Out: out, BlockSize: 32, BatchSize: 4, MaxSteps: 24, EvalEvery: 8,
		WarmupSteps: 2, LR: 5e-2, Rank: 4, Device: "cpu"})
	require.NoError(t, err)
	assert.EqualValues(t, 24, tt.GlobalStep)
	require.Len(t, tt.History, 3, "an evaluation at steps 8, 16 and 24")
	for i, rec := range tt.History {
		assert.EqualValues(t, 8*(i+1), rec.Step)
	}
	first, last := tt.History[0].ValLoss, tt.History[2].ValLoss
	assert.Less(t, last, first, "the validation loss falls")
	assert.Less(t, last, 1.0, "the fixed replies are being learned (a random model scores about 4)")

	for _, f := range []string{"adapter_config.json", "adapter_model.safetensors"} {
		_, err := os.Stat(filepath.Join(out, f))
		require.NoError(t, err, f)
	}
	cfg, err := lora.ReadConfig(out)
	require.NoError(t, err)
	assert.Equal(t, 4, cfg.R)
	assert.Equal(t, model, cfg.BaseModelNameOrPath)
}
