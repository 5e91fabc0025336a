package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testpy"
)

// chatPy builds a tiny instruct model directory as transformers saves one: a byte-level
// BPE tokenizer with ChatML's special tokens, a ChatML template with a default system
// turn (saved by save_pretrained, so in chat_template.jinja), EOS <|endoftext|> in
// config.json and generation_config.json (not <|im_end|>: the command must find the
// template's end-of-turn token itself), and random untied Qwen2 weights. The lm_head row
// of <|im_end|> is set to that of the greedy reply's fourth token plus a small step along
// that position's hidden state, so that the first reply ends with <|im_end|> there.
//
// Then it answers, with apply_chat_template(..., add_generation_prompt=True,
// tokenize=True) and greedy generate() stopping at <|endoftext|> or <|im_end|>, each
// conversation of "chats": a list of user turns, each reply's text (decoded without
// special tokens) appended to the history as the assistant's turn before the next.
const chatPy = `
import json, os, sys, torch, transformers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

transformers.logging.set_verbosity_error()
args = json.load(open(sys.argv[1], encoding="utf-8"))
d = args["dir"]
QWEN2 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
tok = Tokenizer(models.BPE())
tok.normalizer = normalizers.NFC()
tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
                                             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(args["corpus"] * 3, trainers.BpeTrainer(
    vocab_size=420, min_frequency=2, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
tok.post_processor = processors.ByteLevel(trim_offsets=False)
fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
fast.chat_template = args["template"]
fast.save_pretrained(d)

eot, im_end = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")
cfg = Qwen2Config(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  tie_word_embeddings=False, bos_token_id=None, eos_token_id=eot)
torch.manual_seed(0)
m = Qwen2ForCausalLM(cfg)
with torch.no_grad():
    for n, p in m.named_parameters():
        if "norm" in n:
            p.normal_(1, 0.2)
        else:
            p.normal_(0, 0.3)
m.eval()
hf = AutoTokenizer.from_pretrained(d)

def render(msgs):
    out = hf.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    if hasattr(out, "keys"):
        out = out["input_ids"]
    return list(out)

# The hidden state that predicts the first reply's fourth token, and that token.
seq = render([{"role": "user", "content": args["chats"][0][0]}])
seen = {}
hook = m.lm_head.register_forward_hook(lambda mod, inp, out: seen.__setitem__("h", inp[0][0, -1].clone()))
with torch.no_grad():
    for k in range(4):
        nxt = int(m(torch.tensor([seq])).logits[0, -1].argmax())
        seq.append(nxt)
hook.remove()
h, t3 = seen["h"], seq[-1]
with torch.no_grad():
    m.lm_head.weight[im_end] = m.lm_head.weight[t3] + 0.5 * h / h.dot(h)
m.save_pretrained(d)

answers = []
for turns in args["chats"]:
    msgs, conv = [], []
    for i, u in enumerate(turns):
        if isinstance(u, dict):
            msgs.append(u)
            if i < len(turns) - 1:
                continue
        else:
            msgs.append({"role": "user", "content": u})
        ids = render(msgs)
        x = torch.tensor([ids])
        with torch.no_grad():
            out = m.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=12, do_sample=False,
                             eos_token_id=[eot, im_end], pad_token_id=eot)
        new = out[0, len(ids):].tolist()
        text = hf.decode(new, skip_special_tokens=True)
        msgs.append({"role": "assistant", "content": text})
        conv.append({"prompt_ids": ids, "new_ids": new, "text": text})
    answers.append(conv)
print(json.dumps({"answers": answers, "im_end": im_end}))
`

// chatTemplate is ChatML as Qwen2.5's template writes it, without tools: a default
// system turn when the conversation has none.
const chatTemplate = `{%- if messages[0]['role'] != 'system' %}
{{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\n' }}
{%- endif %}`

// chatCorpus trains the chat tokenizer: ChatML's words and the turns' text.
var chatCorpus = []string{
	"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
	"The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away.",
	"Hello, world! Hello again, world. Once upon a time there was a little model.",
	"naïve café résumé — déjà vu; you answer briefly and helpfully, assistant.",
}

// chatMessages is the --messages conversation: a system turn, a full exchange and a
// user turn, with non-ASCII text.
var chatMessages = []map[string]any{
	{"role": "system", "content": "You answer briefly."},
	{"role": "user", "content": "Once upon a time"},
	{"role": "assistant", "content": "there was a café."},
	{"role": "user", "content": "naïve fox?"},
}

