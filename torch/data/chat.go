package data

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/gotrain/gotrain/tokenizer"
	"github.com/gotrain/gotrain/tokenizer/chat"
)

// ChatOptions describe how a conversation file becomes language-model samples.
type ChatOptions struct {
	// BlockSize is the most tokens a sample may hold. A longer conversation keeps its
	// leading turns up to the end of the last assistant turn that fits; one whose first
	// assistant turn does not fit is dropped (ChatDataset.Cut and Dropped count them).
	BlockSize int
	// Template are the rendering's options. AddGenerationPrompt must be false (a
	// training sample ends with the assistant's turn). A record's own "tools" replace
	// Template.Tools for that record. Pin Template.Now (the date the template's
	// strftime_now sees) so that a resumed run renders the same text.
	Template chat.Options
	// MaxLineBytes bounds one line of the file (default 64 MiB); MaxFileBytes the file
	// (default 8 GiB).
	MaxLineBytes int
	MaxFileBytes int64
}

// ChatDataset is a conversation data set read from a JSONL file, one
// {"messages": [...], "tools": [...]} record a line, rendered with the model's chat
// template. Each sample has int64 fields LMInputIDs and LMLabels of the same length: the
// labels are the ids of the assistant turns' tokens (content, tool calls, the
// template's end-of-turn token) and IgnoreIndex elsewhere, so a causal-LM loss (which
// shifts the labels by one) learns exactly the assistant turns. Pad batches with
// LMPad.
type ChatDataset struct {
	// Conversations is the number of records in the file.
	Conversations int
	// Cut is the number of conversations that lost trailing turns to the block size,
	// Dropped the number left out because their first assistant turn did not fit.
	Cut, Dropped int

	samples   [][]int64 // ids
	labels    [][]int64
	blockSize int
}

// chatRecord is one line of a conversation file.
type chatRecord struct {
	line  int
	msgs  []chat.Message
	tools []any // nil: the options' tools
}

// NewChatDataset reads path, a JSONL file of conversations, renders each with tmpl and
// encodes it with tok (chat.Encode: no special tokens added beyond the template's), all
// here and on every CPU. An error names the file and line, and no dataset is returned:
// a line chat.DecodeConversation refuses (invalid JSON, not {"messages": [...]}, an
// empty conversation, an unknown role, a field of the wrong type), a conversation
// without an assistant turn, or one the template refuses (its raise_exception message
// is in the error).
func NewChatDataset(path string, tok *tokenizer.Tokenizer, tmpl *chat.Template, o ChatOptions) (*ChatDataset, error) {
	if tok == nil || tmpl == nil {
		return nil, errors.New("data: NewChatDataset needs a tokenizer and a chat template")
	}
	if o.BlockSize < 2 {
		return nil, fmt.Errorf("data: block size %d: a language-model sample needs at least 2 tokens", o.BlockSize)
	}
	if o.BlockSize > 1<<20 {
		return nil, fmt.Errorf("data: block size %d is more than %d", o.BlockSize, 1<<20)
	}
	if o.Template.AddGenerationPrompt {
		return nil, errors.New("data: a training conversation is rendered without the generation prompt (ChatOptions.Template.AddGenerationPrompt is true)")
	}
	recs, err := readChatFile(path, o)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	type result struct {
		ids  []int64
		mask []uint8
		err  error
	}
	results := make([]result, len(recs))
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				opts := o.Template
				if recs[i].tools != nil {
					opts.Tools = recs[i].tools
				}
				ids, mask, _, err := chat.Encode(tok, tmpl, recs[i].msgs, opts)
				results[i] = result{ids, mask, err}
			}
		}()
	}
	for i := range recs {
		next <- i
	}
	close(next)
	wg.Wait()
	d := &ChatDataset{Conversations: len(recs), blockSize: o.BlockSize}
	for i, r := range results {
		if r.err != nil {
			return nil, fmt.Errorf("data: %s:%d: the chat template refuses the conversation: %w", path, recs[i].line, r.err)
		}
		if !hasAssistant(recs[i].msgs) {
			return nil, fmt.Errorf("data: %s:%d: the conversation has no assistant turn: there is nothing to learn from this line", path, recs[i].line)
		}
		n := chatCut(r.mask, o.BlockSize)
		switch {
		case n == 0 && !containsOne(r.mask):
			return nil, fmt.Errorf("data: %s:%d: the chat template's rendering marks no assistant text to learn (%d tokens)", path, recs[i].line, len(r.ids))
		case n == 0:
			d.Dropped++
			continue
		case n < len(r.ids):
			d.Cut++
		}
		ids := r.ids[:n:n]
		labels := make([]int64, n)
		for j := range labels {
			labels[j] = IgnoreIndex
			if r.mask[j] == 1 {
				labels[j] = ids[j]
			}
		}
		d.samples = append(d.samples, ids)
		d.labels = append(d.labels, labels)
	}
	if len(d.samples) == 0 {
		return nil, fmt.Errorf("data: %s: all %d conversations were dropped: none has a first assistant turn within the block size of %d tokens (raise --block-size)", path, d.Conversations, o.BlockSize)
	}
	return d, nil
}

