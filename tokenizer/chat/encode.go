package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/gotrain/gotrain/tokenizer"
)

// Encode renders msgs with t and encodes the text with tok, as transformers'
// apply_chat_template(..., tokenize=True, return_assistant_tokens_mask=True): the
// rendered text is encoded without the tokenizer's own special tokens (the template
// writes its BOS itself; transformers 5 does not add a second one).
//
// assistantMask has one entry per id: 1 when the token's byte range in text overlaps
// one of the rendering's Assistant ranges, else 0. A token [s, e) overlaps a range
// [a, b) when s < b and a < e, so a token that straddles a range's boundary (text
// merged across the end of a turn) counts as the assistant's: the loss then covers every
// byte of every assistant turn. A token with an empty range [s, s) counts when
// a <= s < b.
func Encode(tok *tokenizer.Tokenizer, t *Template, msgs []Message, o Options) (ids []int64, assistantMask []uint8, text string, err error) {
	if tok == nil {
		return nil, nil, "", fmt.Errorf("chat: Encode with a nil tokenizer")
	}
	r, err := t.Render(msgs, o)
	if err != nil {
		return nil, nil, "", err
	}
	ids, offsets, err := tok.TryEncodeOffsets(r.Text, false)
	if err != nil {
		return nil, nil, "", fmt.Errorf("chat: encoding the rendered conversation: %w", err)
	}
	return ids, maskOffsets(offsets, r.Assistant), r.Text, nil
}

// maskOffsets is Encode's mask of tokens with byte ranges offsets over the ranges
// spans: 1 where a token overlaps a range (as Encode defines it), else 0.
func maskOffsets(offsets, spans [][2]int) []uint8 {
	spans = slices.Clone(spans)
	slices.SortFunc(spans, func(a, b [2]int) int { return a[0] - b[0] })
	// Merge overlapping and touching ranges, so that the ends increase and a binary
	// search finds the first range that ends after a token starts.
	merged := spans[:0]
	for _, sp := range spans {
		if sp[1] <= sp[0] {
			continue
		}
		if n := len(merged); n > 0 && sp[0] <= merged[n-1][1] {
			merged[n-1][1] = max(merged[n-1][1], sp[1])
			continue
		}
		merged = append(merged, sp)
	}
	mask := make([]uint8, len(offsets))
	for i, off := range offsets {
		s, e := off[0], off[1]
		j := sort.Search(len(merged), func(k int) bool { return merged[k][1] > s })
		if j == len(merged) {
			continue
		}
		sp := merged[j]
		if (e > s && sp[0] < e) || (e == s && sp[0] <= s) {
			mask[i] = 1
		}
	}
	return mask
}

// conversationRoles are the conversationRoles DecodeConversation accepts.
var conversationRoles = map[string]bool{"system": true, "user": true, "assistant": true, "tool": true, "ipython": true}

