package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/chatcli"
	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/tokenizer"
)

// fixturePy saves two small tokenizer directories with chat templates as transformers'
// save_pretrained writes them, and answers each case as transformers does: the rendered
// text, apply_chat_template(..., tokenize=True)'s ids and, for the template with
// {% generation %} blocks, return_assistant_tokens_mask's mask.
//
//   - chatml: byte-level BPE with Qwen2's split and NFC, ChatML's tokens, a template
//     with generation blocks, tools and the tool role;
//   - llama: SentencePiece-style BPE (Prepend and Replace, a fused unk) whose
//     post-processor adds <s>, a Llama-3-style template that writes the BOS itself and
//     today's date through strftime_now (the ids must not have a second <s>).
//
// Argument: a JSON file {"dir", "corpus", "cases"}; answers on stdout.
const fixturePy = `
import json, os, sys
import transformers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
transformers.logging.set_verbosity_error()
args = json.load(open(sys.argv[1], encoding="utf-8"))
lines = args["corpus"] * 3
QWEN2 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

CHATML = (
    "{%- if tools %}{{ '<|im_start|>system\\nTools: ' }}{% for t in tools %}{{ t['function']['name'] }} {{ t | tojson }}\\n{% endfor %}{{ '<|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m['role'] == 'assistant' %}{{ '<|im_start|>assistant\\n' }}{% generation %}"
    "{%- if m['content'] %}{{ m['content'] }}{%- endif %}"
    "{%- if m['tool_calls'] %}{%- for c in m['tool_calls'] %}{{ '<tool_call>' + (c['function'] | tojson) + '</tool_call>' }}{%- endfor %}{%- endif %}"
    "{{ '<|im_end|>' }}{% endgeneration %}{{ '\\n' }}"
    "{%- elif m['role'] == 'tool' %}{{ '<|im_start|>user\\n<tool_response>' + m['content'] + '</tool_response><|im_end|>\\n' }}"
    "{%- else %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}")

LLAMA = (
    "{{ bos_token }}{%- if messages[0]['role'] == 'system' %}{%- set sys = messages[0]['content'] | trim %}{%- set messages = messages[1:] %}{%- else %}{%- set sys = '' %}{%- endif %}"
    "{{ '<|start_header_id|>system<|end_header_id|>\\n\\nToday Date: ' + strftime_now('%d %b %Y') + '\\n\\n' + sys + '<|eot_id|>' }}"
    "{%- for m in messages %}"
    "{%- if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{%- endif %}"
    "{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}")

def chatml():
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_tokens([AddedToken("<tool_call>", special=False, normalized=False), AddedToken("</tool_call>", special=False, normalized=False)])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>"), CHATML

def llama():
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"],
                            show_progress=False))
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="<|eot_id|>", unk_token="<unk>"), LLAMA

out = {}
for name, build in [("chatml", chatml), ("llama", llama)]:
    hf, tmpl = build()
    hf.chat_template = tmpl
    d = os.path.join(args["dir"], name)
    hf.save_pretrained(d)
    hf = transformers.AutoTokenizer.from_pretrained(d)
    res = []
    for c in args["cases"]:
        if c.get("family", name) != name:
            res.append(None)
            continue
        kw = dict(add_generation_prompt=c["gen"], tools=c["conv"].get("tools"))
        try:
            text = hf.apply_chat_template(c["conv"]["messages"], tokenize=False, **kw)
        except Exception as e:
            res.append({"error": str(e)})
            continue
        enc = hf.apply_chat_template(c["conv"]["messages"], tokenize=True, return_dict=True,
                                     return_assistant_tokens_mask=(name == "chatml"), **kw)
        r = {"text": text, "ids": list(enc["input_ids"])}
        if name == "chatml":
            r["mask"] = list(enc["assistant_masks"])
        res.append(r)
    out[name] = res
json.dump(out, sys.stdout)
`

var corpus = []string{
	"You are a helpful assistant. Answer briefly and politely.",
	"What is the capital of France? The capital of France is Paris.",
	"Please call the weather tool for Paris and tell me the temperature in Celsius.",
	"Der Himmel ist blau. Café au lait, s'il vous plaît. 東京は日本の首都です。",
	"def add(a, b):\n    return a + b\n",
}

