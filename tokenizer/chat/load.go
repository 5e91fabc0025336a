package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/gotrain/gotrain/internal/fsutil"
)

// specialTokenKeys are the named special tokens transformers passes to a template
// (PreTrainedTokenizerBase.SPECIAL_TOKENS_ATTRIBUTES).
var specialTokenKeys = []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}

// LoadDir loads the chat template of a Hugging Face model or tokenizer directory: the
// "chat_template" of tokenizer_config.json (a string, or a list of {"name", "template"}
// of which "default" is used), else chat_template.jinja. The special tokens of
// tokenizer_config.json (or special_tokens_map.json) become template variables.
func LoadDir(dir string) (*Template, error) { return LoadDirNamed(dir, "") }

// maxFileBytes bounds each file a template is read from (tokenizer_config.json holds a
// template and a few hundred added tokens at most).
const maxFileBytes = 16 << 20

// LoadDirNamed is LoadDir for the template called name in a list of named templates
// ("default" when name is ""; e.g. "tool_use" or "rag").
func LoadDirNamed(dir, name string) (*Template, error) {
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	cfg := map[string]json.RawMessage{}
	data, err := fsutil.ReadFileInDir(dir, "tokenizer_config.json", maxFileBytes)
	switch {
	case err == nil:
		if err := json.Unmarshal(data, &cfg); err != nil {
			return nil, fmt.Errorf("chat: %s: %w", cfgPath, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("chat: %w", err)
	}
	// special_tokens_map.json (older checkpoints) fills what tokenizer_config.json lacks.
	legacy := map[string]json.RawMessage{}
	if data, err := fsutil.ReadFileInDir(dir, "special_tokens_map.json", maxFileBytes); err == nil {
		if err := json.Unmarshal(data, &legacy); err != nil {
			return nil, fmt.Errorf("chat: %s: %w", filepath.Join(dir, "special_tokens_map.json"), err)
		}
	}
	special := map[string]string{}
	for _, k := range specialTokenKeys {
		raw, ok := cfg[k]
		if !ok || string(bytes.TrimSpace(raw)) == "null" {
			raw, ok = legacy[k]
		}
		if !ok || string(bytes.TrimSpace(raw)) == "null" {
			continue
		}
		var s string
		var obj struct {
			Content *string `json:"content"`
		}
		switch {
		case json.Unmarshal(raw, &s) == nil:
		case json.Unmarshal(raw, &obj) == nil && obj.Content != nil:
			s = *obj.Content
		default:
			continue
		}
		special[k] = s
	}

	named := map[string]string{}
	source := cfgPath
	if raw, ok := cfg["chat_template"]; ok && string(raw) != "null" {
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			named["default"] = s
		} else {
			var list []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err := json.Unmarshal(raw, &list); err != nil {
				return nil, fmt.Errorf("chat: %s: chat_template is neither a string nor a list of {name, template}", cfgPath)
			}
			for _, e := range list {
				named[e.Name] = e.Template
			}
		}
	}
	if len(named) == 0 {
		p := filepath.Join(dir, "chat_template.jinja")
		b, err := fsutil.ReadFileInDir(dir, "chat_template.jinja", maxFileBytes)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("chat: %s has no chat template (no chat_template in tokenizer_config.json, no chat_template.jinja)", dir)
			}
			return nil, fmt.Errorf("chat: %w", err)
		}
		named["default"], source = string(b), p
	}
	if name == "" {
		name = "default"
	}
	src, ok := named[name]
	if !ok {
		names := make([]string, 0, len(named))
		for n := range named {
			names = append(names, n)
		}
		sort.Strings(names)
		return nil, fmt.Errorf("chat: %s has no chat template named %q (it has %v)", source, name, names)
	}
	t, err := Parse(src)
	if err != nil {
		return nil, fmt.Errorf("chat: %s: %w", source, err)
	}
	t.special = special
	t.named = named
	return t, nil
}

// TemplateNames returns the names of the templates the directory's tokenizer_config.json
// listed ("default" alone for a single template), sorted.
func (t *Template) TemplateNames() []string {
	names := make([]string, 0, len(t.named))
	for n := range t.named {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// DecodeMessages decodes a JSON array of messages. Unlike encoding/json into
// []Message, nested objects keep their key order (as Object) and numbers keep
// Python's distinction of 1 and 1.0 (as json.Number), so that tojson renders them as
// transformers does. DecodeConversation reads the same JSON and checks the fields
// templates read.
func DecodeMessages(data []byte) ([]Message, error) {
	v, err := DecodeValue(data)
	if errors.Is(err, errTrailing) {
		return nil, errors.New("chat: trailing data after the messages array")
	}
	if err != nil {
		return nil, err
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, errors.New("chat: messages must be a JSON array")
	}
	out := make([]Message, len(arr))
	for i, m := range arr {
		o, ok := m.(Object)
		if !ok {
			return nil, fmt.Errorf("chat: message %d is not a JSON object", i)
		}
		out[i] = o.Values
	}
	return out, nil
}

// errTrailing is a second JSON value after the first.
var errTrailing = errors.New("more than one JSON value")

// DecodeValue decodes one JSON value (a tools list, say) as DecodeMessages decodes
// messages: objects as Object, numbers as json.Number, kept as written. Invalid JSON is
// an error wrapping a *json.SyntaxError whose Offset is, as json.Unmarshal's, just past
// the offending byte.
func DecodeValue(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeOrdered(dec)
	if err != nil {
		// The streaming decoder's offsets are relative to the value it was reading for
		// some errors; json.Unmarshal's are into data.
		var se *json.SyntaxError
		if errors.As(json.Unmarshal(data, new(json.RawMessage)), &se) {
			err = se
		}
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errTrailing
	}
	return v, nil
}

// decodeOrdered decodes the decoder's next value: objects as Object (keys in the
// file's order; a repeated key keeps its last value and first place, as Python's json),
// numbers as the decoder gives them.
func decodeOrdered(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := decodeOrdered(dec)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			_, err := dec.Token()
			return arr, err
		case '{':
			o := Object{Values: map[string]any{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				v, err := decodeOrdered(dec)
				if err != nil {
					return nil, err
				}
				if _, dup := o.Values[k]; !dup {
					o.Keys = append(o.Keys, k)
				}
				o.Values[k] = v
			}
			_, err := dec.Token()
			return o, err
		}
	}
	return tok, nil
}
