package chat

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testpy"
)

// The parity test renders real chat templates (testdata/templates, see its NOTICE) and
// small templates for single features, in Go and with transformers'
// render_jinja_template, for many conversations, in one Python process.

// pinnedNow is strftime_now's clock on both sides.
var pinnedNow = time.Date(2025, 3, 7, 10, 30, 0, 0, time.UTC)

const parityScript = `
import json, sys
from datetime import datetime as _dt
import transformers.utils.chat_template_utils as ctu

class _Pinned(_dt):
    @classmethod
    def now(cls, tz=None):
        return _dt(2025, 3, 7, 10, 30, 0)

ctu.datetime = _Pinned

cases = json.load(open(sys.argv[1], encoding="utf-8"))
out = []
for c in cases:
    try:
        kwargs = {**c["special"], **(c["vars"] or {})}
        texts, gens = ctu.render_jinja_template(
            [c["messages"]], tools=c["tools"], documents=None, chat_template=c["template"],
            return_assistant_tokens_mask=c["mask"], add_generation_prompt=c["agp"], **kwargs)
        text = texts[0]
        spans = None
        if c["mask"]:
            spans = [[len(text[:a].encode()), len(text[:b].encode())] for a, b in gens[0]]
        out.append({"text": text, "spans": spans})
    except Exception as e:
        out.append({"error": str(e), "type": type(e).__name__})
json.dump(out, sys.stdout, ensure_ascii=False)
`

type parityCase struct {
	Name     string            `json:"name"`
	Template string            `json:"template"`
	Messages []Message         `json:"messages"`
	Tools    []any             `json:"tools"`
	AGP      bool              `json:"agp"`
	Vars     map[string]any    `json:"vars"`
	Special  map[string]string `json:"special"`
	Mask     bool              `json:"mask"`
}

type parityResult struct {
	Text  string   `json:"text"`
	Spans [][2]int `json:"spans"`
	Error string   `json:"error"`
	Type  string   `json:"type"`
}

// family is a real template and what its conversations may hold.
type family struct {
	file      string
	special   map[string]string
	system    bool // accepts a system message
	tools     bool // renders tools and tool calls
	argString bool // expects tool-call arguments as a JSON string
	reasoning bool // keeps reasoning_content
	// generation: the template has {% generation %} blocks, so its assistant spans are
	// compared with return_assistant_tokens_mask's.
	generation bool
	vars       []map[string]any
}