// DecodeConversation reads one conversation as a JSONL line or a JSON file holds it: an
// object {"messages": [...]} with optional "tools" (a list of objects, or null), or a
// bare list of messages, decoded by DecodeValue: nested JSON objects become Object,
// which keeps the file's key order (as Python's json does, which tojson shows), and
// numbers json.Number as written (rendered as Python's int or float: 1 and 1.0 differ).
// Invalid JSON is an error wrapping DecodeValue's *json.SyntaxError, whose Offset
// places it. It checks what a template may rely on: a non-empty list of message
// objects, each with a known role (system, user, assistant, tool, ipython), content a
// string, a list of parts (objects with a "type"; a text part has a string "text") or
// null, tool_calls a list of objects, and reasoning_content, name and tool_call_id
// strings. A message's other keys are kept; the record's other keys are ignored.
func DecodeConversation(raw []byte) (msgs []Message, tools []any, err error) {
	v, err := DecodeValue(raw)
	if errors.Is(err, errTrailing) {
		return nil, nil, errors.New("more than one JSON value on the line")
	}
	if err != nil {
		return nil, nil, fmt.Errorf("not valid JSON: %w", err)
	}
	var msgsV, toolsV any
	switch v := v.(type) {
	case []any:
		msgsV = v
	case Object:
		var ok bool
		if msgsV, ok = v.Values["messages"]; !ok {
			return nil, nil, errors.New(`want {"messages": [...]}: the record has no "messages"`)
		}
		toolsV = v.Values["tools"]
	default:
		return nil, nil, fmt.Errorf(`want {"messages": [...]}, not %s`, conversationKind(v))
	}
	list, ok := msgsV.([]any)
	if !ok {
		return nil, nil, fmt.Errorf(`"messages" is %s, not a list`, conversationKind(msgsV))
	}
	if len(list) == 0 {
		return nil, nil, errors.New(`the conversation is empty ("messages": [])`)
	}
	for k, m := range list {
		obj, ok := m.(Object)
		if !ok {
			return nil, nil, fmt.Errorf("messages[%d] is %s, not an object", k, conversationKind(m))
		}
		msg, err := checkConversationMessage(obj)
		if err != nil {
			return nil, nil, fmt.Errorf("messages[%d]: %w", k, err)
		}
		msgs = append(msgs, msg)
	}
	if toolsV != nil {
		var ok bool
		if tools, ok = toolsV.([]any); !ok {
			return nil, nil, fmt.Errorf(`"tools" is %s, not a list`, conversationKind(toolsV))
		}
		for k, t := range tools {
			if _, ok := t.(Object); !ok {
				return nil, nil, fmt.Errorf("tools[%d] is %s, not an object", k, conversationKind(t))
			}
		}
	}
	return msgs, tools, nil
}

// checkConversationMessage checks a message's role and the types of the fields templates read, and
// returns it as a Message.
func checkConversationMessage(obj Object) (Message, error) {
	role, ok := obj.Values["role"]
	if !ok {
		return nil, errors.New(`no "role"`)
	}
	r, ok := role.(string)
	if !ok {
		return nil, fmt.Errorf(`"role" is %s, not a string`, conversationKind(role))
	}
	if !conversationRoles[r] {
		return nil, fmt.Errorf(`unknown role %q (system, user, assistant, tool or ipython)`, r)
	}
	if c, ok := obj.Values["content"]; ok {
		switch c := c.(type) {
		case nil, string:
		case []any:
			for k, p := range c {
				part, ok := p.(Object)
				if !ok {
					return nil, fmt.Errorf("content[%d] is %s, not an object such as {\"type\": \"text\", \"text\": ...}", k, conversationKind(p))
				}
				if ty, ok := part.Values["type"].(string); !ok {
					return nil, fmt.Errorf(`content[%d] has no string "type"`, k)
				} else if ty == "text" {
					if _, ok := part.Values["text"].(string); !ok {
						return nil, fmt.Errorf(`content[%d] is a text part without a string "text"`, k)
					}
				}
			}
		default:
			return nil, fmt.Errorf(`"content" is %s, not a string, a list of parts or null`, conversationKind(c))
		}
	}
	if tc, ok := obj.Values["tool_calls"]; ok && tc != nil {
		list, ok := tc.([]any)
		if !ok {
			return nil, fmt.Errorf(`"tool_calls" is %s, not a list`, conversationKind(tc))
		}
		for k, c := range list {
			if _, ok := c.(Object); !ok {
				return nil, fmt.Errorf("tool_calls[%d] is %s, not an object", k, conversationKind(c))
			}
		}
	}
	for _, f := range []string{"reasoning_content", "name", "tool_call_id"} {
		if v, ok := obj.Values[f]; ok && v != nil {
			if _, ok := v.(string); !ok {
				return nil, fmt.Errorf("%q is %s, not a string", f, conversationKind(v))
			}
		}
	}
	msg := make(Message, len(obj.Values))
	for k, v := range obj.Values {
		msg[k] = v
	}
	return msg, nil
}

// conversationKind names a decoded JSON value's type for an error.
func conversationKind(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case []any:
		return "a list"
	case Object:
		return "an object"
	default:
		return fmt.Sprintf("%T", v)
	}
}
