// Package chatcli is what the commands that render chat templates (cmd/tokenize,
// cmd/generate, cmd/train) read from their command lines alike: the --template-kwarg
// and --chat-date flags and a --messages file.
package chatcli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gotrain/gotrain/internal/jsonpos"
	"github.com/gotrain/gotrain/tokenizer/chat"

	"github.com/gotrain/gotrain/internal/fsutil"
)

// Kwargs is the repeatable --template-kwarg KEY=JSON flag: chat template variables by
// name (chat.Options.Vars), each value decoded as chat.DecodeValue decodes JSON
// (objects keep their order, 1.0 stays a float), as Python's json.loads gives it to
// apply_chat_template.
type Kwargs map[string]any

func (k *Kwargs) String() string {
	if k == nil || *k == nil {
		return ""
	}
	b, _ := json.Marshal(*k)
	return string(b)
}

// Set adds KEY=JSON.
func (k *Kwargs) Set(v string) error {
	key, val, ok := strings.Cut(v, "=")
	if !ok || key == "" {
		return fmt.Errorf("want KEY=JSON, got %q", v)
	}
	x, err := chat.DecodeValue([]byte(val))
	if err != nil {
		return fmt.Errorf("the value of %s is not JSON (a string needs quotes: %s='\"...\"'): %v", key, key, err)
	}
	if *k == nil {
		*k = Kwargs{}
	}
	(*k)[key] = x
	return nil
}

// UnmarshalJSON reads the variables as Set reads each value, so that a run resumed
// from its recorded config renders what the original run rendered.
func (k *Kwargs) UnmarshalJSON(b []byte) error {
	v, err := chat.DecodeValue(b)
	if err != nil {
		return err
	}
	switch v := v.(type) {
	case nil:
		*k = nil
	case chat.Object:
		*k = Kwargs(v.Values)
	default:
		return fmt.Errorf("template kwargs must be a JSON object, not %s", b)
	}
	return nil
}

// Date reads a --chat-date, YYYY-MM-DD in local time: the date a template's
// strftime_now sees. "" is now.
func Date(s string) (time.Time, error) {
	if s == "" {
		return time.Now(), nil
	}
	d, err := time.ParseInLocation("2006-01-02", s, time.Local)
	if err != nil {
		return time.Time{}, fmt.Errorf("want YYYY-MM-DD, got %q", s)
	}
	return d, nil
}

// MaxMessagesBytes bounds a --messages file, which is read into memory.
const MaxMessagesBytes = 64 << 20

// ReadMessages reads and decodes the --messages file at path (a regular file of at most
// MaxMessagesBytes, opened without blocking: fsutil.ReadFile), as DecodeMessages.
func ReadMessages(path string) (msgs []chat.Message, tools []any, err error) {
	data, err := fsutil.ReadFile(path, MaxMessagesBytes)
	if err != nil {
		return nil, nil, err
	}
	return DecodeMessages(path, data)
}

// DecodeMessages decodes the conversation read from the --messages file name, as
// chat.DecodeConversation (after a UTF-8 byte order mark). Its errors start with name,
// and for invalid JSON with name:LINE:COL.
func DecodeMessages(name string, data []byte) (msgs []chat.Message, tools []any, err error) {
	data = bytes.TrimPrefix(data, []byte("\uFEFF"))
	msgs, tools, err = chat.DecodeConversation(data)
	var se *json.SyntaxError
	switch {
	case err == nil:
		return msgs, tools, nil
	case errors.As(err, &se):
		line, col := jsonpos.LineCol(data, se.Offset-1)
		return nil, nil, fmt.Errorf("%s:%d:%d: %w", name, line, col, err)
	}
	return nil, nil, fmt.Errorf("%s: %w", name, err)
}
