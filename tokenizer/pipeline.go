package tokenizer

import (
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Normalizers. Each is a function of the text alone: offsets into the original text are
// not kept, since Encode returns ids only.

type normalizer interface {
	normalize(s string) string
	// maxLen bounds the length of the output for an input of n bytes; outLen is the
	// output's exact length, counted without making it (budget.go).
	maxLen(n int) int
	outLen(s string) int
	// describe names the normalizer in an error.
	describe() string
}

type normSequence []normalizer

func (q normSequence) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
}

// normPrepend prepends its string to a non-empty text (Llama 2's "▁").
type normPrepend struct{ prefix string }

func (p normPrepend) normalize(s string) string {
	if s == "" {
		return s
	}
	return p.prefix + s
}

// normReplace replaces every occurrence of a literal pattern, left to right without
// overlaps (Llama 2's " " to "▁").
type normReplace struct{ pattern, content string }

func (r normReplace) normalize(s string) string {
	return strings.ReplaceAll(s, r.pattern, r.content)
}

// normUnicode is NFC, NFD, NFKC or NFKD.
type normUnicode struct{ form norm.Form }

func (u normUnicode) normalize(s string) string { return u.form.String(s) }

// normStrip removes leading and/or trailing whitespace (Rust's char::is_whitespace,
// the White_Space property, which is Go's unicode.IsSpace).
type normStrip struct{ left, right bool }

func (st normStrip) normalize(s string) string {
	if st.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if st.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s
}

// Pre-tokenizers split the text into pieces that the model encodes one by one.

// piece is a part of the text being pre-tokenized. atStart tells whether it begins at
// the start of the input text, which Metaspace's prepend_scheme "first" looks at.
type piece struct {
	text    string
	atStart bool
}

// A pre-tokenizer streams: it hands each piece on as soon as it is found, and a
// Sequence hands each piece of one pre-tokenizer to the next, so that Encode encodes a
// piece before the next is found and never holds the pieces (or the spans) of a whole
// text: a long line costs memory for its longest piece, not for all of them.
type preTokenizer interface {
	// preTokenize calls yield with each piece p splits into, in order; it drops empty
	// pieces.
	preTokenize(p piece, yield func(piece))
}

type preSequence []preTokenizer

func (q preSequence) preTokenize(p piece, yield func(piece)) {
	if len(q) == 0 {
		yield(p)
		return
	}
	// stage k takes the pieces of q[k-1] (the text, for stage 0) to q[k].
	next := yield
	for k := len(q) - 1; k > 0; k-- {
		pt, after := q[k], next
		next = func(c piece) { pt.preTokenize(c, after) }
	}
	q[0].preTokenize(p, next)
}

// splitBehavior is what a split does with the matches (the delimiters), as tokenizers'
// SplitDelimiterBehavior.
type splitBehavior int

const (
	splitRemoved splitBehavior = iota
	splitIsolated
	splitMergedWithPrevious
	splitMergedWithNext
	splitContiguous
)

var splitBehaviors = map[string]splitBehavior{
	"Removed":            splitRemoved,
	"Isolated":           splitIsolated,
	"MergedWithPrevious": splitMergedWithPrevious,
	"MergedWithNext":     splitMergedWithNext,
	"Contiguous":         splitContiguous,
}

// span is a part of a text that a pattern matched (match) or did not.
type span struct {
	start, end int
	match      bool
}

// pattern finds the matches of a Split pattern: a known regular expression (regex),
// another one (generic), a character predicate (each character it holds for is one
// match, as tokenizers' Pattern for Fn(char) -> bool), a function, or a literal string.
type pattern struct {
	regex   matchEnd
	generic *genericRegex
	pred    func(rune) bool
	fn      func(s string, f spanSink)
	literal string
}

// spanSink takes spans one at a time (a splitter, or a list).
type spanSink interface{ add(span) }

type spanList []span

func (l *spanList) add(sp span) { *l = append(*l, sp) }

// find covers s (non-empty) with spans, as tokenizers' Pattern::find_matches.
func (p *pattern) find(dst []span, s string) []span {
	l := spanList(dst)
	p.each(s, &l)
	return l
}

