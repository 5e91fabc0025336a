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

	"github.com/gotrain/gotrain/internal/chatcli"
	"github.com/gotrain/gotrain/internal/fsutil"
	"github.com/gotrain/gotrain/tokenizer"
	"github.com/gotrain/gotrain/tokenizer/chat"
	"github.com/gotrain/gotrain/torch/data"
)

// templateKwargs is the repeatable --template-kwarg flag and the config's
// template_kwargs: chat template variables by name, their values decoded from JSON as
// a resumed run decodes them from its record.
type templateKwargs = chatcli.Kwargs

// parseChatDate reads the config's chat_date, YYYY-MM-DD ("" is today).
func parseChatDate(s string) (time.Time, error) {
	d, err := chatcli.Date(s)
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
	// What is not a regular file (a FIFO, opened without blocking) is left to the
	// dataset, which refuses it by name.
	f, _, err := fsutil.Open(path)
	if err != nil {
		return false, nil
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
		Template: chat.Options{Now: now, Vars: c.TemplateKwargs}})
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

// maxTokenizerFile bounds each copied file (a tokenizer.json of a 256k vocabulary is
// about 35 MB).
const maxTokenizerFile = 256 << 20

// copyTokenizerFiles copies the tokenizer files and the chat template that exist in
// from into dir.
func copyTokenizerFiles(from, dir string) error {
	for _, name := range tokenizerFiles {
		b, err := fsutil.ReadFileInDir(from, name, maxTokenizerFile)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := fsutil.WriteFileInDir(dir, name, b); err != nil {
			return err
		}
	}
	return nil
}
