package tokenizer

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// Split patterns other than the three written out in splitter.go run through
// github.com/dlclark/regexp2, a backtracking engine (with lookaround, \p{...} classes
// and leftmost-first alternation, as Oniguruma) whose \s, \p{L}, \p{N}, \p{P}, ... are
// Go's unicode tables, as splitter.go's. Where its semantics differ from Oniguruma's on
// the patterns of released files, the pattern is rewritten before it is compiled
// (foldGroups); docs/tokenizer.md lists what was checked.

// ErrBudget is wrapped by the error (or panic, from Encode) of a text over one of the
// tokenizer's budgets: a Split regex whose matching exceeds its time budget (a pattern
// that backtracks catastrophically; the patterns of released tokenizer files match in
// time linear in the text), or a normalizer that would grow the text past its size
// budget (budget.go; the normalizers of released files stay far under it).
var ErrBudget = errors.New("tokenizer: budget exceeded")

// regexMatchBudget bounds the time of one regexp2 match (one pre-token). regexp2
// matches the patterns of released files at several MB/s, so a legitimate match of
// that length is millions of characters; generous, since it is wall-clock time and a
// loaded machine must not fail a legitimate text. Variables so that tests can lower
// them.
var regexMatchBudget = 5 * time.Second

// regexPerByte bounds the time of splitting one text: regexBase plus this per byte
// (regexp2 does several bytes per microsecond on released patterns).
var (
	regexPerByte = time.Microsecond
	regexBase    = 5 * time.Second
)

// budgetError is what a regex split panics with when over budget; TryEncode and
// EncodeOffsets recover it into an error, Encode lets it through.
type budgetError struct{ err error }

func (e *budgetError) Error() string { return e.err.Error() }
func (e *budgetError) Unwrap() error { return e.err }

// genericRegex is a Split pattern compiled with regexp2.
type genericRegex struct {
	re    *regexp2.Regexp
	field string // where the pattern is in tokenizer.json, for errors
}

// compileRegex compiles a tokenizer.json regex for regexp2.
func compileRegex(pattern, field string) (*genericRegex, error) {
	re, err := regexp2.Compile(foldGroups(pattern), regexp2.None)
	if err != nil {
		// Oniguruma syntax that .NET's lacks (possessive quantifiers, say).
		return nil, fmt.Errorf("tokenizer: %s.pattern: the regular expression %q is %w by the regex engine: %v", field, pattern, ErrUnsupported, err)
	}
	re.MatchTimeout = regexMatchBudget
	return &genericRegex{re: re, field: field}, nil
}

// find covers s with the matches of the regex and the spans between them, as
// tokenizers' Pattern::find_matches for a Regex: an empty match is a span too (the
// split drops it). Over budget it panics with a *budgetError.
func (g *genericRegex) find(dst []span, s string) []span {
	l := spanList(dst)
	g.each(s, &l)
	return l
}

// each is find handing each span to f in turn.
func (g *genericRegex) each(s string, f spanSink) {
	if s == "" {
		return
	}
	runes := []rune(s)
	deadline := time.Now().Add(regexBase + time.Duration(len(s))*regexPerByte)
	// regexp2 counts runes; ri/bi walk both counts forward as matches come in order.
	ri, bi := 0, 0
	toByte := func(r int) int {
		for ri < r {
			bi += utf8.RuneLen(runes[ri])
			ri++
		}
		return bi
	}
	prev := 0
	m, err := g.re.FindRunesMatch(runes)
	for ; err == nil && m != nil; m, err = g.re.FindNextMatch(m) {
		start := toByte(m.Index)
		end := toByte(m.Index + m.Length)
		if start > prev {
			f.add(span{prev, start, false})
		}
		f.add(span{start, end, true})
		prev = end
		if time.Now().After(deadline) {
			err = fmt.Errorf("the text of %d bytes took over %v", len(s), regexBase+time.Duration(len(s))*regexPerByte)
			break
		}
	}
	if err != nil {
		// regexp2's timeout message quotes the whole input: say it shortly.
		if strings.HasPrefix(err.Error(), "match timeout") {
			err = fmt.Errorf("one match took over %v", g.re.MatchTimeout)
		}
		panic(&budgetError{fmt.Errorf("%w: %s: the regular expression %q on a text of %d bytes: %v (catastrophic backtracking?)",
			ErrBudget, g.field, g.re.String(), len(s), err)})
	}
	if prev < len(s) {
		f.add(span{prev, len(s), false})
	}
}

// foldGroups rewrites each (?i:...) group made only of literal characters and | (the
// contractions of tiktoken-style patterns, (?i:'s|'t|'re|'ve|'m|'ll|'d)) into one
// whose letters are classes of their whole Unicode simple case-folding orbit:
// Oniguruma matches case-insensitively by Unicode folding, so 's also matches 'ſ
// (U+017F folds to s), and 'k' the Kelvin sign, where regexp2 compares lower cases.
// Other groups are left as they are.
func foldGroups(p string) string {
	var sb strings.Builder
	for {
		k := strings.Index(p, "(?i:")
		if k < 0 {
			sb.WriteString(p)
			return sb.String()
		}
		end := strings.IndexByte(p[k:], ')')
		body := ""
		if end > 0 {
			body = p[k+4 : k+end]
		}
		if end < 0 || strings.ContainsAny(body, `\[](){}*+?.^$`) {
			sb.WriteString(p[:k+4])
			p = p[k+4:]
			continue
		}
		sb.WriteString(p[:k])
		sb.WriteString("(?:")
		for _, r := range body {
			orbit := []rune{r}
			for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
				orbit = append(orbit, f)
			}
			if len(orbit) == 1 {
				sb.WriteRune(r)
				continue
			}
			sb.WriteByte('[')
			for _, f := range orbit {
				sb.WriteRune(f)
			}
			sb.WriteByte(']')
		}
		sb.WriteByte(')')
		p = p[k+end+1:]
	}
}
