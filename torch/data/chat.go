package data

import (
	"errors"
	"fmt"
	"slices"

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
	// Packing packs whole conversations into windows of at most BlockSize tokens
	// instead of one conversation a sample, as TRL's SFTTrainer does with packing=True
	// and its "bfd" strategy. Each window carries LMPositionIDs, restarting at 0 at
	// each conversation, and the label of each conversation's first token is
	// IgnoreIndex, as packed text has with LMOptions.SeparateDocuments: a decoder given
	// these positions attends within each conversation only, so a window's loss is
	// that of its conversations run one by one. A conversation is never split across
	// windows (truncation to BlockSize applies first, as without packing).
	Packing bool
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
// LMPad. With ChatOptions.Packing a sample is a window of several conversations and
// carries LMPositionIDs too.
type ChatDataset struct {
	// Conversations is the number of records in the file.
	Conversations int
	// Cut is the number of conversations that lost trailing turns to the block size,
	// Dropped the number left out because their first assistant turn did not fit.
	Cut, Dropped int
	// Windows is the number of packed windows (ChatOptions.Packing), 0 without
	// packing; Tokens is the number of tokens the samples hold.
	Windows, Tokens int

	samples   [][]int64 // ids
	labels    [][]int64
	positions [][]int64 // packed windows' position ids; nil without packing
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
	parallel(len(recs), func(i int) {
		opts := o.Template
		if recs[i].tools != nil {
			opts.Tools = recs[i].tools
		}
		ids, mask, _, err := chat.Encode(tok, tmpl, recs[i].msgs, opts)
		results[i] = result{ids, mask, err}
	})
	d := &ChatDataset{Conversations: len(recs), blockSize: o.BlockSize}
	for i, r := range results {
		if r.err != nil {
			return nil, fmt.Errorf("data: %s:%d: the chat template refuses the conversation: %w", path, recs[i].line, r.err)
		}
		if !slices.ContainsFunc(recs[i].msgs, func(m chat.Message) bool { return m["role"] == "assistant" }) {
			return nil, fmt.Errorf("data: %s:%d: the conversation has no assistant turn: there is nothing to learn from this line", path, recs[i].line)
		}
		n := chatCut(r.mask, o.BlockSize)
		switch {
		case n == 0 && !slices.Contains(r.mask, 1):
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
		d.Tokens += n
	}
	if len(d.samples) == 0 {
		return nil, fmt.Errorf("data: %s: all %d conversations were dropped: none has a first assistant turn within the block size of %d tokens (raise --block-size)", path, d.Conversations, o.BlockSize)
	}
	if o.Packing {
		d.pack()
	}
	return d, nil
}

// pack replaces the conversations by windows of them (ChatOptions.Packing): ids and
// labels concatenated, the first label of each conversation IgnoreIndex, positions
// restarting at each. The windows are filled best-fit decreasing, as TRL's "bfd"
// packing: the longest conversation first, each into the window it leaves the least
// room in. A conversation is never split, so filling in file order (next-fit) would
// close a window whenever the next conversation does not fit and leave its tail as
// padding; best-fit decreasing leaves the least padding of the simple greedy orders
// and is deterministic. The file order is lost, which costs nothing: the loader
// shuffles, and each conversation's loss does not depend on its neighbours. Within a
// window conversations are kept in file order.
func (d *ChatDataset) pack() {
	lengths := make([]int, len(d.samples))
	for i, s := range d.samples {
		lengths[i] = len(s)
	}
	bins := packBestFitDecreasing(lengths, d.blockSize)
	ids := make([][]int64, len(bins))
	labels := make([][]int64, len(bins))
	positions := make([][]int64, len(bins))
	for w, members := range bins {
		n := 0
		for _, i := range members {
			n += lengths[i]
		}
		ids[w], labels[w], positions[w] = make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n)
		for _, i := range members {
			start := len(labels[w])
			ids[w] = append(ids[w], d.samples[i]...)
			labels[w] = append(labels[w], d.labels[i]...)
			// The previous conversation's last token does not learn to predict this one's
			// first (the loss reads label j at position j-1).
			labels[w][start] = IgnoreIndex
			for p := range lengths[i] {
				positions[w] = append(positions[w], int64(p))
			}
		}
	}
	d.samples, d.labels, d.positions, d.Windows = ids, labels, positions, len(bins)
}

// packBestFitDecreasing assigns items of the given lengths (each at most capacity) to
// bins of capacity: in order of decreasing length (ties in index order), each goes into
// the bin whose room left is the smallest that holds it, or a new bin. It returns the
// bins in the order they were opened, each's items in increasing index order. A tree
// over the room left (0..capacity) finds the bin in O(log capacity).
func packBestFitDecreasing(lengths []int, capacity int) [][]int {
	order := arange(len(lengths))
	slices.SortStableFunc(order, func(a, b int) int { return lengths[b] - lengths[a] })
	size := 1
	for size < capacity+1 {
		size *= 2
	}
	count := make([]int, 2*size) // bins with each room left, summed up the tree
	byRoom := make([][]int, capacity+1)
	add := func(room, delta int) {
		for n := size + room; n > 0; n /= 2 {
			count[n] += delta
		}
	}
	// first returns the smallest room >= need that some bin has, or -1.
	var first func(node, lo, hi, need int) int
	first = func(node, lo, hi, need int) int {
		if hi < need || count[node] == 0 {
			return -1
		}
		if lo == hi {
			return lo
		}
		mid := (lo + hi) / 2
		if r := first(2*node, lo, mid, need); r >= 0 {
			return r
		}
		return first(2*node+1, mid+1, hi, need)
	}
	var bins [][]int
	room := []int{}
	for _, i := range order {
		b := -1
		if r := first(1, 0, size-1, lengths[i]); r >= 0 {
			// The bin that came to this room first, for a stable result.
			b = byRoom[r][0]
			byRoom[r] = byRoom[r][1:]
			add(r, -1)
		} else {
			b = len(bins)
			bins = append(bins, nil)
			room = append(room, capacity)
		}
		bins[b] = append(bins[b], i)
		room[b] -= lengths[i]
		byRoom[room[b]] = append(byRoom[room[b]], b)
		add(room[b], 1)
	}
	for _, members := range bins {
		slices.Sort(members)
	}
	return bins
}

// chatCut is how many leading tokens of a conversation a sample keeps: all of them when
// they fit in blockSize, else up to the end of the last assistant run (a maximal run of
// mask 1) that ends within blockSize, so whole leading turns are kept; 0 when the first
// run does not end within it.
func chatCut(mask []uint8, blockSize int) int {
	if len(mask) <= blockSize {
		if slices.Contains(mask, 1) {
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

// Summary is one line saying what truncation (and packing) did.
func (d *ChatDataset) Summary() string {
	s := fmt.Sprintf("%d conversations: %d kept whole, %d cut to the block size of %d tokens (trailing turns dropped), %d dropped (first assistant turn longer than the block)",
		d.Conversations, d.Conversations-d.Cut-d.Dropped, d.Cut, d.blockSize, d.Dropped)
	if d.Windows > 0 {
		s += fmt.Sprintf("; packed into %d windows, %.1f%% filled", d.Windows, 100*float64(d.Tokens)/float64(d.Windows*d.blockSize))
	}
	return s
}

// Len returns the number of samples: conversations less the dropped ones, or packed
// windows.
func (d *ChatDataset) Len() int { return len(d.samples) }

// Get writes sample i: LMInputIDs and LMLabels, and LMPositionIDs for a packed window.
func (d *ChatDataset) Get(i int, s *Sample) error {
	ids := d.samples[i]
	copy(SetValues[int64](s, LMInputIDs, int64(len(ids))), ids)
	copy(SetValues[int64](s, LMLabels, int64(len(ids))), d.labels[i])
	if d.positions != nil {
		copy(SetValues[int64](s, LMPositionIDs, int64(len(ids))), d.positions[i])
	}
	return nil
}

// readChatFile reads the records of a conversation file, skipping blank lines.
func readChatFile(path string, o ChatOptions) ([]chatRecord, error) {
	var out []chatRecord
	err := scanLines(path, "conversation", o.MaxFileBytes, o.MaxLineBytes, func(n int, raw []byte) error {
		msgs, tools, err := chat.DecodeConversation(raw)
		if err != nil {
			return fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, chatRecord{line: n, msgs: msgs, tools: tools})
		return nil
	})
	if err == nil && len(out) == 0 {
		err = fmt.Errorf("%s holds no conversation", path)
	}
	return out, err
}
