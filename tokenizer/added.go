package tokenizer

import (
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
// (daachorse, MatchKind::LeftmostLongest) does.
type trie struct {
	nodes []trieNode
	first [256]bool
}

type trieNode struct {
	next map[byte]int32
	id   int64 // -1: no token ends here
}

func newTrie() *trie { return &trie{nodes: []trieNode{{id: -1}}} }

func (t *trie) insert(s string, id int64) {
	n := int32(0)
	for i := 0; i < len(s); i++ {
		nx, ok := t.nodes[n].next[s[i]]
		if !ok {
			if t.nodes[n].next == nil {
				t.nodes[n].next = make(map[byte]int32)
			}
			nx = int32(len(t.nodes))
			t.nodes = append(t.nodes, trieNode{id: -1})
			t.nodes[n].next[s[i]] = nx
		}
		n = nx
	}
	if t.nodes[n].id < 0 {
		t.nodes[n].id = id
	}
	t.first[s[0]] = true
}

// find returns the leftmost-longest match at or after from.
func (t *trie) find(s string, from int) (start, end int, id int64, ok bool) {
	for i := from; i < len(s); i++ {
		if !t.first[s[i]] {
			continue
		}
		n, best := int32(0), -1
		for j := i; j < len(s); j++ {
			nx, found := t.nodes[n].next[s[j]]
			if !found {
				break
			}
			n = nx
			if t.nodes[n].id >= 0 {
				best, id = j+1, t.nodes[n].id
			}
		}
		if best >= 0 {
			return i, best, id, true
		}
	}
	return 0, 0, 0, false
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
	last := 0
	for pos := 0; pos < len(s); {
		start, stop, id, ok := t.find(s, pos)
		if !ok {
			break
		}
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
