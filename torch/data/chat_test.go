package data_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/tokenizer"
	"github.com/gotrain/gotrain/tokenizer/chat"
	"github.com/gotrain/gotrain/torch/data"
)

// chatTokenizer is a byte-level tokenizer.json (GPT-2's byte characters, no merges)
// with ChatML's special tokens: every ASCII character is one token, so a test can
// count tokens.
func chatTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	vocab := map[string]int{}
	printable := func(b int) bool { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE }
	n := 0
	for b := range 256 {
		if printable(b) {
			vocab[string(rune(b))] = b
		} else {
			vocab[string(rune(256+n))] = b
			n++
		}
	}
	file := map[string]any{
		"version": "1.0",
		"added_tokens": []any{
			map[string]any{"id": 256, "content": "<|im_start|>", "special": true, "normalized": false},
			map[string]any{"id": 257, "content": "<|im_end|>", "special": true, "normalized": false},
		},
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
		"decoder":       map[string]any{"type": "ByteLevel"},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": []any{}},
	}
	raw, err := json.Marshal(file)
	require.NoError(t, err)
	tok, err := tokenizer.Parse(raw)
	require.NoError(t, err)
	return tok
}

// chatTemplate is Qwen-style ChatML in the form real templates have: tools listed in
// the system turn, an enable_thinking switch, strftime_now, raise_exception on a bad
// first role, and {% generation %} around each assistant turn.
const chatTemplate = `{%- if messages[0]['role'] == 'assistant' %}{{ raise_exception('The first turn may not be the assistant\'s') }}{%- endif %}
{{- '<|im_start|>system\n' }}{%- if tools %}{{ 'tools: ' }}{%- for t in tools %}{{ t['name'] }};{%- endfor %}{%- endif %}
{{- 'date ' + strftime_now('%Y-%m-%d') }}{%- if enable_thinking is defined and not enable_thinking %}{{ ' /no_think' }}{%- endif %}{{ '<|im_end|>\n' }}
{%- for m in messages %}
{%- if m['role'] == 'assistant' %}{{ '<|im_start|>assistant\n' }}{% generation %}{{ m['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}
{%- else %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}
{%- endif %}
{%- endfor %}`

func chatSetup(t *testing.T) (*tokenizer.Tokenizer, *chat.Template) {
	t.Helper()
	tmpl, err := chat.Parse(chatTemplate)
	require.NoError(t, err)
	return chatTokenizer(t), tmpl
}

func conv(turns ...string) string {
	var msgs []map[string]any
	for k := 0; k+1 < len(turns); k += 2 {
		msgs = append(msgs, map[string]any{"role": turns[k], "content": turns[k+1]})
	}
	b, _ := json.Marshal(map[string]any{"messages": msgs})
	return string(b)
}

var pinned = time.Date(2025, 3, 4, 0, 0, 0, 0, time.UTC)

// TestChatDatasetLabels: input_ids are chat.Encode's ids, and labels are those ids on
// the assistant turns (content and <|im_end|>) and IgnoreIndex elsewhere, in every turn.
func TestChatDatasetLabels(t *testing.T) {
	tok, tmpl := chatSetup(t)
	lines := []string{
		conv("system", "be brief", "user", "hi", "assistant", "hello!", "user", "2+2?", "assistant", "4"),
		conv("user", "x", "assistant", "y"),
	}
	path := writeFile(t, "chat.jsonl", strings.Join(lines, "\n")+"\n\n")
	o := data.ChatOptions{BlockSize: 512, Template: chat.Options{Now: pinned}}
	ds, err := data.NewChatDataset(path, tok, tmpl, o)
	require.NoError(t, err)
	require.Equal(t, 2, ds.Len())
	assert.Equal(t, 0, ds.Cut)
	assert.Equal(t, 0, ds.Dropped)

	var s data.Sample
	require.NoError(t, ds.Get(0, &s))
	ids := data.Values[int64](s.MustField(data.LMInputIDs))
	labels := data.Values[int64](s.MustField(data.LMLabels))
	msgs, _, err := chat.DecodeConversation([]byte(lines[0]))
	require.NoError(t, err)
	want, mask, text, err := chat.Encode(tok, tmpl, msgs, o.Template)
	require.NoError(t, err)
	assert.Contains(t, text, "date 2025-03-04")
	require.Equal(t, want, ids)
	var learned []string
	var run []int64
	for j := range ids {
		if mask[j] == 1 {
			require.Equal(t, ids[j], labels[j])
			run = append(run, ids[j])
			continue
		}
		require.Equal(t, int64(data.IgnoreIndex), labels[j])
		if run != nil {
			learned = append(learned, tok.Decode(run, false))
			run = nil
		}
	}
	assert.Equal(t, []string{"hello!<|im_end|>", "4<|im_end|>"}, learned)
}

