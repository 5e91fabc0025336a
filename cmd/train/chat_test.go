package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/trainer"
)

// tinyChatTemplate is a chat template the tiny Llama tokenizer can encode: a user turn
// is "hello" and its text, an assistant turn its text and </s>; a system turn is refused
// as Mistral's and Gemma's templates refuse roles they lack.
const tinyChatTemplate = `{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% elif m['role'] == 'user' %}{{ 'hello ' + m['content'] }}{% else %}{{ ' ' + m['content'] + eos_token }}{% endif %}{% endfor %}`

// tinyChatDir is tinyLlamaDir with tinyChatTemplate in chat_template.jinja.
func tinyChatDir(t *testing.T) string {
	t.Helper()
	dir := tinyLlamaDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte(tinyChatTemplate), 0o644))
	return dir
}

// writeLines writes a JSONL file of lines.
func writeLines(t *testing.T, name string, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	return p
}

// TestFineTuneChat is issue 40's item 2 on the command line, with item 9's log: --model
// DIR on {"messages"} JSONL renders each conversation with the directory's chat template
// and says what truncation did; the log shows PEFT's parameter line, no val_acc, and a
// held-out prompt apart from its continuation; the saved adapter directory carries the
// tokenizer files and the chat template; the run records --chat-date and
// --template-kwarg, and resumes bitwise.
func TestFineTuneChat(t *testing.T) {
	model := tinyChatDir(t)
	var lines []string
	for i := range 40 {
		if i%2 == 0 {
			lines = append(lines, `{"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "world"}]}`)
		} else {
			lines = append(lines, `{"messages": [{"role": "user", "content": "world"}, {"role": "assistant", "content": "hello world"}, {"role": "user", "content": "hello"}, {"role": "assistant", "content": "world world"}]}`)
		}
	}
	convs := writeLines(t, "chat.jsonl", lines...)
	runs := t.TempDir()
	args := []string{"--model", model, "--data", convs, "--batch-size", "4", "--optimizer", "adamw", "--lr", "5e-2",
		"--scheduler", "none", "--deterministic", "--threads", "1", "--lora-r", "4", "--lora-targets", "q_proj,v_proj",
		"--block-size", "8", "--chat-date", "2024-07-01", "--template-kwarg", "enable_thinking=false", "--runs-dir", runs}
	out, err := child(append(args, "--epochs", "2", "--experiment", "ref")...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	log := string(out)
	// The multi-turn conversations are 11 tokens: cut to their first exchange (6).
	assert.Contains(t, log, "chat data: 40 conversations: 20 kept whole, 20 cut to the block size of 8 tokens")
	assert.Contains(t, log, "(chat date 2024-07-01)")
	assert.Regexp(t, `trainable params: [0-9,]+ \|\| all params: [0-9,]+ \|\| trainable%: [0-9.]+\n`, log)
	assert.NotContains(t, log, "parameters: ")
	assert.NotContains(t, log, "val_acc")
	assert.NotContains(t, log, "NaN")
	assert.Regexp(t, `  sample prompt \(held out\): "<s> hello (hello|world)"\n  continuation: ".*"\n`, log)

	ref := filepath.Join(runs, "ref")
	for _, f := range []string{"adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"} {
		for _, which := range []string{"last", "best"} {
			_, err := os.Stat(filepath.Join(ref, "hf", which, f))
			assert.NoError(t, err, "hf/%s/%s", which, f)
		}
	}
	var rec Config
	ok, err := trainer.ReadRunConfig(filepath.Join(ref, "checkpoints", "last.pt"), &rec)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "2024-07-01", rec.ChatDate)
	assert.Equal(t, templateKwargs{"enable_thinking": false}, rec.TemplateKwargs)

	resumesExactly(t, args, runs, ref)
}

// TestFineTuneChatErrors: bad conversation data and a directory without a chat template
// are errors naming the file (and line), and the run directory is not created.
func TestFineTuneChatErrors(t *testing.T) {
	model := tinyChatDir(t)
	noTemplate := tinyLlamaDir(t)
	good := `{"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "world"}]}`
	for name, c := range map[string]struct {
		model, data string
		want        string
	}{
		"no template": {noTemplate, writeLines(t, "a.jsonl", good, good), "has no chat template"},
		"wrong field type": {model, writeLines(t, "b.jsonl", good, `{"messages": [{"role": "user", "content": 7}]}`),
			"b.jsonl:2: "},
		"empty conversation": {model, writeLines(t, "c.jsonl", good, good, `{"messages": []}`), "c.jsonl:3: "},
		"template refuses": {model, writeLines(t, "d.jsonl", `{"messages": [{"role": "system", "content": "hi"}, {"role": "user", "content": "hello"}, {"role": "assistant", "content": "world"}]}`),
			"d.jsonl:1: the chat template refuses the conversation: System role not supported"},
		"bad chat date": {model, writeLines(t, "e.jsonl", good, good), "chat_date"},
	} {
		runs := filepath.Join(t.TempDir(), "runs")
		args := []string{"--model", c.model, "--data", c.data, "--runs-dir", runs, "--epochs", "1"}
		if name == "bad chat date" {
			args = append(args, "--chat-date", "July")
		}
		out, err := child(args...).CombinedOutput()
		require.Error(t, err, name)
		assert.Contains(t, string(out), c.want, name)
		assert.NotContains(t, string(out), "panic", name)
		_, err = os.Stat(runs)
		assert.True(t, os.IsNotExist(err), "%s: nothing is written", name)
	}
}