type tcase struct {
	Name   string         `json:"name"`
	Family string         `json:"family,omitempty"`
	Gen    bool           `json:"gen"`
	Conv   map[string]any `json:"conv"`
}

func cases() []tcase {
	msg := func(role, content string) map[string]any { return map[string]any{"role": role, "content": content} }
	multi := []any{
		msg("system", "  You are a helpful assistant.  "),
		msg("user", "What is the capital of France?"),
		msg("assistant", "The capital of France is Paris."),
		msg("user", "Und 東京? Café!"),
		msg("assistant", " 東京は日本の首都です。 \n"),
	}
	tools := []any{map[string]any{"type": "function", "function": map[string]any{
		"name": "get_weather", "description": "Weather of a city",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
	}}}
	toolConv := []any{
		msg("user", "Weather in Paris?"),
		map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
			"type": "function", "function": map[string]any{"name": "get_weather", "arguments": map[string]any{"city": "Paris"}}}}},
		map[string]any{"role": "tool", "name": "get_weather", "content": "18 C"},
		msg("assistant", "It is 18 C in Paris."),
	}
	return []tcase{
		{Name: "multi-turn", Conv: map[string]any{"messages": multi}},
		{Name: "generation prompt", Gen: true, Conv: map[string]any{"messages": multi[:4]}},
		{Name: "tools", Family: "chatml", Conv: map[string]any{"messages": toolConv, "tools": tools}},
		{Name: "refused", Family: "llama", Conv: map[string]any{"messages": []any{msg("user", "a"), msg("user", "b")}}},
	}
}

type answer struct {
	Text  string  `json:"text"`
	IDs   []int64 `json:"ids"`
	Mask  []int   `json:"mask"`
	Error string  `json:"error"`
}

var fixture struct {
	once sync.Once
	dir  string
	want map[string][]*answer
}

// transformersAnswers runs fixturePy once for the package (one interpreter) and returns
// the directory of the tokenizer directories and the answers for cases().
func transformersAnswers(t *testing.T) (string, map[string][]*answer) {
	t.Helper()
	testpy.Python(t, "transformers", "tokenizers")
	fixture.once.Do(func() {
		dir, err := os.MkdirTemp("", "tokenize-")
		require.NoError(t, err)
		in, err := json.Marshal(map[string]any{"dir": dir, "corpus": corpus, "cases": cases()})
		require.NoError(t, err)
		args := filepath.Join(dir, "args.json")
		require.NoError(t, os.WriteFile(args, in, 0o644))
		var want map[string][]*answer
		require.NoError(t, json.Unmarshal(testpy.Run(t, fixturePy, []string{"transformers", "tokenizers"}, args), &want))
		fixture.dir, fixture.want = dir, want
	})
	if fixture.want == nil {
		t.Fatal("the Python side failed in an earlier test")
	}
	return fixture.dir, fixture.want
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fixture.dir != "" {
		os.RemoveAll(fixture.dir)
	}
	os.Exit(code)
}

// TestTokenizeMatchesTransformers runs the command on each case and compares its JSON
// with transformers' apply_chat_template: the text and the ids for both templates, the
// assistant mask with return_assistant_tokens_mask where the template has generation
// blocks, and for the other that the mask covers each assistant turn and nothing else.
func TestTokenizeMatchesTransformers(t *testing.T) {
	dir, want := transformersAnswers(t)
	cs := cases()

	for _, family := range []string{"chatml", "llama"} {
		model := filepath.Join(dir, family)
		tok, err := tokenizer.LoadDir(model)
		require.NoError(t, err)
		for k, c := range cs {
			w := want[family][k]
			if w == nil {
				continue
			}
			t.Run(family+"/"+c.Name, func(t *testing.T) {
				file := filepath.Join(t.TempDir(), "conv.json")
				data, err := json.Marshal(c.Conv)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(file, data, 0o644))
				argv := []string{"--model", model, "--messages", file, "--json"}
				if c.Gen {
					argv = append(argv, "--add-generation-prompt")
				}
				var stdout, stderr bytes.Buffer
				code := run(argv, &stdout, &stderr)
				if w.Error != "" {
					require.Equal(t, exitRuntime, code)
					assert.Contains(t, stderr.String(), w.Error)
					return
				}
				require.Equal(t, exitOK, code, stderr.String())
				var got output
				require.NoError(t, json.Unmarshal(stdout.Bytes(), &got))
				require.Equal(t, w.Text, got.Text)
				require.Equal(t, w.IDs, got.IDs)
				require.Len(t, got.AssistantMask, len(got.IDs))
				if w.Mask != nil {
					require.Equal(t, w.Mask, got.AssistantMask)
				}
				checkMaskCoversAssistant(t, tok, c, got)
			})
		}
	}
}