// chatConvs are the conversations transformers answers: the two-turn chat piped to
// stdin (its first turn ends at <|im_end|>), the system turn with one user turn, and
// chatMessages.
var chatConvs = [][]any{
	{"Hello", "The quick brown fox"},
	{map[string]any{"role": "system", "content": "You answer briefly."}, "The quick brown fox"},
	{chatMessages[0], chatMessages[1], chatMessages[2], chatMessages[3]},
}

// chatFixture holds the chat model directory and transformers' answers.
var chatFixture struct {
	once    sync.Once
	root    string
	dir     string
	imEnd   int64
	answers [][]output
}

// chatAnswers builds the chat directory and transformers' answers once (one
// interpreter) and returns the directory.
func chatAnswers(t *testing.T) string {
	t.Helper()
	modules := []string{"torch", "transformers", "tokenizers"}
	chatFixture.once.Do(func() {
		root, err := os.MkdirTemp("", "generate-chat-")
		require.NoError(t, err)
		chatFixture.root = root // removed by TestMain
		dir := filepath.Join(root, "chat")
		in, err := json.Marshal(map[string]any{"dir": dir, "corpus": chatCorpus, "template": chatTemplate, "chats": chatConvs})
		require.NoError(t, err)
		argsPath := filepath.Join(root, "args.json")
		require.NoError(t, os.WriteFile(argsPath, in, 0o644))
		var res struct {
			Answers [][]output `json:"answers"`
			IMEnd   int64      `json:"im_end"`
		}
		out := testpy.Run(t, chatPy, modules, argsPath)
		require.NoError(t, json.Unmarshal(out, &res), "%s", out)
		require.Len(t, res.Answers, len(chatConvs))
		chatFixture.dir, chatFixture.imEnd, chatFixture.answers = dir, res.IMEnd, res.Answers
	})
	if chatFixture.answers == nil {
		testpy.Python(t, modules...)
		t.Fatal("the Python side failed in an earlier test")
	}
	return chatFixture.dir
}

// runChat runs the command with stdin and returns its exit status and output.
func runChat(stdin string, args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = runIO(args, strings.NewReader(stdin), &o, &e)
	return code, o.String(), e.String()
}

// decodeLines decodes one JSON object a line.
func decodeLines(t *testing.T, s string) []output {
	t.Helper()
	var outs []output
	dec := json.NewDecoder(strings.NewReader(s))
	for dec.More() {
		var o output
		require.NoError(t, dec.Decode(&o), s)
		outs = append(outs, o)
	}
	return outs
}

// TestChat is issue 40's item 7: --chat renders the conversation as transformers'
// apply_chat_template(..., add_generation_prompt=True, tokenize=True) does (prompt_ids)
// and the reply equals transformers' greedy generate(); the reply stops at the
// template's end-of-turn token <|im_end|> although generation_config.json names only
// <|endoftext|>; two lines piped to stdin are two turns, the second rendered with the
// first reply in the history; --system and --messages give the conversation.
func TestChat(t *testing.T) {
	dir := chatAnswers(t)
	want := chatFixture.answers
	max := []string{"--model", dir, "--max-new-tokens", "12"}

	first := want[0][0]
	require.NotEmpty(t, first.NewIDs)
	require.Less(t, len(first.NewIDs), 12, "the fixture's first reply ends early")
	require.Equal(t, chatFixture.imEnd, first.NewIDs[len(first.NewIDs)-1], "the fixture's first reply ends with <|im_end|>")
	b, err := os.ReadFile(filepath.Join(dir, "generation_config.json"))
	require.NoError(t, err)
	var gc struct {
		EOS json.RawMessage `json:"eos_token_id"`
	}
	require.NoError(t, json.Unmarshal(b, &gc))
	require.NotContains(t, string(gc.EOS), strconv.FormatInt(chatFixture.imEnd, 10), "generation_config.json does not list <|im_end|>")

	t.Run("stdin turns", func(t *testing.T) {
		code, stdout, stderr := runChat("Hello\n\nThe quick brown fox\n", append(max, "--chat", "--json")...)
		require.Equal(t, 0, code, stderr)
		got := decodeLines(t, stdout)
		require.Len(t, got, 2, "one object a turn: %s", stdout)
		for i := range got {
			assert.Equal(t, want[0][i].PromptIDs, got[i].PromptIDs, "turn %d: apply_chat_template's ids of the history", i)
			assert.Equal(t, want[0][i].NewIDs, got[i].NewIDs, "turn %d: generate()'s reply", i)
			assert.Equal(t, want[0][i].Text, got[i].Text, "turn %d", i)
		}
	})
	t.Run("prompt", func(t *testing.T) {
		got := runJSON(t, append(max, "--chat", "--prompt", "Hello")...)
		assert.Equal(t, first, got)
		// Text mode prints the reply alone (no template text, no <|im_end|>).
		code, stdout, stderr := runChat("", append(max, "--chat", "--prompt", "Hello")...)
		require.Equal(t, 0, code, stderr)
		assert.Equal(t, first.Text+"\n", stdout)
	})
	t.Run("system", func(t *testing.T) {
		got := runJSON(t, append(max, "--chat", "--system", "You answer briefly.", "--prompt", "The quick brown fox")...)
		assert.Equal(t, want[1][0], got)
	})
	t.Run("messages", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "chat.json")
		writeJSON(t, path, map[string]any{"messages": chatMessages})
		got := runJSON(t, append(max, "--messages", path)...)
		assert.Equal(t, want[2][0], got)
	})
}

