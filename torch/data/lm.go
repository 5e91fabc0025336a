package data

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
)

// Encoder turns text into token ids: a model's tokenizer (tokenizer.Tokenizer's Encode
// has this signature). Encode must be safe to call from several goroutines.
type Encoder interface {
	Encode(text string, addSpecialTokens bool) []int64
}

// tryEncoder is an Encoder that reports a text it cannot encode as an error rather than
// a panic (tokenizer.Tokenizer's TryEncode: a text past the tokenizer's budgets, from a
// tokenizer.json built to grow texts without bound). The dataset uses it when enc has it.
type tryEncoder interface {
	TryEncode(text string, addSpecialTokens bool) ([]int64, error)
}

func encodeText(enc Encoder, text string, addSpecialTokens bool) ([]int64, error) {
	if te, ok := enc.(tryEncoder); ok {
		return te.TryEncode(text, addSpecialTokens)
	}
	return enc.Encode(text, addSpecialTokens), nil
}

// IgnoreIndex is the label that the language-model loss skips (PyTorch's
// cross-entropy ignore_index, transformers' -100): prompt tokens and padding.
const IgnoreIndex = -100

// LMPositionIDs is the field of each token's position in its document, int64, that
// packed windows carry with LMOptions.SeparateDocuments: transformers' position_ids.
const LMPositionIDs = "position_ids"

// LMOptions describe how a text or JSONL file becomes language-model samples.
type LMOptions struct {
	// BlockSize is the number of tokens of a packed window, and the most a
	// prompt/completion sample may hold.
	BlockSize int
	// EOS is the end-of-sequence token put after each document when packing, and after
	// each completion.
	EOS int64
	// SeparateDocuments keeps the documents packed into a window apart, as TRL's
	// padding-free packing and transformers' DataCollatorWithFlattening do: each window
	// carries LMPositionIDs, which restart at 0 at each document and at the window's
	// start, and the label of each document's first token is IgnoreIndex (the previous
	// document's last token does not learn to predict it). A decoder given these
	// positions (models.DecoderInput.PositionIDs) attends within each document only,
	// so a window's loss is that of its documents run one by one.
	SeparateDocuments bool
	// MaxLineBytes bounds one line of the file (default 64 MiB); MaxFileBytes the file
	// (default 8 GiB).
	MaxLineBytes int
	MaxFileBytes int64
	// VocabSize, when positive, is the model's vocabulary: EOS and every token id the
	// tokenizer gives must be below it, or NewLMDataset (Get, for a pair) returns an
	// error naming the file and line — a tokenizer that does not belong to the model —
	// where the model would fail at its first batch with an index error.
	VocabSize int64
}

// LM data are read from a file of at most this size and lines of at most this length
// unless LMOptions say otherwise.
const (
	defaultMaxLineBytes = 64 << 20
	defaultMaxLMFile    = 8 << 30
)

// LMKind is what a language-model file holds.
type LMKind int

const (
	// Documents are plain text (a .txt file, one document a line) or JSONL lines
	// {"text": ...}: packed into windows of BlockSize tokens.
	Documents LMKind = iota
	// PromptCompletion are JSONL lines {"prompt": ..., "completion": ...}: one padded
	// sample each, with the loss on the completion only.
	PromptCompletion
)

// lmLine is one record of a language-model file with where it came from.
type lmLine struct {
	line                     int
	text, prompt, completion string
}

