package tokenizer

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// The normalizer's budget. A normalizer may grow a text: NFKC by up to 18 characters a
// character (11 bytes a byte of UTF-8, U+FDFA), Llama 2's Replace of " " by "▁" 3 bytes
// a byte, a BertNormalizer CJK character from 3 bytes to 5. A tokenizer.json can ask
// for far more (Replace "a" by a thousand "a", three times over: a 10-byte text would
// become 10 GB). The text each normalizer of the chain makes from a segment of n bytes
// may therefore be at most normGrowth*n + normSlack bytes, a factor that every
// expansion of the released files (and any chain of them a file could hold) stays well
// under; past it Encode panics, and TryEncode returns, an error wrapping ErrBudget.
// The size is known before the text is built: each normalizer bounds its output from
// the input's length alone (maxLen) and, when that bound passes the limit, counts the
// exact length without building the text (check) and stops there if it is over.
const (
	normGrowth = 32
	normSlack  = 4096
)

// normLimit is the most bytes a normalizer may make of a segment of n bytes.
func normLimit(n int) int { return normGrowth*n + normSlack }

// overBudget panics with the error a normalizer over its limit gives.
func overBudget(what string, in, out, limit int) {
	panic(&budgetError{fmt.Errorf("%w: the normalizer %s would make %d bytes of a text of %d bytes, over the limit of %d (%d× its segment + %d)",
		ErrBudget, what, out, in, limit, normGrowth, normSlack)})
}

// normalizeWithin is n.normalize with every normalizer of a chain held to limit bytes
// of output, checked before each output is made.
func normalizeWithin(n normalizer, s string, limit int) string {
	if q, ok := n.(normSequence); ok {
		for _, x := range q {
			s = normalizeWithin(x, s, limit)
		}
		return s
	}
	checkNorm(n, s, limit)
	return n.normalize(s)
}

// checkNorm panics when n would make more than limit bytes of s, without making them.
func checkNorm(n normalizer, s string, limit int) {
	if n.maxLen(len(s)) <= limit {
		return
	}
	if l := n.outLen(s); l > limit {
		overBudget(n.describe(), len(s), l, limit)
	}
}

// satMul is a*b, saturated at the largest int (a, b >= 0).
func satMul(a, b int) int {
	if a != 0 && b > (1<<62)/a {
		return 1 << 62
	}
	return a * b
}

// The bounds (maxLen, cheap, from the length alone) and exact lengths (outLen, one pass
// that allocates nothing in proportion to the text) of each normalizer's output.

func (q normSequence) maxLen(n int) int {
	for _, x := range q {
		n = x.maxLen(n)
	}
	return n
}

func (q normSequence) outLen(s string) int { return len(q.normalize(s)) } // not used: see normalizeWithin
func (q normSequence) describe() string    { return "Sequence" }

func (p normPrepend) maxLen(n int) int    { return n + len(p.prefix) }
func (p normPrepend) outLen(s string) int { return len(p.normalize(s)) }
func (p normPrepend) describe() string    { return fmt.Sprintf("Prepend(%.20q)", p.prefix) }
func (r normReplace) describe() string {
	return fmt.Sprintf("Replace(%.20q → %.20q)", r.pattern, r.content)
}
func (u normUnicode) describe() string   { return fmt.Sprint(u.form) }
func (st normStrip) maxLen(n int) int    { return n }
func (st normStrip) outLen(s string) int { return len(st.normalize(s)) }
func (st normStrip) describe() string    { return "Strip" }
func (normLowercase) maxLen(n int) int   { return satMul(2, n) }
func (normLowercase) describe() string   { return "Lowercase" }
func (r normRegexReplace) describe() string {
	return fmt.Sprintf("Replace(%.20q → %.20q)", r.re.re.String(), r.content)
}
func (p *normPrecompiled) describe() string { return "Precompiled" }
func (n normBert) maxLen(m int) int         { return satMul(10, m) }
func (n normBert) describe() string         { return "BertNormalizer" }

// A Replace of a literal grows each match by len(content) - len(pattern); strings'
// ReplaceAll with an empty pattern inserts content before every character and at the end.
func (r normReplace) maxLen(n int) int {
	switch {
	case r.pattern == "":
		return n + satMul(n+1, len(r.content))
	case len(r.content) <= len(r.pattern):
		return n
	}
	return n + satMul(n/len(r.pattern), len(r.content)-len(r.pattern))
}

func (r normReplace) outLen(s string) int {
	return len(s) + satMul(strings.Count(s, r.pattern), len(r.content)-len(r.pattern))
}

// A regex Replace may match the empty string at every position.
func (r normRegexReplace) maxLen(n int) int {
	if r.content == "" {
		return n
	}
	return n + satMul(n+1, len(r.content))
}

func (r normRegexReplace) outLen(s string) int {
	l := len(s)
	for _, sp := range r.re.find(nil, s) {
		if sp.match {
			l += len(r.content) - (sp.end - sp.start)
		}
	}
	return l
}

// The Unicode forms grow UTF-8 at most 3× (NFC, NFD) or 11× (NFKC, NFKD), Unicode's
// stated bounds; the exact length is counted segment by segment with norm.Iter.
func (u normUnicode) maxLen(n int) int {
	if u.form == norm.NFKC || u.form == norm.NFKD {
		return satMul(11, n)
	}
	return satMul(3, n)
}

func (u normUnicode) outLen(s string) int {
	var it norm.Iter
	it.InitString(u.form, s)
	l := 0
	for !it.Done() {
		l += len(it.Next())
	}
	return l
}

func lowerLen(r rune) int {
	if r == '\u0130' {
		return 3
	}
	return utf8.RuneLen(unicode.ToLower(r))
}

func (normLowercase) outLen(s string) int {
	l := 0
	for _, r := range s {
		l += lowerLen(r)
	}
	return l
}

// A BertNormalizer works character by character: clean_text drops or maps one,
// handle_chinese_chars adds a space on each side, strip_accents decomposes it and drops
// its nonspacing marks, lowercase lowercases what is left.
func (n normBert) outLen(s string) int {
	l := 0
	var buf []rune
	for _, r := range s {
		if n.cleanText {
			if bertRemoved(r) {
				continue
			}
			if bertSpace(r) {
				r = ' '
			}
		}
		if n.chinese && isChineseChar(r) {
			l += 2
		}
		buf = append(buf[:0], r)
		if n.stripAccents {
			buf = decomposeRune(buf[:0], r, norm.NFD)
		}
		for _, d := range buf {
			switch {
			case n.stripAccents && isBertMn(d):
			case n.lowercase:
				l += lowerLen(d)
			default:
				l += utf8.RuneLen(d)
			}
		}
	}
	return l
}

// A Precompiled rule replaces at least one byte by one of the charsmap's strings.
func (p *normPrecompiled) maxLen(n int) int { return satMul(max(p.longest, 1), n) }

func (p *normPrecompiled) outLen(s string) int {
	l := 0
	p.walk(s, func(part, repl string, found bool) {
		if found {
			l += len(repl)
		} else {
			l += len(part)
		}
	})
	return l
}
