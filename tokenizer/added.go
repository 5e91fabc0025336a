package tokenizer

import (
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"
)

// AddedToken is a token of tokenizer.json's added_tokens: matched in the text before the
// model runs, and never split.
type AddedToken struct {
	ID      int64
	Content string
	// Special tokens (BOS, EOS, chat markers) are left out by Decode with
	// skipSpecialTokens.
	Special bool
	// Normalized tokens are matched in the normalized text, the others in the text as
	// given.
	Normalized bool
	// LStrip and RStrip make a match take the whitespace before or after it.
	LStrip, RStrip bool
	// SingleWord tokens only match where no word character touches them.
	SingleWord bool
}

// addedVocab is tokenizers' AddedVocabulary.
type addedVocab struct {
	tokens    map[int64]AddedToken
	byContent map[string]int64
	special   map[string]bool // contents of special tokens
	// decodeAs is the normalized content that Decode uses for a normalized token whose
	// content the normalizer changes (tokenizers ≥ 0.23).
	decodeAs map[int64]string
	raw      *trie // tokens with normalized false, matched in the input
	norm     *trie // tokens with normalized true, matched in the normalized input
}

// trie finds added tokens leftmost-longest, as tokenizers' Aho-Corasick automaton
// (daachorse, MatchKind::LeftmostLongest) does: the match that starts first, and of
// those the longest; the next search starts where it ends.
//
// It is an Aho-Corasick automaton of the reversed contents, run once over the text from
// its end to its start: after reading s[i:] backwards its state is the longest reversed
// content prefix that ends the text read, so the longest content that begins at i is the
// state's own token or the one its output link names. That gives, for every position,
// the longest token starting there in one pass of at most two steps a byte (each byte
// deepens the state by one, each failure step makes it shallower), whatever the tokens:
// a text costs time linear in its length plus the matches (addedWork counts the steps).
// Scanning forward from each position in turn, as a plain trie walk does, costs the
// text's length times the longest token's (5000 tokens "a…ab" on a line of "a").
type trie struct {
	nodes []trieNode
	// root[c] is the root's child on byte c, 0 if none: most bytes of a text end no
	// token, and an array answers that faster than the root's map.
	root  [256]int32
	built bool
}

type trieNode struct {
	next  map[byte]int32
	id    int64 // -1: no token ends here
	fail  int32 // the node of the longest proper suffix of this node's string
	out   int32 // the node of the longest token that is a suffix of this node's string, -1: none
	depth int32
}

func newTrie() *trie { return &trie{nodes: []trieNode{{id: -1, out: -1}}} }

// insert adds the token s (reversed); the first id inserted for a text is kept.
func (t *trie) insert(s string, id int64) {
	n := int32(0)
	for i := len(s) - 1; i >= 0; i-- {
		nx, ok := t.nodes[n].next[s[i]]
		if !ok {
			if t.nodes[n].next == nil {
				t.nodes[n].next = make(map[byte]int32)
			}
			nx = int32(len(t.nodes))
			t.nodes = append(t.nodes, trieNode{id: -1, out: -1, depth: t.nodes[n].depth + 1})
			t.nodes[n].next[s[i]] = nx
		}
		n = nx
	}
	if t.nodes[n].id < 0 {
		t.nodes[n].id = id
	}
	t.built = false
}

// build computes the failure and output links, breadth first.
func (t *trie) build() {
	queue := []int32{0}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		for c, v := range t.nodes[u].next {
			f := int32(0)
			if u != 0 {
				f = t.step(t.nodes[u].fail, c)
			}
			t.nodes[v].fail = f
			t.nodes[v].out = t.nodes[f].out
			if t.nodes[v].id >= 0 {
				t.nodes[v].out = v
			}
			queue = append(queue, v)
		}
	}
	for c, v := range t.nodes[0].next {
		t.root[c] = v
	}
	t.built = true
}

// step is the automaton's transition from state n on byte c (failure links followed);
// work counts the steps.
func (t *trie) step(n int32, c byte) int32 {
	for {
		if nx, ok := t.nodes[n].next[c]; ok {
			return nx
		}
		if n == 0 {
			return 0
		}
		n = t.nodes[n].fail
	}
}

