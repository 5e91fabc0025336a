package tokenizer

import (
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// Tokenizer encodes text to token ids and decodes ids to text as the tokenizer.json it
// was loaded from specifies. It is immutable and safe for concurrent use.
type Tokenizer struct {
	model      wordModel
	vocab      map[string]int32 // the model's
	idTokens   *idTable         // the model's
	normalizer normalizer       // nil: none
	pre        preTokenizer     // nil: the whole text is one word
	decoder    decoder          // nil: tokens joined by spaces
	post       *template        // nil: nothing added
	trim       *byteLevelTrim   // nil: offsets are not trimmed (EncodeOffsets)
	added      addedVocab
	vocabSize  int

	bos, eos, pad int64 // -1 when unknown
}

// scratch holds an Encode's temporary slices; pooled so that encoding many short texts
// does not allocate them each time.
type scratch struct {
	segs, sub []segment
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// Encode returns the token ids of text. With addSpecialTokens the post-processor's
// special tokens are added (the BOS of Llama's TemplateProcessing), as tokenizers'
// encode(text, add_special_tokens=True). Text that is not valid UTF-8 is first made
// valid: each maximal invalid subsequence becomes one U+FFFD, as Rust's
// String::from_utf8_lossy and Python's bytes.decode(errors="replace") do. Encode never truncates or pads,
// whatever the file's truncation and padding say (transformers turns those off too
// unless a call asks for them). A text over a budget (see TryEncode) panics with an
// error wrapping ErrBudget.
func (t *Tokenizer) Encode(text string, addSpecialTokens bool) []int64 {
	return t.AppendEncode(nil, text, addSpecialTokens)
}

// TryEncode is Encode returning an error where Encode panics: when a Split regular
// expression outside the hand-written fast paths exceeds its budget (ErrBudget), which
// only a pattern that backtracks catastrophically does, or when the file's normalizers
// would grow the text past normGrowth (32) times its length plus 4 KiB (ErrBudget),
// which only a file built to do so asks for. Callers that encode text they did not
// write (a prompt, a data set) should use TryEncode.
func (t *Tokenizer) TryEncode(text string, addSpecialTokens bool) (ids []int64, err error) {
	defer catchBudget(&err)
	return t.Encode(text, addSpecialTokens), nil
}

// catchBudget, deferred by a function with named results, turns the panic of a budget
// exceeded into its error (the other results keep their zero values); any other panic
// goes on.
func catchBudget(err *error) {
	if r := recover(); r != nil {
		be, ok := r.(*budgetError)
		if !ok {
			panic(r)
		}
		*err = be.err
	}
}

// TryEncodeOffsets is EncodeOffsets returning an error where EncodeOffsets panics (a
// text over a budget, as TryEncode).
func (t *Tokenizer) TryEncodeOffsets(text string, addSpecialTokens bool) (ids []int64, offsets [][2]int, err error) {
	defer catchBudget(&err)
	ids, offsets = t.EncodeOffsets(text, addSpecialTokens)
	return ids, offsets, nil
}

// AppendEncode is Encode appending to dst, for callers that reuse a buffer.
func (t *Tokenizer) AppendEncode(dst []int64, text string, addSpecialTokens bool) []int64 {
	if !utf8.ValidString(text) {
		text = lossyString(text)
	}
	if t.post != nil && addSpecialTokens {
		dst = append(dst, t.post.prefix...)
	}
	sc := scratchPool.Get().(*scratch)
	dst = t.encodeText(dst, text, sc)
	scratchPool.Put(sc)
	if t.post != nil && addSpecialTokens {
		dst = append(dst, t.post.suffix...)
	}
	return dst
}

// encodeText is tokenizers' encode of one sequence: added tokens that are matched in the
// raw text, then the normalizer, then added tokens matched in the normalized text, then
// the pre-tokenizer and the model on what is left.
func (t *Tokenizer) encodeText(dst []int64, text string, sc *scratch) []int64 {
	// The pre-tokenizer hands each piece straight to the model (see preTokenizer).
	encode := func(p piece) { dst = t.model.encodeWord(dst, p.text) }
	sc.segs = t.added.split(sc.segs[:0], text, t.added.raw, true)
	for _, seg := range sc.segs {
		if seg.id >= 0 {
			dst = append(dst, seg.id)
			continue
		}
		s := seg.text
		if t.normalizer != nil {
			s = normalizeWithin(t.normalizer, s, normLimit(len(s)))
		}
		sc.sub = t.added.split(sc.sub[:0], s, t.added.norm, seg.atStart)
		for _, sub := range sc.sub {
			if sub.id >= 0 {
				dst = append(dst, sub.id)
				continue
			}
			if t.pre == nil {
				dst = t.model.encodeWord(dst, sub.text)
				continue
			}
			t.pre.preTokenize(piece{text: sub.text, atStart: sub.atStart}, encode)
		}
	}
	return dst
}

// Decode returns the text of ids, as tokenizers' decode(ids, skip_special_tokens): the
// tokens of the ids through the file's decoder. With skipSpecialTokens the special added
// tokens are left out. An id that is no token (a model's vocabulary is often padded past
// the tokenizer's) is left out, as tokenizers does.
func (t *Tokenizer) Decode(ids []int64, skipSpecialTokens bool) string {
	tokens := make([]string, 0, len(ids))
	for _, id := range ids {
		tok, ok := t.decodeToken(id)
		if !ok || (skipSpecialTokens && t.added.special[tok]) {
			continue
		}
		tokens = append(tokens, tok)
	}
	if t.decoder == nil {
		return strings.Join(tokens, " ")
	}
	return strings.Join(t.decoder.decodeChain(tokens), "")
}

// decodeToken is tokenizers' id_to_token: an added token's (normalized) content, else
// the model's token.
func (t *Tokenizer) decodeToken(id int64) (string, bool) {
	if s, ok := t.added.decodeAs[id]; ok {
		return s, true
	}
	if tok, ok := t.added.tokens[id]; ok {
		return tok.Content, true
	}
	return t.idTokens.get(id)
}

// IDToToken returns the token string of id (as tokenizers' id_to_token: byte-level
// tokens in GPT-2's byte characters, such as "Ġthe").
func (t *Tokenizer) IDToToken(id int64) (string, bool) { return t.decodeToken(id) }

// TokenToID returns the id of a token string: an added token's, else the model's.
func (t *Tokenizer) TokenToID(token string) (int64, bool) {
	if id, ok := t.added.byContent[token]; ok {
		return id, true
	}
	id, ok := t.vocab[token]
	return int64(id), ok
}

// VocabSize is the number of tokens, added tokens included (tokenizers'
// get_vocab_size(with_added_tokens=True)). A model's embedding may have more rows.
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// IsSpecial tells whether id is a special added token (one Decode skips with
// skipSpecialTokens).
func (t *Tokenizer) IsSpecial(id int64) bool {
	tok, ok := t.decodeToken(id)
	return ok && t.added.special[tok]
}

// AddedTokens returns the added tokens in id order.
func (t *Tokenizer) AddedTokens() []AddedToken {
	out := make([]AddedToken, 0, len(t.added.tokens))
	for _, tok := range t.added.tokens {
		out = append(out, tok)
	}
	slices.SortFunc(out, func(a, b AddedToken) int { return int(a.ID - b.ID) })
	return out
}

// BOS returns the id of the beginning-of-sequence token: tokenizer_config.json's
// bos_token when LoadDir read one, else the special token the post-processor puts
// before the text, else a special added token with one of the usual names (<s>,
// <|begin_of_text|>, <|startoftext|>, <|endoftext|>).
func (t *Tokenizer) BOS() (int64, bool) { return t.bos, t.bos >= 0 }

// EOS returns the id of the end-of-sequence token: tokenizer_config.json's eos_token
// when LoadDir read one, else a special added token with one of the usual names (</s>,
// <|end_of_text|>, <|endoftext|>, <|im_end|>). A chat model may stop at others too
// (generation_config.json lists them).
func (t *Tokenizer) EOS() (int64, bool) { return t.eos, t.eos >= 0 }

// PAD returns the id of tokenizer_config.json's pad_token when LoadDir read one.
func (t *Tokenizer) PAD() (int64, bool) { return t.pad, t.pad >= 0 }
