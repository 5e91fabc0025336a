package chat

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func loadTestTemplate(t *testing.T, file string, special map[string]string) *Template {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", "templates", file))
	require.NoError(t, err)
	tpl, err := Parse(string(src))
	require.NoError(t, err)
	return tpl.WithSpecialTokens(special)
}

func spanTexts(r Rendered) []string {
	out := []string{}
	for _, s := range r.Assistant {
		out = append(out, r.Text[s[0]:s[1]])
	}
	return out
}

// Without generation blocks, each assistant turn's span is its output and the
// end-of-turn token, nothing of the headers or of the other turns.
func TestAssistantSpansFromProvenance(t *testing.T) {
	conv := []Message{
		{"role": "system", "content": "Be brief."},
		{"role": "user", "content": "Hello!"},
		{"role": "assistant", "content": "Hi there."},
		{"role": "user", "content": "Ça va? 世界"},
		{"role": "assistant", "content": "Très bien, 谢谢."},
	}
	noSystem := conv[1:]
	for _, c := range []struct {
		file    string
		special map[string]string
		msgs    []Message
		end     string
	}{
		{"Qwen-Qwen2.5-7B-Instruct.jinja", qwenSpecial, conv, "<|im_end|>"},
		{"meta-llama-Llama-3.1-8B-Instruct.jinja", llamaSpecial, conv, "<|eot_id|>"},
		{"meta-llama-Llama-3.2-3B-Instruct.jinja", llamaSpecial, conv, "<|eot_id|>"},
		{"mistralai-Mistral-Nemo-Instruct-2407.jinja", mistralSpecial, conv, "</s>"},
		{"google-gemma-2-2b-it.jinja", map[string]string{"bos_token": "<bos>", "eos_token": "<eos>"}, noSystem, "<end_of_turn>"},
		{"HuggingFaceTB-SmolLM2-135M-Instruct.jinja", map[string]string{"eos_token": "<|im_end|>"}, conv, "<|im_end|>"},
		{"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", deepseekSpecial, conv, "<｜end▁of▁sentence｜>"},
		{"deepseek-ai-DeepSeek-V3.1.jinja", deepseekSpecial, conv, "<｜end▁of▁sentence｜>"},
	} {
		t.Run(c.file, func(t *testing.T) {
			r, err := loadTestTemplate(t, c.file, c.special).Render(c.msgs, Options{Now: pinnedNow})
			require.NoError(t, err)
			assert.Equal(t, []string{"Hi there." + c.end, "Très bien, 谢谢." + c.end}, spanTexts(r), r.Text)
		})
	}
}

// Tool calls: the span starts after the assistant header, so the call's own syntax
// (<tool_call>, {"name": ...) is learnt, and ends after the end-of-turn token.
func TestAssistantSpansToolCalls(t *testing.T) {
	msgs := []Message{
		{"role": "user", "content": "Weather in Paris?"},
		{"role": "assistant", "tool_calls": []any{map[string]any{"type": "function",
			"function": map[string]any{"name": "get_weather", "arguments": map[string]any{"location": "Paris"}}}}},
		{"role": "tool", "content": "18C"},
		{"role": "assistant", "content": "18C."},
	}
	o := Options{Tools: []any{weatherTool}, Now: pinnedNow}
	r, err := loadTestTemplate(t, "Qwen-Qwen2.5-7B-Instruct.jinja", qwenSpecial).Render(msgs, o)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call><|im_end|>",
		"18C.<|im_end|>",
	}, spanTexts(r))

	r, err = loadTestTemplate(t, "meta-llama-Llama-3.1-8B-Instruct.jinja", llamaSpecial).Render(msgs, o)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}<|eot_id|>",
		"18C.<|eot_id|>",
	}, spanTexts(r))

	// Mistral has no assistant header: the span starts after the user turn's "[/INST]".
	msgs[1]["tool_calls"].([]any)[0].(map[string]any)["id"] = "call12345"
	msgs[2]["tool_call_id"] = "call12345"
	r, err = loadTestTemplate(t, "mistralai-Mistral-Nemo-Instruct-2407.jinja", mistralSpecial).Render(msgs, o)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"[TOOL_CALLS][{\"arguments\": {\"location\": \"Paris\"}, \"name\": \"get_weather\", \"id\": \"call12345\"}]</s>",
		"18C.</s>",
	}, spanTexts(r))

	// DeepSeek-R1's prompt header is "<｜Assistant｜><think>\n"; a history turn opens with
	// "<｜Assistant｜>" alone, and its tool calls close with two tokens before the end.
	msgs[1]["content"] = "" // R1's template reads it
	r, err = loadTestTemplate(t, "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", deepseekSpecial).Render(msgs, o)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"location\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>",
		"18C.<｜end▁of▁sentence｜>",
	}, spanTexts(r))
}