// each is find handing each span to f in turn, holding none of them.
func (p *pattern) each(s string, f spanSink) {
	switch {
	case p.generic != nil:
		p.generic.each(s, f)
		return
	case p.fn != nil:
		p.fn(s, f)
		return
	case p.pred != nil:
		prev := 0
		for i, r := range s {
			if p.pred(r) {
				if i > prev {
					f.add(span{prev, i, false})
				}
				prev = i + utf8.RuneLen(r)
				f.add(span{i, prev, true})
			}
		}
		if prev < len(s) {
			f.add(span{prev, len(s), false})
		}
		return
	}
	if p.regex != nil {
		for i := 0; i < len(s); {
			e := p.regex(s, i)
			if e <= i { // cannot happen for the known patterns; never loop forever
				_, n := utf8.DecodeRuneInString(s[i:])
				f.add(span{i, i + n, false})
				i += n
				continue
			}
			f.add(span{i, e, true})
			i = e
		}
		return
	}
	prev := 0
	for prev <= len(s) {
		k := strings.Index(s[prev:], p.literal)
		if k < 0 {
			break
		}
		start := prev + k
		if start > prev {
			f.add(span{prev, start, false})
		}
		f.add(span{start, start + len(p.literal), true})
		prev = start + len(p.literal)
	}
	if prev < len(s) {
		f.add(span{prev, len(s), false})
	}
}

// splitter is tokenizers' NormalizedString::split as a stream: it takes the spans of
// p's text in order (add), applies the behavior, and yields the non-empty pieces; flush
// ends the text. It holds at most one span back (the run being merged). It gives the
// pieces applyBehavior's ranges give, which the offsets use.
type splitter struct {
	p     piece
	b     splitBehavior
	yield func(piece)
	// invert flips each span's match; byteLevel maps each piece's bytes to their
	// byte-level characters before it is yielded.
	invert, byteLevel bool
	cur               span // the held span (has)
	has               bool
	prev              bool // whether the last span added matched
}

// Splitters are pooled: a Sequence runs one for each piece of the step before.
var splitterPool = sync.Pool{New: func() any { return new(splitter) }}

func getSplitter(p piece, b splitBehavior, yield func(piece)) *splitter {
	z := splitterPool.Get().(*splitter)
	*z = splitter{p: p, b: b, yield: yield}
	return z
}

// done flushes z and returns it to the pool.
func (z *splitter) done() {
	z.flush()
	*z = splitter{}
	splitterPool.Put(z)
}

func (z *splitter) emit(sp span) {
	if sp.end > sp.start {
		c := piece{text: z.p.text[sp.start:sp.end], atStart: z.p.atStart && sp.start == 0}
		if z.byteLevel {
			c.text = byteLevelMap(c.text)
		}
		z.yield(c)
	}
}

func (z *splitter) add(sp span) {
	if z.invert {
		sp.match = !sp.match
	}
	switch z.b {
	case splitRemoved:
		if !sp.match {
			z.emit(sp)
		}
	case splitIsolated:
		z.emit(sp)
	case splitContiguous, splitMergedWithPrevious:
		merge := sp.match == z.prev
		if z.b == splitMergedWithPrevious {
			merge = sp.match && !z.prev
		}
		if merge && z.has {
			z.cur.end = sp.end
		} else {
			if z.has {
				z.emit(z.cur)
			}
			z.cur, z.has = sp, true
		}
		z.prev = sp.match
	case splitMergedWithNext:
		// A match joins the span after it when that one does not match.
		switch {
		case z.has && !sp.match:
			z.emit(span{z.cur.start, sp.end, false})
			z.has = false
		case z.has:
			z.emit(z.cur)
			z.cur = sp
		case sp.match:
			z.cur, z.has = sp, true
		default:
			z.emit(sp)
		}
	}
}

func (z *splitter) flush() {
	if z.has {
		z.emit(z.cur)
		z.has = false
	}
}

