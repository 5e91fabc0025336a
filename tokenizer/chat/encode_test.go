package chat

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/tokenizer"
)

// byteTokenizer is a byte-level BPE tokenizer.json (GPT-2's layout) with ChatML's
// special tokens and a few merges, so that most tokens are one byte and a test can say
// which bytes a token covers.
func byteTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	vocab := map[string]int{}
	for b := range 256 {
		vocab[byteChar(byte(b))] = len(vocab)
	}
	merges := [][2]string{{"h", "i"}, {"Ġ", "t"}, {"o", "k"}}
	for _, m := range merges {
		if _, ok := vocab[m[0]+m[1]]; !ok {
			vocab[m[0]+m[1]] = len(vocab)
		}
	}
	n := len(vocab)
	file := map[string]any{
		"version": "1.0",
		"added_tokens": []any{
			map[string]any{"id": n, "content": "<|im_start|>", "special": true, "normalized": false},
			map[string]any{"id": n + 1, "content": "<|im_end|>", "special": true, "normalized": false},
		},
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
		"decoder":       map[string]any{"type": "ByteLevel"},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": merges},
	}
	data, err := json.Marshal(file)
	require.NoError(t, err)
	tok, err := tokenizer.Parse(data)
	require.NoError(t, err)
	return tok
}

// byteChar is GPT-2's printable character for byte b.
func byteChar(b byte) string {
	if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE) {
		return string(rune(b))
	}
	n := 0
	for c := 0; c < int(b); c++ {
		cb := byte(c)
		if !((cb >= '!' && cb <= '~') || (cb >= 0xA1 && cb <= 0xAC) || (cb >= 0xAE)) {
			n++
		}
	}
	return string(rune(256 + n))
}

const chatML = "{%- for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' }}" +
	"{%- if m['role'] == 'assistant' %}{% generation %}{{ m['content'] + '<|im_end|>' }}{% endgeneration %}" +
	"{%- else %}{{ m['content'] + '<|im_end|>' }}{%- endif %}{{ '\\n' }}{%- endfor %}" +
	"{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"

// TestEncodeMasksAssistantTurns: ids are the rendered text's without special tokens
// added, and the mask is 1 exactly on the tokens of each assistant turn (its content
// and <|im_end|>), in every turn of a multi-turn conversation.
func TestEncodeMasksAssistantTurns(t *testing.T) {
	tok := byteTokenizer(t)
	tmpl, err := Parse(chatML)
	require.NoError(t, err)
	msgs := []Message{
		{"role": "system", "content": "be ok"},
		{"role": "user", "content": "hi there"},
		{"role": "assistant", "content": "hi, ok"},
		{"role": "user", "content": "é?"},
		{"role": "assistant", "content": "ok 日本"},
	}
	ids, mask, text, err := Encode(tok, tmpl, msgs, Options{})
	require.NoError(t, err)
	require.Equal(t, tok.Encode(text, false), ids)
	require.Len(t, mask, len(ids))
	want := []string{"hi, ok<|im_end|>", "ok 日本<|im_end|>"}
	var got []string
	var cur []int64
	for i, id := range ids {
		if mask[i] == 1 {
			cur = append(cur, id)
		} else if len(cur) > 0 {
			got = append(got, tok.Decode(cur, false))
			cur = nil
		}
	}
	if len(cur) > 0 {
		got = append(got, tok.Decode(cur, false))
	}
	assert.Equal(t, want, got)

	// With the generation prompt, the header added at the end is not learned.
	ids, mask, text, err = Encode(tok, tmpl, msgs[:2], Options{AddGenerationPrompt: true})
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(text, "<|im_start|>assistant\n"))
	assert.Equal(t, tok.Encode(text, false), ids)
	assert.NotContains(t, mask, uint8(1))
}

// TestMaskOffsetsOverlap pins the overlap rule: a token straddling either end of a
// range counts, a token touching it does not, an empty token counts inside a range.
func TestMaskOffsetsOverlap(t *testing.T) {
	spans := [][2]int{{10, 20}, {30, 40}, {20, 22}}
	offsets := [][2]int{
		{0, 10},  // ends where a range starts: out
		{8, 12},  // straddles the start: in
		{12, 18}, // inside: in
		{18, 21}, // straddles 20, where two ranges touch: in
		{22, 30}, // between: out
		{39, 45}, // straddles the end: in
		{40, 41}, // starts where a range ends: out
		{35, 35}, // empty, inside: in
		{40, 40}, // empty, at the end: out
		{0, 0},   // a BOS with no text: out
	}
	assert.Equal(t, []uint8{0, 1, 1, 1, 0, 1, 0, 1, 0, 0}, maskOffsets(offsets, spans))
}