// Qwen3 keeps the reasoning of the turns after the last user message only; the span of
// such a turn covers its <think> block, an earlier turn's only its answer.
func TestAssistantSpansReasoning(t *testing.T) {
	msgs := []Message{
		{"role": "user", "content": "2+2?"},
		{"role": "assistant", "reasoning_content": "Add.", "content": "4"},
		{"role": "user", "content": "Times 3?"},
		{"role": "assistant", "reasoning_content": "Multiply.", "content": "12"},
	}
	tpl := loadTestTemplate(t, "Qwen-Qwen3-0.6B.jinja", qwenSpecial)
	r, err := tpl.Render(msgs, Options{})
	require.NoError(t, err)
	assert.Equal(t, []string{"4<|im_end|>", "<think>\nMultiply.\n</think>\n\n12<|im_end|>"}, spanTexts(r))

	// Without reasoning, the template writes an empty think block into the last turn:
	// it is that turn's output too.
	msgs[3] = Message{"role": "assistant", "content": "12"}
	r, err = tpl.Render(msgs, Options{})
	require.NoError(t, err)
	assert.Equal(t, []string{"4<|im_end|>", "<think>\n\n</think>\n\n12<|im_end|>"}, spanTexts(r))
}

func TestGenerationBlocks(t *testing.T) {
	tpl, err := Parse(featureTemplates["generation"])
	require.NoError(t, err)
	assert.True(t, tpl.HasGenerationBlocks())
	r, err := tpl.Render([]Message{
		{"role": "user", "content": "hi"},
		{"role": "assistant", "content": "hello"},
	}, Options{})
	require.NoError(t, err)
	assert.Equal(t, []string{"hello<|im_end|>"}, spanTexts(r))

	plain, err := Parse("{{ messages[0].content }}")
	require.NoError(t, err)
	assert.False(t, plain.HasGenerationBlocks())
}

func TestUnsupportedSyntax(t *testing.T) {
	for src, want := range map[string]string{
		"{% include 'x.jinja' %}":                "1:4: unsupported statement '{% include %}'",
		"ok\n  {{ x | frobnicate }}":             "2:10: unsupported filter 'frobnicate'",
		"{% if x is prime %}{% endif %}":         "1:12: unsupported test 'is prime'",
		"{{ messages.append(1) }}":               "1:13: unsupported method '.append()'",
		"{% for x in y recursive %}{% endfor %}": "unsupported: recursive for loops",
		"{% call foo() %}{% endcall %}":          "1:4: unsupported statement '{% call %}'",
		"{% raw %}{{ x }}{% endraw %}":           "unsupported statement '{% raw %}'",
		"{% if x %}no end":                       "expected 'endif'",
		"{{ x ":                                  "unclosed '{{'",
		"{% macro m(*args) %}{% endmacro %}":     "expected a name",
		"{{ f(*a) }}":                            "unsupported: *args and **kwargs",
		"{% extends 'base' %}":                   "unsupported statement '{% extends %}'",
		"{% set x = 1 %}{{ x.format(2) }}":       "unsupported method '.format()'",
		"{# never closed":                        "unclosed comment",
	} {
		_, err := Parse(src)
		var se *SyntaxError
		require.True(t, errors.As(err, &se), "%q: %v", src, err)
		assert.Contains(t, err.Error(), want, src)
	}
}

func TestRaiseException(t *testing.T) {
	tpl := loadTestTemplate(t, "google-gemma-2-2b-it.jinja", nil)
	_, err := tpl.Render([]Message{{"role": "system", "content": "s"}, {"role": "user", "content": "u"}}, Options{})
	var te *TemplateError
	require.True(t, errors.As(err, &te), "%v", err)
	assert.Equal(t, "System role not supported", te.Msg)
	assert.Equal(t, "System role not supported", err.Error())
}