// applyBehavior turns the spans of a text into the ranges a split keeps, in order,
// reusing spans' memory (EncodeOffsets needs the ranges, Encode the pieces). Empty
// ranges may remain.
func applyBehavior(spans []span, b splitBehavior) []span {
	switch b {
	case splitRemoved:
		out := spans[:0]
		for _, sp := range spans {
			if !sp.match {
				out = append(out, sp)
			}
		}
		return out
	case splitContiguous, splitMergedWithPrevious:
		// Contiguous merges runs of spans of the same kind; MergedWithPrevious merges a
		// match into the span before it. The write index never passes the read index.
		out := spans[:0]
		prev := false
		for _, sp := range spans {
			merge := sp.match == prev
			if b == splitMergedWithPrevious {
				merge = sp.match && !prev
			}
			if merge && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
			prev = sp.match
		}
		return out
	case splitMergedWithNext:
		// A match joins the span after it: walk backwards, writing from the end.
		w := len(spans)
		prev := false
		for k := len(spans) - 1; k >= 0; k-- {
			sp := spans[k]
			if sp.match && !prev && w < len(spans) {
				spans[w].start = sp.start
			} else {
				w--
				spans[w] = sp
			}
			prev = sp.match
		}
		return spans[w:]
	}
	return spans // splitIsolated
}

// preSplit is the Split pre-tokenizer.
type preSplit struct {
	pattern  pattern
	behavior splitBehavior
	invert   bool
}

func (s *preSplit) preTokenize(p piece, yield func(piece)) {
	z := getSplitter(p, s.behavior, yield)
	z.invert = s.invert
	s.pattern.each(p.text, z)
	z.done()
}

// byteLevelRunes is GPT-2's map from bytes to printable characters: printable Latin-1
// stands for itself, the other bytes for U+0100 onwards in byte order.
var byteLevelRunes, byteLevelBytes = func() (fwd [256]rune, back map[rune]byte) {
	back = make(map[rune]byte, 256)
	n := rune(0)
	for b := range 256 {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			fwd[b] = rune(b)
		} else {
			fwd[b] = 256 + n
			n++
		}
		back[fwd[b]] = byte(b)
	}
	return fwd, back
}()

// byteLevelStrings[b] is byteLevelRunes[b] encoded as UTF-8.
var byteLevelStrings = func() (t [256]string) {
	for b, r := range byteLevelRunes {
		t[b] = string(r)
	}
	return t
}()

// preByteLevel is the ByteLevel pre-tokenizer: an optional leading space, GPT-2's split
// (use_regex), then every byte mapped to its character.
type preByteLevel struct {
	addPrefixSpace bool
	useRegex       bool
}

var gpt2Split = pattern{regex: gpt2Match}

func (b *preByteLevel) preTokenize(p piece, yield func(piece)) {
	if b.addPrefixSpace && !strings.HasPrefix(p.text, " ") {
		p.text = " " + p.text
	}
	if !b.useRegex {
		p.text = byteLevelMap(p.text)
		yield(p)
		return
	}
	z := getSplitter(p, splitIsolated, yield)
	z.byteLevel = true
	gpt2Split.each(p.text, z)
	z.done()
}

func byteLevelMap(s string) string {
	var sb strings.Builder
	sb.Grow(len(s) * 2)
	for i := 0; i < len(s); i++ {
		sb.WriteString(byteLevelStrings[s[i]])
	}
	return sb.String()
}

// prependScheme is Metaspace's prepend_scheme.
type prependScheme int

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

// preMetaspace is the Metaspace pre-tokenizer: spaces become the replacement character
// (▁), one is prepended (always, or only to the text's first piece), and with split the
// text splits before each replacement character.
type preMetaspace struct {
	repl   string
	scheme prependScheme
	split  bool
}

func (m *preMetaspace) preTokenize(p piece, yield func(piece)) {
	p.text = strings.ReplaceAll(p.text, " ", m.repl)
	if !strings.HasPrefix(p.text, m.repl) &&
		(m.scheme == prependAlways || (m.scheme == prependFirst && p.atStart)) {
		p.text = m.repl + p.text
	}
	if !m.split {
		yield(p)
		return
	}
	pat := pattern{literal: m.repl}
	z := getSplitter(p, splitMergedWithNext, yield)
	pat.each(p.text, z)
	z.done()
}