// addedMatch is the longest token that starts at start.
type addedMatch struct {
	start, end int
	id         int64
}

// addedWork counts the automaton's steps over all texts (tests read it).
var addedWork atomic.Int64

var matchPool = sync.Pool{New: func() any { return new([]addedMatch) }}

// longestAt appends, for each position of s where a token starts, the longest such
// token, from the last position to the first.
func (t *trie) longestAt(dst []addedMatch, s string) []addedMatch {
	if !t.built {
		panic("tokenizer: added-token matcher used before build")
	}
	n, steps := int32(0), 0
	for i := len(s) - 1; i >= 0; i-- {
		c := s[i]
		steps++
		if n == 0 {
			// The common case: most bytes end no token.
			if n = t.root[c]; n == 0 {
				continue
			}
		} else {
			for {
				if nx, ok := t.nodes[n].next[c]; ok {
					n = nx
					break
				}
				if n == 0 {
					break
				}
				n = t.nodes[n].fail
				steps++
			}
		}
		if o := t.nodes[n].out; o >= 0 {
			dst = append(dst, addedMatch{i, i + int(t.nodes[o].depth), t.nodes[o].id})
		}
	}
	addedWork.Add(int64(steps))
	return dst
}

// segment is a part of the input: an added token (id >= 0) or text for the model.
// start and end are its byte range in the text split (EncodeOffsets reads them).
type segment struct {
	text       string
	id         int64
	atStart    bool
	start, end int
}

// split is tokenizers' AddedVocabulary::find_matches followed by the split: text
// segments and added tokens, in order. Empty text segments are dropped.
func (a *addedVocab) split(dst []segment, s string, t *trie, atStart bool) []segment {
	if t == nil || s == "" {
		if s != "" {
			dst = append(dst, segment{text: s, id: -1, atStart: atStart, end: len(s)})
		}
		return dst
	}
	mp := matchPool.Get().(*[]addedMatch)
	matches := t.longestAt((*mp)[:0], s)
	last, pos := 0, 0
	for k := len(matches) - 1; k >= 0; k-- {
		m := matches[k]
		if m.start < pos {
			continue
		}
		start, stop, id := m.start, m.end, m.id
		pos = stop
		tok := a.tokens[id]
		if tok.SingleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := stop == len(s) || !startsWithWord(s[stop:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if tok.LStrip {
			start = max(leftmostSpaceAtEnd(s[:start]), last)
		}
		if tok.RStrip {
			// The search goes on from the match's end, not the stripped space's, as
			// tokenizers' does.
			stop += rightmostSpaceAtStart(s[stop:])
		}
		if last < start {
			dst = append(dst, segment{text: s[last:start], id: -1, atStart: atStart && last == 0, start: last, end: start})
		}
		dst = append(dst, segment{id: id, start: start, end: stop})
		last = stop
	}
	*mp = matches[:0]
	if cap(matches) <= 1<<16 { // a long text's list is not kept
		matchPool.Put(mp)
	}
	if last < len(s) {
		dst = append(dst, segment{text: s[last:], id: -1, atStart: atStart && last == 0, start: last, end: len(s)})
	}
	return dst
}

// isWordChar is Rust regex's Unicode \w: Alphabetic, marks, decimal digits, connector
// punctuation and Join_Control.
func isWordChar(r rune) bool {
	return unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Other_Alphabetic, r) ||
		unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) ||
		unicode.Is(unicode.Join_Control, r)
}

func endsWithWord(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordChar(r)
}

func startsWithWord(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordChar(r)
}

// leftmostSpaceAtEnd is where the trailing whitespace of s starts.
func leftmostSpaceAtEnd(s string) int {
	i := len(s)
	for i > 0 {
		r, n := utf8.DecodeLastRuneInString(s[:i])
		if !unicode.IsSpace(r) {
			break
		}
		i -= n
	}
	return i
}

// rightmostSpaceAtStart is the length of the leading whitespace of s.
func rightmostSpaceAtStart(s string) int {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !unicode.IsSpace(r) {
			break
		}
		i += n
	}
	return i
}
