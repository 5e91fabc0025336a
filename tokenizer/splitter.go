package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The Split pre-tokenizers of GPT-2, Llama 3 and Qwen2 are regular expressions that
// tokenizers runs with Oniguruma. Go's regexp has no lookahead (they use \s+(?!\S)), so
// each is written out here as the sequence of decisions the backtracking engine makes
// at a position; docs/tokenizer.md says why this rather than a regexp2 dependency.
// Each pattern matches at every position (every character is a letter, a number,
// whitespace or something else, and each of those starts some alternative), so its
// matches tile the text and a matcher only says where the match starting at i ends.

// The regular expressions, exactly as tokenizer.json files carry them.
const (
	// gpt2Pattern is GPT-2's (and ByteLevel's use_regex): tiktoken's r50k_base.
	gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// llama3Pattern is Llama 3's: tiktoken's cl100k_base.
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// qwen2Pattern is Qwen2's: Llama 3's with one digit per match.
	qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// matchEnd returns the end of the match that starts at i (i < len(s)).
type matchEnd func(s string, i int) int

// knownRegexes are the Split regular expressions this package implements.
var knownRegexes = map[string]matchEnd{
	gpt2Pattern:   gpt2Match,
	llama3Pattern: func(s string, i int) int { return cl100kMatch(s, i, 3) },
	qwen2Pattern:  func(s string, i int) int { return cl100kMatch(s, i, 1) },
}

// Character classes as Oniguruma sees them with UTF-8 text: \p{L} (general category
// L), \p{N} (N), \s (White_Space, which is Go's unicode.IsSpace), or none of them.
// The three are disjoint.
const (
	clsOther = iota
	clsL
	clsN
	clsS
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for r := range rune(utf8.RuneSelf) {
		t[r] = classOf(r)
	}
	return t
}()

func classOf(r rune) uint8 {
	switch {
	case unicode.IsLetter(r):
		return clsL
	case unicode.IsNumber(r):
		return clsN
	case unicode.IsSpace(r):
		return clsS
	}
	return clsOther
}

// at decodes the rune at i and its class.
func at(s string, i int) (rune, int, uint8) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1, asciiClass[c]
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return r, n, classOf(r)
}

// runEnd returns the end of the run of characters of class cls starting at i.
func runEnd(s string, i int, cls uint8) int {
	for i < len(s) {
		_, n, c := at(s, i)
		if c != cls {
			break
		}
		i += n
	}
	return i
}

// contraction matches 's|'t|'re|'ve|'m|'ll|'d after the apostrophe (j is the byte after
// it) and returns the match's end, or -1. With fold, the letters match as (?i:...) does
// in Oniguruma: by Unicode case folding, so 's also matches U+017F (ſ, long s), whose
// folding is s.
func contraction(s string, j int, fold bool) int {
	if j >= len(s) {
		return -1
	}
	is := func(k int, lower byte) (int, bool) {
		if k >= len(s) {
			return 0, false
		}
		c := s[k]
		if c == lower || (fold && c == lower-'a'+'A') {
			return 1, true
		}
		if fold && lower == 's' && k+1 < len(s) && c == 0xC5 && s[k+1] == 0xBF {
			return 2, true
		}
		return 0, false
	}
	for _, first := range []byte{'s', 't'} {
		if n, ok := is(j, first); ok {
			return j + n
		}
	}
	for _, two := range [][2]byte{{'r', 'e'}, {'v', 'e'}} {
		if n, ok := is(j, two[0]); ok {
			if m, ok := is(j+n, two[1]); ok {
				return j + n + m
			}
		}
	}
	if n, ok := is(j, 'm'); ok {
		return j + n
	}
	if n, ok := is(j, 'l'); ok {
		if m, ok := is(j+n, 'l'); ok {
			return j + n + m
		}
	}
	if n, ok := is(j, 'd'); ok {
		return j + n
	}
	return -1
}

// spaceRunEnd is \s+(?!\S)|\s+ at i (a whitespace character): the whole run when it
// ends the text or is one character long, else the run less its last character, which
// then starts the next match (as " word").
func spaceRunEnd(s string, i int) int {
	last, e := i, i
	for e < len(s) {
		_, n, c := at(s, e)
		if c != clsS {
			break
		}
		last = e
		e += n
	}
	if e == len(s) || last == i {
		return e
	}
	return last
}

// gpt2Match: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func gpt2Match(s string, i int) int {
	r, n, c := at(s, i)
	if r == '\'' {
		if e := contraction(s, i+n, false); e > 0 {
			return e
		}
	}
	if r == ' ' && i+n < len(s) {
		// " ?" takes the space when the next character starts one of the three runs.
		_, n2, c2 := at(s, i+n)
		if c2 != clsS {
			return runEnd(s, i+n+n2, c2)
		}
	}
	if c != clsS {
		return runEnd(s, i+n, c)
	}
	return spaceRunEnd(s, i)
}

// cl100kMatch: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,maxDigits}|
// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func cl100kMatch(s string, i int, maxDigits int) int {
	r, n, c := at(s, i)
	if r == '\'' {
		if e := contraction(s, i+n, true); e > 0 {
			return e
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c == clsL {
		return runEnd(s, i+n, clsL)
	}
	if c != clsN && r != '\r' && r != '\n' && i+n < len(s) {
		if _, n2, c2 := at(s, i+n); c2 == clsL {
			return runEnd(s, i+n+n2, clsL)
		}
	}
	// \p{N}{1,maxDigits}
	if c == clsN {
		e := i + n
		for k := 1; k < maxDigits && e < len(s); k++ {
			_, n2, c2 := at(s, e)
			if c2 != clsN {
				break
			}
			e += n2
		}
		return e
	}
	// " ?[^\s\p{L}\p{N}]+[\r\n]*"
	j := -1
	if c == clsOther {
		j = i
	} else if r == ' ' && i+n < len(s) {
		if _, _, c2 := at(s, i+n); c2 == clsOther {
			j = i + n
		}
	}
	if j >= 0 {
		e := runEnd(s, j, clsOther)
		for e < len(s) && (s[e] == '\r' || s[e] == '\n') {
			e++
		}
		return e
	}
	// Whitespace. \s*[\r\n]+: up to the last CR or LF of the run, if it has one.
	e, lastNL := i, -1
	for e < len(s) {
		_, n2, c2 := at(s, e)
		if c2 != clsS {
			break
		}
		if s[e] == '\r' || s[e] == '\n' {
			lastNL = e
		}
		e += n2
	}
	if lastNL >= 0 {
		return lastNL + 1
	}
	return spaceRunEnd(s, i)
}