// checkMaskCoversAssistant decodes the masked runs of tokens: there is one per
// assistant message, holding its content (trimmed, as the templates trim) and not the
// user's words.
func checkMaskCoversAssistant(t *testing.T, tok *tokenizer.Tokenizer, c tcase, got output) {
	t.Helper()
	var runs []string
	var cur []int64
	for i, id := range got.IDs {
		if got.AssistantMask[i] == 1 {
			cur = append(cur, id)
			continue
		}
		if len(cur) > 0 {
			runs = append(runs, tok.Decode(cur, false))
			cur = nil
		}
	}
	if len(cur) > 0 {
		runs = append(runs, tok.Decode(cur, false))
	}
	var assistant []map[string]any
	for _, m := range c.Conv["messages"].([]any) {
		if m := m.(map[string]any); m["role"] == "assistant" {
			assistant = append(assistant, m)
		}
	}
	require.Len(t, runs, len(assistant), "one learned run per assistant turn: %q", runs)
	for k, m := range assistant {
		if s, _ := m["content"].(string); s != "" {
			assert.Contains(t, runs[k], strings.TrimSpace(s))
		}
		assert.NotContains(t, runs[k], "<|start_header_id|>user")
		assert.NotContains(t, runs[k], "<|im_start|>user")
	}
}

// TestTokenizeText: --text encodes as the tokenizer does, special tokens included; the
// listing marks learned tokens; --chat-date pins strftime_now; usage errors exit 2.
func TestTokenizeText(t *testing.T) {
	dir, _ := transformersAnswers(t)
	conv := filepath.Join(t.TempDir(), "conv.json")
	model := filepath.Join(dir, "llama")
	tok, err := tokenizer.LoadDir(model)
	require.NoError(t, err)

	var stdout, stderr bytes.Buffer
	require.Equal(t, exitOK, run([]string{"--model", model, "--text", "Paris is", "--json"}, &stdout, &stderr), stderr.String())
	var got output
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &got))
	assert.Equal(t, tok.Encode("Paris is", true), got.IDs)
	assert.Nil(t, got.AssistantMask)

	require.NoError(t, os.WriteFile(conv, []byte(`[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]`), 0o644))
	stdout.Reset()
	require.Equal(t, exitOK, run([]string{"--model", model, "--messages", conv, "--chat-date", "2024-07-01"}, &stdout, &stderr), stderr.String())
	assert.Contains(t, stdout.String(), `Today Date: 01 Jul 2024`)
	assert.Contains(t, stdout.String(), " * ")
	assert.Contains(t, stdout.String(), "learned (*)")

	for _, bad := range [][]string{
		{"--text", "x"},
		{"--model", model},
		{"--model", model, "--text", "x", "--messages", conv},
		{"--model", model, "--text", "x", "--add-generation-prompt"},
		{"--model", model, "--messages", conv, "--chat-date", "July 1"},
		{"--model", model, "--messages", conv, "--template-kwarg", "enable_thinking"},
	} {
		stderr.Reset()
		assert.Equal(t, exitUsage, run(bad, &stdout, &stderr), "%q", bad)
		assert.Contains(t, stderr.String(), "usage: tokenize")
	}
	// A kwarg reaches the template; a missing directory is a runtime error.
	k := chatcli.Kwargs{}
	require.NoError(t, k.Set(`enable_thinking=false`))
	require.NoError(t, k.Set(`effort="high"`))
	assert.Equal(t, chatcli.Kwargs{"enable_thinking": false, "effort": "high"}, k)
	assert.Equal(t, exitRuntime, run([]string{"--model", filepath.Join(dir, "none"), "--text", "x"}, &stdout, &stderr))
}