func TestRenderErrorsNamePosition(t *testing.T) {
	tpl, err := Parse("line one\n{{ 1 + 'a' }}")
	require.NoError(t, err)
	_, err = tpl.Render(nil, Options{})
	var re *RenderError
	require.True(t, errors.As(err, &re), "%v", err)
	assert.Equal(t, 2, re.Line)
	assert.Contains(t, err.Error(), "unsupported operand type(s) for +: 'int' and 'str'")
}

func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	cfg := `{
	  "bos_token": {"content": "<s>", "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": true},
	  "eos_token": "</s>",
	  "pad_token": null,
	  "chat_template": [
	    {"name": "default", "template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}"},
	    {"name": "tool_use", "template": "{{ tools | length }} tools"}
	  ]
	}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o644))
	tpl, err := LoadDir(dir)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"bos_token": "<s>", "eos_token": "</s>"}, tpl.SpecialTokens())
	assert.Equal(t, []string{"default", "tool_use"}, tpl.TemplateNames())
	r, err := tpl.Render([]Message{{"role": "user", "content": "a"}}, Options{})
	require.NoError(t, err)
	assert.Equal(t, "<s>a</s>", r.Text)

	named, err := LoadDirNamed(dir, "tool_use")
	require.NoError(t, err)
	r, err = named.Render(nil, Options{Tools: []any{weatherTool, weatherTool}})
	require.NoError(t, err)
	assert.Equal(t, "2 tools", r.Text)
	_, err = LoadDirNamed(dir, "rag")
	assert.ErrorContains(t, err, `no chat template named "rag"`)

	// chat_template.jinja, when tokenizer_config.json has none.
	dir2 := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir2, "tokenizer_config.json"), []byte(`{"eos_token": "<|im_end|>"}`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir2, "chat_template.jinja"), []byte("{{ eos_token }}\n"), 0o644))
	tpl, err = LoadDir(dir2)
	require.NoError(t, err)
	r, err = tpl.Render(nil, Options{})
	require.NoError(t, err)
	assert.Equal(t, "<|im_end|>", r.Text)

	// A template with unsupported syntax names the file.
	require.NoError(t, os.WriteFile(filepath.Join(dir2, "chat_template.jinja"), []byte("{% include 'x' %}"), 0o644))
	_, err = LoadDir(dir2)
	assert.ErrorContains(t, err, "chat_template.jinja: chat template 1:4: unsupported statement")

	_, err = LoadDir(t.TempDir())
	assert.ErrorContains(t, err, "has no chat template")

	// special_tokens_map.json fills the tokens tokenizer_config.json lacks.
	require.NoError(t, os.WriteFile(filepath.Join(dir2, "chat_template.jinja"), []byte("{{ bos_token }}{{ eos_token }}"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir2, "special_tokens_map.json"),
		[]byte(`{"bos_token": {"content": "<|begin|>"}, "eos_token": "<ignored>"}`), 0o644))
	tpl, err = LoadDir(dir2)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"bos_token": "<|begin|>", "eos_token": "<|im_end|>"}, tpl.SpecialTokens())
}

// A Template renders from several goroutines at once (a data loader's workers).
func TestRenderConcurrent(t *testing.T) {
	tpl := loadTestTemplate(t, "Qwen-Qwen3-0.6B.jinja", qwenSpecial)
	msgs := []Message{{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}}
	want, err := tpl.Render(msgs, Options{})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				got, err := tpl.Render(msgs, Options{})
				assert.NoError(t, err)
				assert.Equal(t, want, got)
			}
		}()
	}
	wg.Wait()
}

// DecodeMessages keeps the order of nested objects and the 1 / 1.0 distinction, which
// tojson shows.
func TestDecodeMessages(t *testing.T) {
	msgs, err := DecodeMessages([]byte(`[{"role": "assistant", "content": "x",
	  "tool_calls": [{"function": {"name": "f", "arguments": {"z": 1, "a": 1.0, "m": [true, null]}}}]}]`))
	require.NoError(t, err)
	tpl, err := Parse("{{ messages[0].tool_calls[0].function.arguments | tojson }}")
	require.NoError(t, err)
	r, err := tpl.Render(msgs, Options{})
	require.NoError(t, err)
	assert.Equal(t, `{"z": 1, "a": 1.0, "m": [true, null]}`, r.Text)

	_, err = DecodeMessages([]byte(`{"role": "user"}`))
	assert.Error(t, err)
	_, err = DecodeMessages([]byte(`[1]`))
	assert.ErrorContains(t, err, "message 0 is not a JSON object")
}