var (
	qwenSpecial     = map[string]string{"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
	llamaSpecial    = map[string]string{"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
	mistralSpecial  = map[string]string{"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
	deepseekSpecial = map[string]string{"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}
	gemmaSpecial    = map[string]string{"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"}
)

var families = []family{
	{file: "meta-llama-Llama-3.1-8B-Instruct.jinja", special: llamaSpecial, system: true, tools: true,
		vars: []map[string]any{nil, {"tools_in_user_message": false}}},
	{file: "meta-llama-Llama-3.2-3B-Instruct.jinja", special: llamaSpecial, system: true, tools: true},
	{file: "Qwen-Qwen2.5-7B-Instruct.jinja", special: qwenSpecial, system: true, tools: true},
	{file: "Qwen-Qwen3-0.6B.jinja", special: qwenSpecial, system: true, tools: true, reasoning: true,
		vars: []map[string]any{nil, {"enable_thinking": false}, {"enable_thinking": true}}},
	{file: "mistralai-Mistral-Nemo-Instruct-2407.jinja", special: mistralSpecial, system: true, tools: true},
	{file: "Mistral-Small-3.2-24B-Instruct-2506.jinja", special: mistralSpecial, system: true, tools: true},
	{file: "google-gemma-2-2b-it.jinja", special: gemmaSpecial},
	{file: "HuggingFaceTB-SmolLM2-135M-Instruct.jinja", special: map[string]string{"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>"}, system: true},
	{file: "HuggingFaceTB-SmolLM3-3B.jinja", special: map[string]string{"eos_token": "<|im_end|>", "pad_token": "<|im_end|>"}, system: true, tools: true, reasoning: true,
		vars: []map[string]any{nil, {"enable_thinking": false}}},
	{file: "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", special: deepseekSpecial, system: true, tools: true, argString: true, reasoning: true},
	{file: "deepseek-ai-DeepSeek-V3.1.jinja", special: deepseekSpecial, system: true, tools: true, argString: true, reasoning: true,
		vars: []map[string]any{nil, {"thinking": true}}},
	{file: "LFM2.5-8B-A1B.jinja", special: map[string]string{"bos_token": "<|startoftext|>", "eos_token": "<|im_end|>"}, system: true, tools: true, reasoning: true, generation: true},
	{file: "google-gemma-3-it.jinja", special: gemmaSpecial, system: true},
	{file: "trl-gemma3_training.jinja", special: gemmaSpecial, system: true, generation: true},
}

var weatherTool = map[string]any{
	"type": "function",
	"function": map[string]any{
		"name":        "get_weather",
		"description": "Get the current weather in a city.",
		"parameters": map[string]any{
			"type": "object",
			"properties": map[string]any{
				"location": map[string]any{"type": "string", "description": "The city, e.g. Paris"},
				"unit":     map[string]any{"type": "string", "enum": []any{"celsius", "fahrenheit"}},
			},
			"required": []any{"location"},
		},
	},
}

// conversations returns the test conversations a family accepts, with the tools each
// needs.
func conversations(f family) map[string]struct {
	msgs  []Message
	tools []any
} {
	type conv = struct {
		msgs  []Message
		tools []any
	}
	out := map[string]conv{
		"multi-turn": {msgs: []Message{
			{"role": "user", "content": "Hello!"},
			{"role": "assistant", "content": "Hi there. How can I help?"},
			{"role": "user", "content": "Tell me a joke."},
			{"role": "assistant", "content": "Why did the chicken cross the road?"},
		}},
		"unicode-whitespace": {msgs: []Message{
			{"role": "user", "content": "  Héllo, 世界 🌍  \n"},
			{"role": "assistant", "content": "\n  Ça va? ありがとう — “quotes” \\ \"x\"  "},
			{"role": "user", "content": "naïve café\t"},
		}},
	}
	// Content as a list of parts: templates that read parts join them, the others print
	// Python's repr of the list (or fail, on both sides).
	out["content-parts"] = conv{msgs: []Message{
		{"role": "user", "content": []any{map[string]any{"type": "text", "text": "Describe"}, map[string]any{"type": "text", "text": " this, 1.5 times."}}},
		{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": "Done."}}},
	}}
	if f.system {
		out["system"] = conv{msgs: []Message{
			{"role": "system", "content": "You are a terse assistant."},
			{"role": "user", "content": "What is 2+2?"},
			{"role": "assistant", "content": "4"},
			{"role": "user", "content": "And 3+3?"},
		}}
	} else {
		out["system-refused"] = conv{msgs: []Message{
			{"role": "system", "content": "You are a terse assistant."},
			{"role": "user", "content": "Hi"},
		}}
	}
	if f.tools {
		var args any = map[string]any{"location": "Paris", "unit": "celsius"}
		if f.argString {
			args = `{"location": "Paris", "unit": "celsius"}`
		}
		out["tools"] = conv{tools: []any{weatherTool}, msgs: []Message{
			{"role": "system", "content": "You can call tools."},
			{"role": "user", "content": "What's the weather in Paris?"},
			{"role": "assistant", "content": "", "tool_calls": []any{map[string]any{
				"id": "call12345", "type": "function",
				"function": map[string]any{"name": "get_weather", "arguments": args},
			}}},
			{"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": `{"temperature": 18}`},
			{"role": "assistant", "content": "It is 18°C in Paris."},
			{"role": "user", "content": "Thanks!"},
		}}
	}
	if f.reasoning {
		out["reasoning"] = conv{msgs: []Message{
			{"role": "user", "content": "What is 2+2?"},
			{"role": "assistant", "reasoning_content": "Adding: 2+2=4.", "content": "4"},
			{"role": "user", "content": "Times 3?"},
			{"role": "assistant", "reasoning_content": "\nMultiply: 4*3=12.\n", "content": "\n12"},
		}}
	}
	return out
}

// featureTemplates exercise one construct each (whitespace control, scoping, filters,
// tests, methods) against jinja2.
var featureTemplates = map[string]string{
	"trim-lstrip": "a\n  {% if true %}\n    b\n  {% endif %}\n{# c #}\n  {%+ if true %}d{% endif %}\n{{- ' e ' -}}\n f",
	"loop": "{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}" +
		"{% if not loop.first %}<{{ loop.previtem.role }}{% endif %}{% if not loop.last %}>{{ loop.nextitem.role }}{% endif %}{{ loop.cycle('x', 'y') }};{% endfor %}" +
		"{% for m in messages if m.role == 'user' %}[{{ loop.index }}:{{ m.content }}]{% else %}none{% endfor %}" +
		"{% for x in [] %}{% else %}empty{% endfor %}{% for k, v in {'a': 1, 'b': [1, 2]}.items() %}{{ k }}={{ v }},{% endfor %}" +
		"{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}",
	"scope": "{% set x = 1 %}{% for i in range(3) %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}|" +
		"{% set ns = namespace(n=0, s='') %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}" +
		"{% if true %}{% set y = 'set in if' %}{% endif %}{{ y }}{% set a, b = [1, 2] %}{{ a + b }}" +
		"{% set block %}  inner {{ x }}  {% endset %}[{{ block }}]{% set t | trim | upper %}  up  {% endset %}[{{ t }}]",
	"macro": "{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(name='C', punct='.') }}" +
		"{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(3) }}",
	"filters": "{{ '  pad  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ [3, 1, 2] | length }}|{{ 'ab' | upper }}{{ 'AB' | lower }}|{{ 'hello wORLD-x' | title }}|{{ 'hELLO' | capitalize }}" +
		"|{{ 'a-b-c' | replace('-', '+') }}|{{ ['a', 'b', 1] | join(', ') }}|{{ undefined_var | default('dflt') }}|{{ '' | default('e', true) }}|{{ [1, 2, 3] | first }}{{ [1, 2, 3] | last }}" +
		"|{{ 'abc' | list }}|{{ 42 | string }}{{ '7' | int + 1 }}{{ 'x' | int }}|{{ {'b': 1, 'a': 2} | items | list }}|{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join('+') }}" +
		"|{{ messages | rejectattr('role', 'eq', 'user') | list | length }}|{{ '<a & b>' | e }}|{{ '<s>' | safe }}|{{ [3, 1, 2] | sort | list }}{{ [3, 1, 2] | sort(reverse=true) | list }}" +
		"|{{ [1, 1, 2] | unique | list }}|{{ [1, 2, 3] | sum }}|{{ [1, 5, 3] | max }}{{ [4, 2] | min }}|{{ 'l1\nl2' | indent(2) }}|{{ [1, 2] | reverse | list }}|{{ -3 | abs }}|{{ 2.567 | round(2) }}|{{ 'one two' | wordcount }}" +
		"|{{ ['a', 'b'] | map('upper') | list }}|{{ [0, 1, 2] | select | list }}|{{ [0, 1, 2] | reject('odd') | list }}",
	"tojson": "{{ {'b': [1, 2.5, true, none], 'a': 'é\"\\n', 'c': {}} | tojson }}|{{ {'b': 1, 'a': [1, {'x': 'y'}]} | tojson(indent=2) }}|{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}" +
		"|{{ 'ü' | tojson(ensure_ascii=true) }}|{{ [1, 2] | tojson(separators=(',', ':')) }}|{{ tools | tojson }}|{{ 1.0 | tojson }}{{ 1e20 | tojson }}{{ 0.00001 | tojson }}",
	"tests": "{% for v in [none, true, 1, 1.5, 'x', [1], {'a': 1}, undefined_var] %}{{ v is defined }}{{ v is undefined }}{{ v is none }}{{ v is string }}{{ v is mapping }}" +
		"{{ v is iterable }}{{ v is sequence }}{{ v is number }}{{ v is integer }}{{ v is float }}{{ v is boolean }}{{ v is true }}{{ v is false }};{% endfor %}" +
		"{{ 2 is even }}{{ 3 is odd }}{{ 9 is divisibleby 3 }}{{ 'a' is in 'abc' }}{{ 1 is eq 1 }}{{ 1 is ne 2 }}{{ 'x' is not none }}{{ 'ab' is lower }}{{ 3 is gt 2 }}{{ 3 is ge 3 }}{{ 1 is lt 2 }}",
	"methods": "{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\n\na\n'.lstrip('\n') }}|{{ 'a\n\n'.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a,b,c'.split(',', 1) }}" +
		"|{{ 'a,b,c'.rsplit(',', 1) }}|{{ 'hello'.startswith('he') }}{{ 'hello'.endswith(('x', 'lo')) }}|{{ 'aXbX'.replace('X', 'y') }}{{ 'aXbX'.replace('X', 'y', 1) }}|{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}" +
		"|{{ 'hello world'.title() }}|{{ 'hello'.find('l') }}{{ 'hello'.rfind('l') }}{{ 'hello'.find('z') }}|{{ 'a</think>b'.split('</think>')[-1] }}|{{ '-'.join(['a', 'b']) }}|{{ 'aaa'.count('a') }}" +
		"|{{ {'a': 1}.get('a') }}{{ {'a': 1}.get('b') }}{{ {'a': 1}.get('b', 2) }}|{{ {'a': 1, 'b': 2}.keys() | list }}{{ {'a': 1, 'b': 2}.values() | list }}|{{ 'l1\nl2'.splitlines() }}|{{ '12'.isdigit() }}",
	"expressions": "{{ 'abc'[::-1] }}|{{ [1, 2, 3][1:] }}|{{ 'héllo'[1:3] }}|{{ [1, 2, 3][-1] }}|{{ 'a' ~ 1 ~ none }}|{{ 'a' + 'b' }}|{{ 1 + 2 * 3 - 4 / 2 }}|{{ 7 // 2 }}{{ -7 // 2 }}{{ 7 % 3 }}{{ -7 % 3 }}{{ 2 ** 10 }}" +
		"|{{ 1 < 2 < 3 }}{{ 1 == 1.0 }}{{ 'a' in ['a'] }}{{ 'z' not in 'abc' }}{{ 'k' in {'k': 1} }}|{{ 'y' if false else 'n' }}{{ 'y' if true }}[{{ 'y' if false }}]|{{ not none }}{{ none or 'x' }}{{ 0 and 1 }}" +
		"|{{ [1, 2] + [3] }}{{ 'ab' * 2 }}|{{ (1, 2) }}{{ (1,) }}|{{ {'a': 'b'} }}|{{ none }}{{ true }}{{ 1.5 }}{{ 10 / 4 }}{{ 4 / 2 }}|{{ messages[0].content }}{{ messages[0]['role'] }}{{ messages[9] }}{{ messages[0].missing }}" +
		"|{{ 'it''s' }}{{ \"q\" 'r' }}|{{ -(3) }}{{ +2 }}|{{ 1e3 }}{{ 1_000 }}|{{ messages | length > 1 }}|{{ range(2, 8, 3) | list }}|{{ dict(a=1) }}|{{ strftime_now('%Y-%m-%d %H:%M %d %b %B %A %a %-d %-m %j %p %y') }}",
	"raise":          "{% if messages | length > 1 %}{{ raise_exception('Too many: ' ~ messages | length) }}{% endif %}ok",
	"undefined-attr": "{{ nope.attr }}",
	"generators": "{{ 'y' if messages | selectattr('role', 'eq', 'nobody') else 'n' }}{% set g = messages | map(attribute='role') %}{{ g | join(',') }}|{{ g | list }}|{{ messages | selectattr('role', 'eq', 'user') | first }}" +
		"|{{ {'a': 1}.items() | list }}{{ {'a': 1}.keys() | length }}{{ 'y' if {}.items() else 'n' }}|{{ [1, 2] | reverse | list }}{{ 'y' if [] | reverse else 'n' }}|{{ [3, 1, 3] | unique | list }}{% for k, v in {'b': 2} | items %}{{ k }}{{ v }}{% endfor %}",
	"generator-len":     "{{ messages | selectattr('role') | length }}",
	"generator-json":    "{{ tools | map(attribute='function') | tojson }}",
	"generator-last":    "{{ messages | selectattr('role') | last }}",
	"generator-print":   "{{ messages | map(attribute='role') }}",
	"view-json":         "{{ {'a': 1}.items() | tojson }}",
	"view-index":        "{{ {'a': 1}.keys()[0] }}",
	"int-keys":          "{% set m = {0: 'zero', 512: 'half', 'k': 1} %}{{ m[512] }}{{ m[0] }}{{ m.k }}{{ m }}{{ m | tojson }}{% for k in m %}{{ k }};{% endfor %}{{ 512 in m }}{{ m.get(0) }}",
	"undefined-chain":   "{{ messages[0].nope is defined }}{{ messages[0].nope | length }}{{ messages[0].nope ~ 'x' }}{% for x in messages[0].nope %}{% endfor %}{{ messages[0].nope == none }}",
	"numbers":           "{{ tools[0].function.parameters | tojson }}{{ 3 / 2 }}{{ 2.0 * 3 }}{{ 1e-7 }}{{ 123456789012345678 }}{{ 0.1 + 0.2 }}{{ [1.5, 2] | sum }}{{ 7 | float }}{{ '3.25' | float }}{{ (0.5 | round) }}{{ 1.5 | round }}{{ 2.5 | round }}",
	"with-filter-block": "{% with a = 1, b = 'x' %}{{ a }}{{ b }}{% endwith %}{% filter upper %}shout {{ 'it' }}{% endfilter %}",
	"generation": "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}{% generation %}{{ m.content }}<|im_end|>{% endgeneration %}\n" +
		"{% else %}{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
}

func TestParity(t *testing.T) {
	testpy.Python(t, "transformers", "jinja2")
	var cases []parityCase
	for _, f := range families {
		src, err := os.ReadFile(filepath.Join("testdata", "templates", f.file))
		require.NoError(t, err)
		vars := f.vars
		if vars == nil {
			vars = []map[string]any{nil}
		}
		for name, c := range conversations(f) {
			for _, v := range vars {
				for _, agp := range []bool{false, true} {
					cases = append(cases, parityCase{Name: f.file + "/" + name, Template: string(src), Messages: c.msgs, Tools: c.tools,
						AGP: agp, Vars: v, Special: f.special, Mask: f.generation})
				}
			}
		}
	}
	feature := []Message{
		{"role": "system", "content": "sys"},
		{"role": "user", "content": "u1"},
		{"role": "assistant", "content": "  a1  "},
		{"role": "user", "content": "u2 é"},
	}
	names := make([]string, 0, len(featureTemplates))
	for name := range featureTemplates {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		src := featureTemplates[name]
		cases = append(cases, parityCase{Name: "feature/" + name, Template: src, Messages: feature, Tools: []any{weatherTool},
			AGP: true, Special: qwenSpecial, Mask: name == "generation"})
	}

	dir := t.TempDir()
	args := filepath.Join(dir, "cases.json")
	data, err := json.Marshal(cases)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(args, data, 0o644))
	var want []parityResult
	require.NoError(t, json.Unmarshal(testpy.Run(t, parityScript, []string{"transformers"}, args), &want))
	require.Len(t, want, len(cases))

	rendered := map[string]bool{}
	errs := 0
	for i, c := range cases {
		w := want[i]
		if w.Error != "" {
			errs++
			t.Logf("%s agp=%v: both sides must fail: transformers raised %s: %s", c.Name, c.AGP, w.Type, w.Error)
		}
		tpl, err := Parse(c.Template)
		require.NoError(t, err, c.Name)
		tpl = tpl.WithSpecialTokens(c.Special)
		got, err := tpl.Render(c.Messages, Options{AddGenerationPrompt: c.AGP, Tools: c.Tools, Vars: c.Vars, Now: pinnedNow})
		label := c.Name + " agp=" + map[bool]string{false: "false", true: "true"}[c.AGP]
		if c.Vars != nil {
			b, _ := json.Marshal(c.Vars)
			label += " vars=" + string(b)
		}
		if w.Error != "" {
			require.Error(t, err, "%s: transformers raised %s: %s", label, w.Type, w.Error)
			if w.Type == "TemplateError" {
				var te *TemplateError
				require.True(t, errors.As(err, &te), "%s: %v", label, err)
				assert.Equal(t, w.Error, te.Msg, label)
			}
			continue
		}
		if strings.Contains(w.Text, "<generator object") {
			// Python prints an address; gotrain refuses to render it.
			require.ErrorContains(t, err, "printing a Python generator is not supported", label)
			continue
		}
		require.NoError(t, err, label)
		if !assert.Equal(t, w.Text, got.Text, label) {
			continue
		}
		rendered[c.Name] = true
		if c.Mask {
			assert.Equal(t, w.Spans, nonNil(got.Assistant), label+": generation spans")
		}
	}
	t.Logf("%d cases, %d of them errors in transformers", len(cases), errs)
	// Every family rendered at least one conversation (not only errors on both sides).
	for _, f := range families {
		assert.True(t, rendered[f.file+"/multi-turn"], f.file)
	}
}

func nonNil(s [][2]int) [][2]int {
	if s == nil {
		return [][2]int{}
	}
	return s
}
