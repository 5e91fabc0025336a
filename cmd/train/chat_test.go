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

	// --packing packs whole conversations into windows of the block: at 16 tokens each
	// multi-turn conversation (10 tokens) opens a window, into which a single-turn one
	// (6 tokens) fits exactly (best-fit decreasing): 20 full windows.
	out, err = child(append(args, "--packing", "--block-size", "16", "--epochs", "1", "--max-steps", "2", "--experiment", "packed")...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "chat data: 40 conversations: 40 kept whole, 0 cut to the block size of 16 tokens (trailing turns dropped), 0 dropped (first assistant turn longer than the block); packed into 20 windows, 100.0% filled")
	ok, err = trainer.ReadRunConfig(filepath.Join(runs, "packed", "checkpoints", "last.pt"), &rec)
	require.NoError(t, err)
	require.True(t, ok)
	assert.True(t, rec.Packing)
}

// withTemplate returns a copy of the model directory base (its files) with name, a chat
// template file, written as content.
func withTemplate(t *testing.T, base, name, content string) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(base)
	require.NoError(t, err)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(base, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	return dir
}

// TestFineTuneChatErrors: bad conversation data, a directory without a chat template and
// a template with syntax tokenizer/chat does not support (in chat_template.jinja or in
// tokenizer_config.json) are errors naming the file and line (the template's
// line:col), and the run directory is not created (issue 40 acceptance 5).
func TestFineTuneChatErrors(t *testing.T) {
	model := tinyChatDir(t)
	noTemplate := tinyLlamaDir(t)
	unsupportedJinja := withTemplate(t, noTemplate, "chat_template.jinja", "{{ bos_token }}\n{% for m in messages %}{{ m['content'] | frobnicate }}{% endfor %}")
	unsupportedConfig := withTemplate(t, noTemplate, "tokenizer_config.json",
		`{"bos_token": "<s>", "eos_token": "</s>", "chat_template": "{% for m in messages %}\n  {% include 'turn.jinja' %}{% endfor %}"}`)
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
		"unsupported syntax in chat_template.jinja": {unsupportedJinja, writeLines(t, "f.jsonl", good, good),
			"chat_template.jinja: chat template 2:42: unsupported filter 'frobnicate'"},
		"unsupported syntax in tokenizer_config.json": {unsupportedConfig, writeLines(t, "g.jsonl", good, good),
			"tokenizer_config.json: chat template 2:6: unsupported statement '{% include %}'"},
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
