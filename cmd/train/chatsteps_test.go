package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/trainer"
)

// TestChatLoRAStepBudget is issue 40's acceptance 3: a LoRA run on {"messages"} data
// budgeted in steps (--max-steps, --eval-every, --save-every, --warmup-ratio) evaluates
// at the steps it names, writes the PEFT adapter at a save point before any evaluation,
// resumes bitwise after a SIGINT in the middle of an epoch, and cmd/generate --chat with
// the trained adapter answers the reply the conversations taught it.
func TestChatLoRAStepBudget(t *testing.T) {
	model := tinyChatDir(t)
	var lines []string
	for range 48 {
		lines = append(lines, `{"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "world"}]}`)
	}
	convs := writeLines(t, "chat.jsonl", lines...)
	runs := t.TempDir()
	// 48 conversations less the validation split are 11 batches of 4 an epoch: the
	// budget of 30 steps ends in the third epoch.
	args := []string{"--model", model, "--data", convs, "--batch-size", "4", "--optimizer", "adamw", "--lr", "5e-2",
		"--scheduler", "linear", "--warmup-ratio", "0.1", "--max-steps", "30", "--eval-every", "20", "--save-every", "5",
		"--deterministic", "--threads", "1", "--log-every", "1", "--lora-r", "4", "--lora-targets", "q_proj,v_proj",
		"--block-size", "8", "--chat-date", "2024-07-01", "--runs-dir", runs}
	out, err := child(append(args, "--experiment", "ref")...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	log := string(out)
	assert.Contains(t, log, "step 20 | train_loss: ")
	assert.Contains(t, log, "step 30 | train_loss: ")
	assert.NotContains(t, log, "step 10 | ", "evaluations every 20 steps and at the budget's end only")
	ref := filepath.Join(runs, "ref")
	hist, err := os.ReadFile(filepath.Join(ref, "history.jsonl"))
	require.NoError(t, err)
	assert.Equal(t, 2, strings.Count(string(hist), "\n"), "one history line per evaluation")

	// Interrupted in the first epoch, before the first evaluation (step 20): the adapter
	// there is the save point's (every 5 steps), and the run resumes to the same state.
	cut := interruptAt(t, child(append(args, "--experiment", "cut")...), "epoch 1 batch 8/")
	assert.Contains(t, cut, "--resume")
	last := filepath.Join(runs, "cut", "checkpoints", "last.pt")
	v, err := checkpoint.Read(last)
	require.NoError(t, err)
	b, err := checkpoint.GetInt(v, "batch_in_epoch")
	require.NoError(t, err)
	require.Positive(t, b, "stopped mid-epoch")
	for _, f := range []string{"adapter_config.json", "adapter_model.safetensors", "chat_template.jinja"} {
		_, err := os.Stat(filepath.Join(runs, "cut", "hf", "last", f))
		assert.NoError(t, err, "hf/last/%s from a save point", f)
	}
	out, err = child("--resume", last).CombinedOutput()
	require.NoError(t, err, "%s", out)
	sameState(t, filepath.Join(ref, "checkpoints", "last.pt"), last)

	// The trained adapter answers "world" to "hello" through cmd/generate --chat.
	bin := filepath.Join(t.TempDir(), "generate")
	build := exec.Command("go", "build", "-tags", "cpu", "-o", bin, "github.com/gotrain/gotrain/cmd/generate")
	build.Env = os.Environ()
	bout, err := build.CombinedOutput()
	require.NoError(t, err, "%s", bout)
	gen := exec.Command(bin, "--model", model, "--adapter", filepath.Join(ref, "hf", "last"), "--chat", "--prompt", "hello",
		"--max-new-tokens", "4", "--json")
	gout, err := gen.Output()
	require.NoError(t, err, "%s", gout)
	var reply struct {
		Text string `json:"text"`
	}
	require.NoError(t, json.Unmarshal(gout, &reply), "%s", gout)
	assert.Equal(t, "world", strings.TrimSpace(reply.Text))
}

// TestPackingFlag: --packing on a model directory's text keeps the packed documents
// apart (position_ids restart at each document, data.LMOptions.SeparateDocuments), which
// changes what the model learns from the same windows, and the run records it.
func TestPackingFlag(t *testing.T) {
	model := tinyLlamaDir(t)
	var docs []string
	for i := range 60 {
		docs = append(docs, strings.Repeat([]string{"hello ", "world ", "hello world "}[i%3], 1+i%3))
	}
	text := writeLines(t, "docs.txt", docs...)
	runs := t.TempDir()
	args := []string{"--model", model, "--data", text, "--batch-size", "2", "--block-size", "8", "--epochs", "1",
		"--scheduler", "none", "--deterministic", "--threads", "1", "--runs-dir", runs}
	loss := func(name string, extra ...string) float64 {
		out, err := child(append(append(args, "--experiment", name), extra...)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		v, err := checkpoint.Read(filepath.Join(runs, name, "checkpoints", "last.pt"))
		require.NoError(t, err)
		l, err := checkpoint.Get(v, "history", 0, "train_loss")
		require.NoError(t, err)
		return l.(float64)
	}
	packed, plain := loss("packed", "--packing"), loss("plain")
	assert.NotEqual(t, plain, packed, "attention and positions within documents change the loss")
	var rec Config
	ok, err := trainer.ReadRunConfig(filepath.Join(runs, "packed", "checkpoints", "last.pt"), &rec)
	require.NoError(t, err)
	require.True(t, ok)
	assert.True(t, rec.Packing)
}