// chatCut is how many leading tokens of a conversation a sample keeps: all of them when
// they fit in blockSize, else up to the end of the last assistant run (a maximal run of
// mask 1) that ends within blockSize, so whole leading turns are kept; 0 when the first
// run does not end within it.
func chatCut(mask []uint8, blockSize int) int {
	if len(mask) <= blockSize {
		if containsOne(mask) {
			return len(mask)
		}
		return 0
	}
	cut := 0
	for j := 1; j <= blockSize; j++ {
		if mask[j-1] == 1 && (j == len(mask) || mask[j] == 0) {
			cut = j
		}
	}
	return cut
}

func containsOne(mask []uint8) bool {
	for _, m := range mask {
		if m == 1 {
			return true
		}
	}
	return false
}

func hasAssistant(msgs []chat.Message) bool {
	for _, m := range msgs {
		if m["role"] == "assistant" {
			return true
		}
	}
	return false
}

// Summary is one line saying what truncation did.
func (d *ChatDataset) Summary() string {
	return fmt.Sprintf("%d conversations: %d kept whole, %d cut to the block size of %d tokens (trailing turns dropped), %d dropped (first assistant turn longer than the block)",
		d.Conversations, d.Conversations-d.Cut-d.Dropped, d.Cut, d.blockSize, d.Dropped)
}

// Len returns the number of samples (conversations less the dropped ones).
func (d *ChatDataset) Len() int { return len(d.samples) }

// Get writes sample i: LMInputIDs and LMLabels.
func (d *ChatDataset) Get(i int, s *Sample) error {
	ids := d.samples[i]
	copy(SetValues[int64](s, LMInputIDs, int64(len(ids))), ids)
	copy(SetValues[int64](s, LMLabels, int64(len(ids))), d.labels[i])
	return nil
}

// readChatFile reads the records of a conversation file, skipping blank lines.
func readChatFile(path string, o ChatOptions) ([]chatRecord, error) {
	f, size, err := OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	maxFile := o.MaxFileBytes
	if maxFile <= 0 {
		maxFile = defaultMaxLMFile
	}
	if size > maxFile {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d a conversation file may have here", path, size, maxFile)
	}
	maxLine := o.MaxLineBytes
	if maxLine <= 0 {
		maxLine = defaultMaxLineBytes
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	var out []chatRecord
	n := 0
	for sc.Scan() {
		n++
		raw := bytes.TrimSuffix(sc.Bytes(), []byte("\r"))
		if n == 1 {
			raw = bytes.TrimPrefix(raw, []byte("\uFEFF"))
		}
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		msgs, tools, err := chat.DecodeConversation(raw)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, chatRecord{line: n, msgs: msgs, tools: tools})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s: line %d is longer than %d bytes", path, n+1, maxLine)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no conversation", path)
	}
	return out, nil
}
