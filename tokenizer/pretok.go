package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// The pre-tokenizers that tokenizers writes as splits on a character predicate or a
// fixed regex (Whitespace, WhitespaceSplit, Digits, Punctuation, BertPreTokenizer) are
// preSplits here, so that Encode and EncodeOffsets treat them as any Split.

// isOnigWord is Oniguruma's \w with Unicode: Letter, Mark, Decimal_Number,
// Connector_Punctuation.
func isOnigWord(r rune) bool {
	if r < utf8.RuneSelf {
		return r == '_' || ('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z')
	}
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r)
}

// whitespaceFind is the Whitespace pre-tokenizer's regex \w+|[^\w\s]+: runs of word
// characters and runs of characters that are neither word nor space match; spaces
// are between matches.
func whitespaceFind(s string, f spanSink) {
	prev := 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if unicode.IsSpace(r) && !isOnigWord(r) {
			i += n
			continue
		}
		word := isOnigWord(r)
		e := i + n
		for e < len(s) {
			r2, n2 := utf8.DecodeRuneInString(s[e:])
			if isOnigWord(r2) != word || (!word && unicode.IsSpace(r2)) {
				break
			}
			e += n2
		}
		if i > prev {
			f.add(span{prev, i, false})
		}
		f.add(span{i, e, true})
		prev, i = e, e
	}
	if prev < len(s) {
		f.add(span{prev, len(s), false})
	}
}

// isBertPunct is tokenizers' is_bert_punc (also the Punctuation pre-tokenizer's test):
// ASCII punctuation (symbols such as $ + < = > ^ ` | ~ included) or Unicode P*.
func isBertPunct(r rune) bool {
	if r < utf8.RuneSelf {
		return ('!' <= r && r <= '/') || (':' <= r && r <= '@') || ('[' <= r && r <= '`') || ('{' <= r && r <= '~')
	}
	return unicode.IsPunct(r)
}

// Whitespace is Split(\w+|[^\w\s]+, Removed, invert).
func newWhitespace() *preSplit {
	return &preSplit{pattern: pattern{fn: whitespaceFind}, behavior: splitRemoved, invert: true}
}

// WhitespaceSplit splits on White_Space (Rust's char::is_whitespace) and drops it.
func newWhitespaceSplit() *preSplit {
	return &preSplit{pattern: pattern{pred: unicode.IsSpace}, behavior: splitRemoved}
}

// Digits isolates numbers (Rust's char::is_numeric: N*), each digit alone or runs of
// them.
func newDigits(individual bool) *preSplit {
	b := splitContiguous
	if individual {
		b = splitIsolated
	}
	return &preSplit{pattern: pattern{pred: unicode.IsNumber}, behavior: b}
}

// BertPreTokenizer splits on whitespace (dropped), then isolates punctuation.
func newBertPreTokenizer() preTokenizer {
	return preSequence{newWhitespaceSplit(), &preSplit{pattern: pattern{pred: isBertPunct}, behavior: splitIsolated}}
}

// normLowercase is Rust's char::to_lowercase per character (not str::to_lowercase:
// no final-sigma rule), as tokenizers' NormalizedString::lowercase. U+0130 is the one
// character whose lowercase is two.
type normLowercase struct{}

func (normLowercase) normalize(s string) string {
	return strings.Map(unicode.ToLower, strings.ReplaceAll(s, "\u0130", "i\u0307"))
}

// lowercaseChanges are normLowercase's changes, for the offsets.
func lowercaseChanges(s string) []change {
	var ch []change
	for _, r := range s {
		if r == '\u0130' {
			ch = append(ch, change{'i', 0}, change{'\u0307', 1})
			continue
		}
		ch = append(ch, change{unicode.ToLower(r), 0})
	}
	return ch
}

// normRegexReplace is Replace with a Regex pattern: every match (regexp2, with its
// budget) replaced by content.
type normRegexReplace struct {
	re      *genericRegex
	content string
}

func (r normRegexReplace) normalize(s string) string {
	var sb strings.Builder
	last := 0
	for _, sp := range r.re.find(nil, s) {
		if sp.match {
			sb.WriteString(s[last:sp.start])
			sb.WriteString(r.content)
			last = sp.end
		}
	}
	sb.WriteString(s[last:])
	return sb.String()
}