// TestChatDatasetTruncation: a conversation longer than the block keeps its leading
// turns up to the last assistant turn that fits; one whose first assistant turn does not
// fit is dropped; the counts and the summary say so.
func TestChatDatasetTruncation(t *testing.T) {
	tok, tmpl := chatSetup(t)
	short := conv("user", "a", "assistant", "b")
	long := conv("user", "a", "assistant", "b", "user", strings.Repeat("c", 40), "assistant", "d")
	late := conv("user", strings.Repeat("e", 80), "assistant", "f")
	o := data.ChatOptions{BlockSize: 64, Template: chat.Options{Now: pinned}}
	path := writeFile(t, "chat.jsonl", short+"\n"+long+"\n"+late+"\n")
	ds, err := data.NewChatDataset(path, tok, tmpl, o)
	require.NoError(t, err)
	assert.Equal(t, 3, ds.Conversations)
	assert.Equal(t, 1, ds.Cut)
	assert.Equal(t, 1, ds.Dropped)
	require.Equal(t, 2, ds.Len())
	assert.Equal(t, "3 conversations: 1 kept whole, 1 cut to the block size of 64 tokens (trailing turns dropped), 1 dropped (first assistant turn longer than the block)", ds.Summary())

	// The cut conversation is the short one's tokens: the same leading turns, ending
	// with the first assistant turn's <|im_end|>.
	var a, b data.Sample
	require.NoError(t, ds.Get(0, &a))
	require.NoError(t, ds.Get(1, &b))
	shortIDs := data.Values[int64](a.MustField(data.LMInputIDs))
	cutIDs := data.Values[int64](b.MustField(data.LMInputIDs))
	assert.LessOrEqual(t, len(cutIDs), 64)
	assert.Equal(t, shortIDs[:len(shortIDs)-1], cutIDs, "the short conversation ends with a newline after <|im_end|>")
	assert.Equal(t, int64(257), cutIDs[len(cutIDs)-1])

	// All dropped is an error.
	_, err = data.NewChatDataset(writeFile(t, "late.jsonl", late+"\n"), tok, tmpl, o)
	require.ErrorContains(t, err, "all 1 conversations were dropped")
}

// TestChatDatasetOptions: a record's tools replace the options' tools, and template
// variables such as enable_thinking reach the template.
func TestChatDatasetOptions(t *testing.T) {
	tok, tmpl := chatSetup(t)
	rec := `{"messages": [{"role": "user", "content": "w?"}, {"role": "assistant", "content": "sun"}], "tools": [{"name": "weather"}]}`
	plain := conv("user", "w?", "assistant", "sun")
	o := data.ChatOptions{BlockSize: 512, Template: chat.Options{Now: pinned, Tools: []any{map[string]any{"name": "default"}},
		Vars: map[string]any{"enable_thinking": false}}}
	ds, err := data.NewChatDataset(writeFile(t, "c.jsonl", rec+"\n"+plain+"\n"), tok, tmpl, o)
	require.NoError(t, err)
	for i, want := range []string{"tools: weather;date 2025-03-04 /no_think", "tools: default;date 2025-03-04 /no_think"} {
		var s data.Sample
		require.NoError(t, ds.Get(i, &s))
		assert.Contains(t, tok.Decode(data.Values[int64](s.MustField(data.LMInputIDs)), false), want)
	}
	_, err = data.NewChatDataset(writeFile(t, "g.jsonl", plain+"\n"), tok, tmpl,
		data.ChatOptions{BlockSize: 512, Template: chat.Options{AddGenerationPrompt: true}})
	require.ErrorContains(t, err, "without the generation prompt")
}

// TestChatDatasetErrors: each bad record is an error naming the file and its line.
func TestChatDatasetErrors(t *testing.T) {
	tok, tmpl := chatSetup(t)
	good := conv("user", "a", "assistant", "b")
	for name, c := range map[string]struct{ line, want string }{
		"invalid JSON":    {`{"messages": [`, "not valid JSON"},
		"wrong type":      {`{"messages": [{"role": "user", "content": 5}, {"role": "assistant", "content": "b"}]}`, `messages[0]: "content" is a number`},
		"empty":           {`{"messages": []}`, "the conversation is empty"},
		"unknown role":    {`{"messages": [{"role": "bot", "content": "a"}]}`, `messages[0]: unknown role "bot"`},
		"refused":         {conv("assistant", "b", "user", "a"), "the chat template refuses the conversation: The first turn may not be the assistant's"},
		"no assistant":    {conv("user", "a"), "the conversation has no assistant turn"},
		"tool_calls type": {`{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "tool_calls": "f()"}]}`, `messages[1]: "tool_calls" is a string`},
	} {
		path := writeFile(t, "bad.jsonl", good+"\n\n"+c.line+"\n"+good+"\n")
		ds, err := data.NewChatDataset(path, tok, tmpl, data.ChatOptions{BlockSize: 512, Template: chat.Options{Now: pinned}})
		require.Error(t, err, name)
		assert.Nil(t, ds, name)
		assert.Contains(t, err.Error(), fmt.Sprintf("bad.jsonl:3: %s", c.want), name)
	}
	_, err := data.NewChatDataset(writeFile(t, "empty.jsonl", "\n"), tok, tmpl, data.ChatOptions{BlockSize: 512})
	require.ErrorContains(t, err, "holds no conversation")
	_, err = data.NewChatDataset(writeFile(t, "x.jsonl", good+"\n"), tok, tmpl, data.ChatOptions{BlockSize: 1})
	require.ErrorContains(t, err, "at least 2 tokens")
}
