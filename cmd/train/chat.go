package main

// Conversation data ({"messages"} JSONL) for --model DIR: rendered with the model's
// chat template, the loss on the assistant turns (data.NewChatDataset).

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gotrain/gotrain/internal/fsutil"
	"github.com/gotrain/gotrain/tokenizer"
	"github.com/gotrain/gotrain/tokenizer/chat"
	"github.com/gotrain/gotrain/torch/data"
)

// templateKwargs is the repeatable --template-kwarg flag and the config's
// template_kwargs: chat template variables by name, their values decoded from JSON.
type templateKwargs map[string]any

func (k *templateKwargs) String() string {
	if k == nil || *k == nil {
		return ""
	}
	b, _ := json.Marshal(*k)
	return string(b)
}

// Set adds KEY=JSON.
func (k *templateKwargs) Set(v string) error {
	key, val, ok := strings.Cut(v, "=")
	if !ok || key == "" {
		return fmt.Errorf("want KEY=JSON, got %q", v)
	}
	var x any
	if err := json.Unmarshal([]byte(val), &x); err != nil {
		return fmt.Errorf("the value of %s is not JSON (a string needs quotes: %s='\"...\"'): %v", key, key, err)
	}
	if *k == nil {
		*k = templateKwargs{}
	}
	(*k)[key] = x
	return nil
}

// vars returns the variables as the template sees them: JSON numbers that are integers
// become int64 (Python's int), as the run config decodes every number as float64.
func (k templateKwargs) vars() map[string]any {
	if len(k) == 0 {
		return nil
	}
	out := make(map[string]any, len(k))
	for name, v := range k {
		if f, ok := v.(float64); ok && f == float64(int64(f)) {
			v = int64(f)
		}
		out[name] = v
	}
	return out
}

// parseChatDate reads a chat date, YYYY-MM-DD; "" is none.
func parseChatDate(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	d, err := time.ParseInLocation("2006-01-02", s, time.Local)
	if err != nil {
		return time.Time{}, fmt.Errorf("must be a date YYYY-MM-DD, got %q", s)
	}
	return d, nil
}

// maxSniffLine bounds the line isChatData reads.
const maxSniffLine = 64 << 20

// isChatData reports whether path is a JSONL file of conversations: its first
// non-blank line an object with "messages".
func isChatData(path string) (bool, error) {
	if !strings.EqualFold(filepath.Ext(path), ".jsonl") {
		return false, nil
	}
	// Stat does not open: a FIFO is left to the dataset, which refuses it.
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
		return false, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("--data: %w", err)
	}
	defer f.Close()
	r := bufio.NewReader(io.LimitReader(f, maxSniffLine))
	for {
		line, err := r.ReadBytes('\n')
		line = bytes.TrimSpace(bytes.TrimPrefix(line, []byte("\uFEFF")))
		if len(line) > 0 {
			var rec map[string]json.RawMessage
			if json.Unmarshal(line, &rec) != nil {
				return false, nil // NewLMDataset names the line
			}
			_, ok := rec["messages"]
			return ok, nil
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return false, nil
			}
			return false, fmt.Errorf("--data: %w", err)
		}
	}
}

// chatDataset renders the conversations of c.DataDir with the model directory's chat
// template, packed into windows of block tokens with --packing (each conversation whole,
// positions restarting and attention within it: data.ChatOptions.Packing). It pins
// c.ChatDate to today when it is unset, so that the run records the date (c is what the
// run records).
func chatDataset(c *Config, tok *tokenizer.Tokenizer, block int, out io.Writer) (*data.ChatDataset, error) {
	tmpl, err := chat.LoadDir(c.Model)
	if err != nil {
		return nil, fmt.Errorf("--data %s holds conversations ({\"messages\"}), which are rendered with the model's chat template: %w", c.DataDir, err)
	}
	if c.ChatDate == "" {
		c.ChatDate = time.Now().Format("2006-01-02")
	}
	now, err := parseChatDate(c.ChatDate)
	if err != nil {
		return nil, fmt.Errorf("--chat-date %w", err)
	}
	ds, err := data.NewChatDataset(c.DataDir, tok, tmpl, data.ChatOptions{BlockSize: block, Packing: c.Packing,
		Template: chat.Options{Now: now, Vars: c.TemplateKwargs.vars()}})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "chat data: %s (chat date %s)\n", ds.Summary(), c.ChatDate)
	return ds, nil
}

// heldOutPrompt is the prompt of the per-evaluation sample: the first validation
// sample's tokens before its first learned one (for a conversation, the rendering up to
// the first assistant turn's header, which is what add_generation_prompt appends to the
// turns before it; for a prompt/completion pair, the prompt), or for plain text, whose
// every token is learned, its first 8 tokens. stop is the token that ends the first
// learned run when it is a special token (a chat template's end-of-turn token, which
// the loss covers), else -1.
func heldOutPrompt(val data.Dataset, tok *tokenizer.Tokenizer) (prompt []int64, stop int64) {
	var s data.Sample
	if val == nil || val.Len() == 0 || val.Get(0, &s) != nil {
		return nil, -1
	}
	ids := data.Values[int64](s.MustField(data.LMInputIDs))
	labels := data.Values[int64](s.MustField(data.LMLabels))
	first := 0
	for first < len(labels) && labels[first] == data.IgnoreIndex {
		first++
	}
	if first == 0 || first == len(labels) {
		return append([]int64{}, ids[:min(8, len(ids))]...), -1
	}
	end := first
	for end < len(labels) && labels[end] != data.IgnoreIndex {
		end++
	}
	stop = -1
	if last := ids[end-1]; tok.IsSpecial(last) {
		stop = last
	}
	return append([]int64{}, ids[:first]...), stop
}

// tokenizerFiles are the files of a model directory that a saved fine-tune carries with
// it, so that the directory is complete (transformers' AutoTokenizer and the chat
// template).
var tokenizerFiles = []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
	"generation_config.json", "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json"}

// copyTokenizerFiles copies the tokenizer files and the chat template that exist in
// from into dir.
func copyTokenizerFiles(from, dir string) error {
	for _, name := range tokenizerFiles {
		b, err := os.ReadFile(filepath.Join(from, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := fsutil.WriteFileAtomic(filepath.Join(dir, name), b); err != nil {
			return err
		}
	}
	return nil
}