// TestChatErrors: a directory without a chat template or with one of unsupported syntax
// (named with its file and the template's line:col), a --messages file the command
// cannot use (a field of the wrong type, an empty conversation, one the template
// refuses: named with the file; invalid JSON: FILE:LINE:COL), and an empty stdin are
// errors that say what and where (exit status 1); conflicting chat flags are usage
// errors (2).
func TestChatErrors(t *testing.T) {
	dir := chatAnswers(t)
	noTemplate := copyDir(t, dir)
	require.NoError(t, os.Remove(filepath.Join(noTemplate, "chat_template.jinja")))
	unsupported := copyDir(t, dir)
	require.NoError(t, os.WriteFile(filepath.Join(unsupported, "chat_template.jinja"), []byte("{{ bos_token }}\n{{ messages | frobnicate }}"), 0o644))
	refusing := copyDir(t, dir)
	require.NoError(t, os.WriteFile(filepath.Join(refusing, "chat_template.jinja"),
		[]byte(`{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for m in messages %}{{ m['content'] }}{% endfor %}`), 0o644))
	bad := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"messages": [{"role": "user", "content": 3}]}`), 0o644))
	empty := filepath.Join(t.TempDir(), "empty.json")
	require.NoError(t, os.WriteFile(empty, []byte(`{"messages": []}`), 0o644))
	system := filepath.Join(t.TempDir(), "system.json")
	require.NoError(t, os.WriteFile(system, []byte(`[{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}]`), 0o644))
	invalid := filepath.Join(t.TempDir(), "invalid.json")
	require.NoError(t, os.WriteFile(invalid, []byte("[\n  {\"role\": \"user\"\n   \"content\": \"Hi\"}\n]\n"), 0o644))
	for _, c := range []struct {
		name  string
		args  []string
		stdin string
		code  int
		msg   string
	}{
		{"no template", []string{"--model", noTemplate, "--chat", "--prompt", "Hi"}, "", 1, "has no chat template"},
		{"wrong field type", []string{"--model", dir, "--messages", bad}, "", 1, bad + ": messages[0]"},
		{"empty conversation", []string{"--model", dir, "--messages", empty}, "", 1, empty + `: the conversation is empty`},
		{"template refuses", []string{"--model", refusing, "--messages", system}, "", 1,
			system + ": the chat template refuses the conversation: System role not supported"},
		{"invalid JSON", []string{"--model", dir, "--messages", invalid}, "", 1,
			invalid + ":3:4: not valid JSON: invalid character '\"' after object key:value pair"},
		{"unsupported syntax", []string{"--model", unsupported, "--chat", "--prompt", "Hi"}, "", 1,
			filepath.Join(unsupported, "chat_template.jinja") + ": chat template 2:15: unsupported filter 'frobnicate'"},
		{"empty stdin", []string{"--model", dir, "--chat"}, "\n", 1, "stdin held no user turn"},
		{"messages and prompt", []string{"--model", dir, "--messages", empty, "--prompt", "Hi"}, "", 2, "--messages conflicts with --prompt"},
		{"system without chat", []string{"--model", dir, "--system", "S", "--prompt", "Hi"}, "", 2, "--system applies to --chat only"},
		{"bad chat date", []string{"--model", dir, "--chat", "--chat-date", "today"}, "", 2, "--chat-date: want YYYY-MM-DD"},
		{"bad kwarg", []string{"--model", dir, "--chat", "--template-kwarg", "enable_thinking"}, "", 2, "want KEY=JSON"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runChat(c.stdin, c.args...)
			assert.Equal(t, c.code, code, stderr)
			assert.Empty(t, stdout)
			assert.Contains(t, stderr, c.msg)
		})
	}
}
