// Package chat renders Hugging Face chat templates (Jinja) as transformers'
// apply_chat_template does, in pure Go.
//
// A template is parsed once (Parse, LoadDir); every construct it uses is checked at load,
// and one this package does not implement is an error naming it and its line:col, never
// a wrong rendering. The Jinja environment is transformers': trim_blocks and
// lstrip_blocks on, the loop controls extension, the sandbox's immutable lists and
// dicts, jinja2's default Undefined, and transformers' globals (raise_exception,
// strftime_now, namespace, dict) and tojson filter.
//
// Render also tells which bytes of the text the training loss covers (Rendered.Assistant):
// from the template's {% generation %} blocks when it has them, as transformers'
// return_assistant_tokens_mask, and otherwise from the provenance of the assistant
// messages' fields through the render. docs/chat-templates.md describes both.
package chat

import (
	"fmt"
	"sync"
	"time"
)

// Message is one turn as decoded from JSON: "role", "content" (a string or a list of
// parts) and any other field a template reads ("tool_calls", "reasoning_content",
// "name", "tool_call_id"). Nested JSON objects may be map[string]any (rendered with
// sorted keys, as Go maps have no order) or Object (rendered in their own order, as
// Python's dicts are); DecodeMessages produces Objects.
type Message = map[string]any

// Template is a parsed chat template. It is safe for concurrent use by several
// goroutines.
type Template struct {
	root       *body
	generation bool
	special    map[string]string
	named      map[string]string
	// openers caches turnOpeners by the options that can change them.
	openers *sync.Map
}

// Options are the arguments of one rendering, as apply_chat_template's keyword
// arguments.
type Options struct {
	// AddGenerationPrompt appends the header that starts a new assistant turn.
	AddGenerationPrompt bool
	// Tools is the "tools" variable: JSON schemas of the functions the model may call.
	// Nil renders as transformers' tools=None.
	Tools []any
	// Documents is the "documents" variable (retrieval-augmented templates); nil is None.
	Documents []any
	// Now is strftime_now's clock; the zero time means time.Now().
	Now time.Time
	// Vars are further template keyword arguments, such as "enable_thinking": false.
	// They override the special tokens of the same name.
	Vars map[string]any
}

// Rendered is the text of a conversation and the part of it that the loss covers.
type Rendered struct {
	// Text is the rendered conversation.
	Text string
	// Assistant holds the byte ranges [start,end) of Text that the training loss
	// covers, in order: each assistant turn's output (content, tool calls, the reasoning
	// the template keeps) and the template's end-of-turn token after it. With
	// {% generation %} blocks they are those blocks' output; otherwise they come from
	// the provenance of the assistant messages' fields through the render (see
	// docs/chat-templates.md).
	Assistant [][2]int
}

// Parse parses a chat template's source. Syntax this package does not implement is an
// error naming the construct and its line:col.
func Parse(src string) (*Template, error) {
	root, gen, err := parseTemplate(src)
	if err != nil {
		return nil, err
	}
	return &Template{root: root, generation: gen, special: map[string]string{}, openers: &sync.Map{}}, nil
}

// HasGenerationBlocks reports whether the template marks the assistant's output with
// transformers' {% generation %} ... {% endgeneration %} blocks.
func (t *Template) HasGenerationBlocks() bool { return t.generation }

// SpecialTokens returns the special tokens (bos_token, eos_token, ...) that the template
// sees as variables, as loaded from the tokenizer's configuration. The map is a copy.
func (t *Template) SpecialTokens() map[string]string {
	m := make(map[string]string, len(t.special))
	for k, v := range t.special {
		m[k] = v
	}
	return m
}

// WithSpecialTokens returns a copy of t whose special-token variables are tokens (for a
// template parsed with Parse rather than loaded from a tokenizer directory).
func (t *Template) WithSpecialTokens(tokens map[string]string) *Template {
	c := *t
	c.openers = &sync.Map{}
	c.special = make(map[string]string, len(tokens))
	for k, v := range tokens {
		c.special[k] = v
	}
	return &c
}

// Render renders a conversation. A template's raise_exception(msg) is returned as an
// error whose message is msg (errors.As to *TemplateError).
func (t *Template) Render(msgs []Message, o Options) (Rendered, error) {
	if t == nil || t.root == nil {
		return Rendered{}, fmt.Errorf("chat: Render on a nil template")
	}
	return t.render(msgs, o)
}