// TestEncodeTemplateError: raise_exception's message comes back as the error.
func TestEncodeTemplateError(t *testing.T) {
	tmpl, err := Parse("{%- if messages[0]['role'] != 'user' %}{{ raise_exception('Conversations must start with a user turn') }}{%- endif %}ok")
	require.NoError(t, err)
	_, _, _, err = Encode(byteTokenizer(t), tmpl, []Message{{"role": "assistant", "content": "x"}}, Options{})
	require.ErrorContains(t, err, "Conversations must start with a user turn")
}

// TestDecodeConversation: nested objects keep the file's key order (tojson shows it),
// integers stay integers, and each kind of bad record is an error saying what is wrong.
func TestDecodeConversation(t *testing.T) {
	msgs, tools, err := DecodeConversation([]byte(`{"messages": [{"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": {"z": 1, "a": 2.0}}}]}], "tools": [{"b": 1, "a": 2}], "id": 7}`))
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	call := msgs[0]["tool_calls"].([]any)[0].(Object)
	args := call.Values["function"].(Object).Values["arguments"].(Object)
	assert.Equal(t, []string{"z", "a"}, args.Keys)
	assert.Equal(t, json.Number("1"), args.Values["z"])
	assert.Equal(t, json.Number("2.0"), args.Values["a"])
	assert.Equal(t, []string{"b", "a"}, tools[0].(Object).Keys)
	tpl, err := Parse("{{ messages[0].tool_calls[0].function.arguments | tojson }}")
	require.NoError(t, err)
	r, err := tpl.Render(msgs, Options{})
	require.NoError(t, err)
	assert.Equal(t, `{"z": 1, "a": 2.0}`, r.Text, "2.0 stays a float, as Python's json keeps it")
	back, err := json.Marshal(args)
	require.NoError(t, err)
	assert.Equal(t, `{"z":1,"a":2.0}`, string(back), "an Object marshals in its order")

	// Invalid JSON wraps encoding/json's error, its Offset just past the offending byte
	// (here the '"' of "content", where a comma was wanted).
	raw := "[\n {\"role\": \"user\"\n  \"content\": \"x\"}]"
	_, _, err = DecodeConversation([]byte(raw))
	var se *json.SyntaxError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, strings.Index(raw, `"content"`)+1, int(se.Offset))
	assert.ErrorContains(t, err, "not valid JSON: invalid character '\"' after object key:value pair")

	msgs, tools, err = DecodeConversation([]byte(`[{"role": "user", "content": [{"type": "text", "text": "hi"}]}]`))
	require.NoError(t, err)
	assert.Len(t, msgs, 1)
	assert.Nil(t, tools)

	for raw, want := range map[string]string{
		`{"messages": [`:   "not valid JSON",
		`{"messages": []}`: "the conversation is empty",
		`{"messages": [{"role": "robot", "content": "x"}]}`:             `unknown role "robot"`,
		`{"messages": [{"role": "user", "content": 3}]}`:                `messages[0]: "content" is a number`,
		`{"messages": [{"content": "x"}]}`:                              `no "role"`,
		`{"messages": [{"role": "user", "content": [1]}]}`:              "content[0] is a number",
		`{"messages": [{"role": "assistant", "tool_calls": {}}]}`:       `"tool_calls" is an object, not a list`,
		`{"messages": [{"role": "tool", "tool_call_id": 5}]}`:           `"tool_call_id" is a number`,
		`{"messages": [{"role": "assistant", "reasoning_content": 1}]}`: `"reasoning_content" is a number`,
		`{"messages": "hi"}`: `"messages" is a string, not a list`,
		`{"messages": [{"role": "user", "content": "x"}], "tools": {}}`: `"tools" is an object, not a list`,
		`{"text": "x"}`: `no "messages"`,
		`{"messages": [{"role": "user", "content": "x"}]} {}`: "more than one JSON value",
		`"x"`: "not a string",
	} {
		_, _, err := DecodeConversation([]byte(raw))
		require.Error(t, err, raw)
		assert.Contains(t, err.Error(), want, raw)
	}
}