// readLMFile reads path (.jsonl or .json: one JSON object a line; anything else: one
// document a line), skipping blank lines, and says which kind of records it holds; a
// malformed line, a line of the other kind or an empty completion is an error naming
// the file and line.
func readLMFile(path string, o LMOptions) ([]lmLine, LMKind, error) {
	jsonl := strings.EqualFold(filepath.Ext(path), ".jsonl") || strings.EqualFold(filepath.Ext(path), ".json")
	var out []lmLine
	kind := LMKind(-1)
	err := scanLines(path, "text", o.MaxFileBytes, o.MaxLineBytes, func(n int, raw []byte) error {
		rec, k := lmLine{text: string(raw)}, Documents
		if jsonl {
			var err error
			if rec, k, err = parseLMRecord(raw); err != nil {
				return fmt.Errorf("%s:%d: %w", path, n, err)
			}
			if kind >= 0 && k != kind {
				return fmt.Errorf("%s:%d: a %s record in a file of %s records", path, n, kindName(k), kindName(kind))
			}
		}
		kind, rec.line = k, n
		out = append(out, rec)
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	if len(out) == 0 {
		return nil, 0, fmt.Errorf("%s holds no text", path)
	}
	return out, kind, nil
}

// scanLines calls fn with each line of the regular file at path that is not blank, and
// its number, without the line's "\r" and the file's byte order mark. The file may hold
// maxFile bytes (default 8 GiB; what names its content in the error), a line maxLine
// (default 64 MiB).
func scanLines(path, what string, maxFile int64, maxLine int, fn func(n int, raw []byte) error) error {
	f, size, err := OpenRegular(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if maxFile <= 0 {
		maxFile = defaultMaxLMFile
	}
	if size > maxFile {
		return fmt.Errorf("%s is %d bytes, more than the %d a %s file may have here", path, size, maxFile, what)
	}
	if maxLine <= 0 {
		maxLine = defaultMaxLineBytes
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
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
		if err := fn(n, raw); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("%s: line %d is longer than %d bytes", path, n+1, maxLine)
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func kindName(k LMKind) string {
	if k == PromptCompletion {
		return `{"prompt", "completion"}`
	}
	return `{"text"}`
}

// parseLMRecord reads one JSONL line: {"text": s} or {"prompt": s, "completion": s}.
func parseLMRecord(raw []byte) (lmLine, LMKind, error) {
	var r struct {
		Text       *string `json:"text"`
		Prompt     *string `json:"prompt"`
		Completion *string `json:"completion"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&r); err != nil {
		return lmLine{}, 0, fmt.Errorf("not a JSON object: %v", err)
	}
	if dec.More() {
		return lmLine{}, 0, errors.New("more than one JSON value on the line")
	}
	switch {
	case r.Text != nil && r.Prompt == nil && r.Completion == nil:
		return lmLine{text: *r.Text}, Documents, nil
	case r.Text == nil && r.Prompt != nil && r.Completion != nil:
		if *r.Completion == "" {
			return lmLine{}, 0, errors.New(`the completion is empty: there is nothing to learn from this line`)
		}
		return lmLine{prompt: *r.Prompt, completion: *r.Completion}, PromptCompletion, nil
	}
	return lmLine{}, 0, errors.New(`want {"text": "..."} or {"prompt": "...", "completion": "..."}`)
}

// LMDataset is a language-model data set read from a text or JSONL file: packed windows
// of documents, or prompt/completion pairs. Each sample has int64 fields LMInputIDs and
// LMLabels of the same length; a language model's loss shifts the labels by one.
type LMDataset struct {
	// Kind says which records the file held.
	Kind LMKind
	// windows are the packed token windows (Documents).
	windows [][]int64
	// starts are the offsets, in the joined token stream, of the windows (a multiple of
	// BlockSize) and docStarts those of the documents, in order (SeparateDocuments).
	starts, docStarts []int
	// pairs are the prompt/completion records, tokenized in Get (PromptCompletion).
	pairs []lmLine
	path  string
	enc   Encoder
	o     LMOptions
}

// NewLMDataset reads path with the model's tokenizer enc. Documents ({"text"} lines, or
// a plain text file's lines) are tokenized here, in parallel, joined with EOS after
// each, and cut into windows of BlockSize tokens (a last partial window is dropped, as
// transformers' run_clm does). Prompt/completion pairs are tokenized in Get, so in the
// loader's workers: prompt (with the tokenizer's special tokens) + completion + EOS,
// with the prompt's labels IgnoreIndex; a pair longer than BlockSize keeps its first
// BlockSize tokens, and a prompt that fills the block by itself is an error naming the
// line (its completion would not be learned).
func NewLMDataset(path string, enc Encoder, o LMOptions) (*LMDataset, error) {
	if o.BlockSize < 2 {
		return nil, fmt.Errorf("data: block size %d: a language-model sample needs at least 2 tokens", o.BlockSize)
	}
	if o.BlockSize > 1<<20 {
		return nil, fmt.Errorf("data: block size %d is more than %d", o.BlockSize, 1<<20)
	}
	if o.VocabSize > 0 && (o.EOS < 0 || o.EOS >= o.VocabSize) {
		return nil, fmt.Errorf("data: the end-of-sequence id %d is outside the model's vocabulary of %d", o.EOS, o.VocabSize)
	}
	lines, kind, err := readLMFile(path, o)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	d := &LMDataset{Kind: kind, path: path, enc: enc, o: o}
	if kind == PromptCompletion {
		for _, l := range lines {
			prompt, err := encodeText(enc, l.prompt, true)
			if err != nil {
				return nil, fmt.Errorf("data: %s:%d: the prompt: %w", path, l.line, err)
			}
			if err := d.inVocab(prompt, l.line); err != nil {
				return nil, err
			}
			if n := len(prompt); n >= o.BlockSize {
				return nil, fmt.Errorf("data: %s:%d: the prompt is %d tokens, and the block size is %d: no room for the completion (raise --block-size or shorten the prompt)",
					path, l.line, n, o.BlockSize)
			}
		}
		d.pairs = lines
		return d, nil
	}
	ids, docStarts, err := encodeAll(lines, enc, o.EOS)
	if err != nil {
		return nil, fmt.Errorf("data: %s:%w", path, err)
	}
	if o.VocabSize > 0 {
		for i, start := range docStarts {
			end := len(ids)
			if i+1 < len(docStarts) {
				end = docStarts[i+1]
			}
			if err := d.inVocab(ids[start:end], lines[i].line); err != nil {
				return nil, err
			}
		}
	}
	for start := 0; start+o.BlockSize <= len(ids); start += o.BlockSize {
		d.windows = append(d.windows, ids[start:start+o.BlockSize])
		d.starts = append(d.starts, start)
	}
	if o.SeparateDocuments {
		d.docStarts = docStarts
	}
	if len(d.windows) == 0 {
		return nil, fmt.Errorf("data: %s: %d tokens make no window of %d (lower --block-size or add text)", path, len(ids), o.BlockSize)
	}
	return d, nil
}

// encodeAll tokenizes the documents on every CPU and joins them in order, EOS after
// each; starts are the documents' offsets in ids. The error is the first line's that
// the tokenizer refuses, as "LINE: ...".
func encodeAll(lines []lmLine, enc Encoder, eos int64) (ids []int64, starts []int, err error) {
	parts := make([][]int64, len(lines))
	errs := make([]error, len(lines))
	parallel(len(lines), func(i int) {
		p, err := encodeText(enc, lines[i].text, true)
		parts[i], errs[i] = append(p, eos), err
	})
	for i, err := range errs {
		if err != nil {
			return nil, nil, fmt.Errorf("%d: %w", lines[i].line, err)
		}
	}
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	ids = make([]int64, 0, n)
	starts = make([]int, 0, len(parts))
	for _, p := range parts {
		starts = append(starts, len(ids))
		ids = append(ids, p...)
	}
	return ids, starts, nil
}

// parallel calls fn(i) for every i in [0, n) on every CPU.
func parallel(n int, fn func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				fn(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// Len returns the number of samples.
func (d *LMDataset) Len() int {
	if d.Kind == PromptCompletion {
		return len(d.pairs)
	}
	return len(d.windows)
}

// Get writes sample i: LMInputIDs and LMLabels (a window's labels are its ids), and
// LMPositionIDs with SeparateDocuments.
func (d *LMDataset) Get(i int, s *Sample) error {
	var ids, prompt []int64 // a pair's prompt tokens are labelled IgnoreIndex
	if d.Kind == Documents {
		ids = d.windows[i]
	} else {
		p := d.pairs[i]
		var err error
		if prompt, err = encodeText(d.enc, p.prompt, true); err != nil {
			return fmt.Errorf("data: %s:%d: the prompt: %w", d.path, p.line, err)
		}
		completion, err := encodeText(d.enc, p.completion, false)
		if err != nil {
			return fmt.Errorf("data: %s:%d: the completion: %w", d.path, p.line, err)
		}
		ids = append(append(prompt, completion...), d.o.EOS)
		if err := d.inVocab(ids, p.line); err != nil {
			return err
		}
		ids = ids[:min(len(ids), d.o.BlockSize)]
	}
	copy(SetValues[int64](s, LMInputIDs, int64(len(ids))), ids)
	labels := SetValues[int64](s, LMLabels, int64(len(ids)))
	copy(labels, ids)
	for j := range min(len(prompt), len(labels)) {
		labels[j] = IgnoreIndex
	}
	if d.Kind == Documents && d.o.SeparateDocuments {
		d.separate(i, labels, SetValues[int64](s, LMPositionIDs, int64(len(ids))))
	}
	return nil
}

// inVocab checks the ids of the file's line against LMOptions.VocabSize.
func (d *LMDataset) inVocab(ids []int64, line int) error {
	if d.o.VocabSize <= 0 {
		return nil
	}
	for _, id := range ids {
		if id < 0 || id >= d.o.VocabSize {
			return fmt.Errorf("data: %s:%d: the tokenizer gives token id %d, outside the model's vocabulary of %d (config.json vocab_size): the tokenizer does not belong to the model",
				d.path, line, id, d.o.VocabSize)
		}
	}
	return nil
}

// separate writes window i's positions (0 at each document's start and at the
// window's) and sets the labels of the documents' first tokens to IgnoreIndex.
func (d *LMDataset) separate(i int, labels, pos []int64) {
	start := d.starts[i]
	// The first document that starts after the window's first token.
	next, _ := slices.BinarySearch(d.docStarts, start+1)
	p := int64(0)
	for j := range pos {
		if next < len(d.docStarts) && d.docStarts[next] == start+j {
			p = 0
			labels[j] = IgnoreIndex
			next++
		}
		pos[j] = p
		p++
	}
}

// LMPad is the LoaderOptions.Pad of an LMDataset's or a ChatDataset's batches: input
// ids padded with pad (the mask MaskName(LMInputIDs) marks the real tokens, the
// attention mask), labels with IgnoreIndex, so padding is never learned, and the
// position ids of packed windows of different lengths (packed conversations) with 0, so
// each padding token is a sequence of its own that no real token attends to.
func LMPad(pad int64) map[string]float64 {
	return map[string]float64{LMInputIDs: float64(pad), LMLabels: IgnoreIndex, LMPositionIDs: 0}
}