// TestTokenizeMessagesErrors: a --messages file with a field of the wrong type, an empty
// conversation or one the template refuses is an error naming the file (and the message
// at fault), invalid JSON one naming FILE:LINE:COL, and a template with unsupported
// syntax an error naming its file (chat_template.jinja or tokenizer_config.json) and the
// template's line:col; each exits 1 and prints nothing on stdout (issue 40 acceptance
// 5).
func TestTokenizeMessagesErrors(t *testing.T) {
	tok, err := os.ReadFile(filepath.Join("..", "..", "torch", "data", "testdata", "tiny-llama-tokenizer.json"))
	require.NoError(t, err)
	dirWith := func(files map[string]string) string {
		dir := t.TempDir()
		files["tokenizer.json"] = string(tok)
		if _, ok := files["tokenizer_config.json"]; !ok {
			files["tokenizer_config.json"] = `{"bos_token": "<s>", "eos_token": "</s>"}`
		}
		for name, s := range files {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644))
		}
		return dir
	}
	model := dirWith(map[string]string{"chat_template.jinja": `{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for m in messages %}{{ m['content'] }}{% endfor %}`})
	jinja := dirWith(map[string]string{"chat_template.jinja": "{{ bos_token }}\n{{ messages | frobnicate }}"})
	config := dirWith(map[string]string{"tokenizer_config.json": `{"bos_token": "<s>", "chat_template": "{% for m in messages %}\n{% include 'x' %}{% endfor %}"}`})
	file := func(name, s string) string {
		p := filepath.Join(t.TempDir(), name)
		require.NoError(t, os.WriteFile(p, []byte(s), 0o644))
		return p
	}
	good := file("good.json", `[{"role": "user", "content": "hello"}]`)
	wrong := file("wrong.json", "{\"messages\": [\n  {\"role\": \"user\", \"content\": \"hello\"},\n  {\"role\": \"assistant\", \"content\": 5}\n]}\n")
	empty := file("empty.json", `{"messages": []}`)
	refused := file("refused.json", `[{"role": "system", "content": "x"}, {"role": "user", "content": "hello"}]`)
	invalid := file("invalid.json", "[\n  {\"role\": \"user\"\n   \"content\": \"hello\"}\n]\n")
	truncated := file("truncated.json", `[{"role": "user", "content": "hel`)
	for _, c := range []struct{ name, model, messages, want string }{
		{"wrong field type", model, wrong, wrong + `: messages[1]: "content" is a number`},
		{"empty conversation", model, empty, empty + ": the conversation is empty"},
		{"template refuses", model, refused, refused + ": the chat template refuses the conversation: System role not supported"},
		{"invalid JSON", model, invalid, invalid + ":3:4: not valid JSON: invalid character '\"' after object key:value pair"},
		{"truncated JSON", model, truncated, truncated + ":1:33: not valid JSON: unexpected end of JSON input"},
		{"unsupported syntax in chat_template.jinja", jinja, good, filepath.Join(jinja, "chat_template.jinja") + ": chat template 2:15: unsupported filter 'frobnicate'"},
		{"unsupported syntax in tokenizer_config.json", config, good, filepath.Join(config, "tokenizer_config.json") + ": chat template 2:4: unsupported statement '{% include %}'"},
	} {
		var stdout, stderr bytes.Buffer
		assert.Equal(t, exitRuntime, run([]string{"--model", c.model, "--messages", c.messages, "--json"}, &stdout, &stderr), c.name)
		assert.Contains(t, stderr.String(), c.want, c.name)
		assert.Empty(t, stdout.String(), c.name)
	}
}
