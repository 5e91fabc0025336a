package tokenizer

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRegexBudget: a Split regex that backtracks catastrophically is stopped by its
// budget with an error naming the field and the pattern, never a hang; TryEncode
// returns it, Encode panics with it.
func TestRegexBudget(t *testing.T) {
	defer func(b, base time.Duration) { regexMatchBudget, regexBase = b, base }(regexMatchBudget, regexBase)
	regexMatchBudget, regexBase = 20*time.Millisecond, 20*time.Millisecond
	data := tinyFile(t, func(m map[string]any) {
		m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `(a+)+b`}, "behavior": "Isolated", "invert": false},
		}}
	})
	tok, err := Parse(data)
	require.NoError(t, err)
	ids, err := tok.TryEncode("aab", false) // fine on a short text
	require.NoError(t, err)
	require.NotEmpty(t, ids)

	start := time.Now()
	_, err = tok.TryEncode(strings.Repeat("a", 40)+"c", false)
	require.ErrorIs(t, err, ErrBudget)
	require.ErrorContains(t, err, `pre_tokenizer.pretokenizers[0]: the regular expression "(a+)+b"`)
	require.Less(t, time.Since(start), 5*time.Second)
	require.PanicsWithError(t, err.Error(), func() { tok.Encode(strings.Repeat("a", 40)+"c", false) })
}

// TestFoldGroups: (?i:...) contraction groups match by Unicode case folding, as
// Oniguruma's (?i), and other groups are left alone.
func TestFoldGroups(t *testing.T) {
	require.Equal(t, `(?:'[sſS]|'[tT])x(?i:[a-z]+)`, foldGroups(`(?i:'s|'t)x(?i:[a-z]+)`))
	g, err := compileRegex(`(?i:'s|'k)|\p{L}+`, "f")
	require.NoError(t, err)
	var got []string
	s := "'ſ'K'K"
	for _, sp := range g.find(nil, s) {
		got = append(got, s[sp.start:sp.end])
	}
	require.Equal(t, []string{"'ſ", "'K", "'K"}, got)
}
