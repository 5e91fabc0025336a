package tokenizer

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// allocated is the bytes f allocates (runtime.MemStats.TotalAlloc), f run once.
func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

func replaceNorm(pattern, content string) map[string]any {
	return map[string]any{"type": "Replace", "pattern": map[string]any{"String": pattern}, "content": content}
}

func normalizerFile(t testing.TB, norms ...any) *Tokenizer {
	t.Helper()
	tok, err := Parse(tinyFile(t, func(m map[string]any) {
		m["normalizer"] = map[string]any{"type": "Sequence", "normalizers": norms}
	}))
	require.NoError(t, err)
	return tok
}

// TestNormalizerGrowthBudget: normalizers that grow a text past normGrowth times its
// length (three chained Replace of "a" by a thousand "a") stop with ErrBudget before
// the text is made: TryEncode returns the error, Encode and EncodeOffsets panic with it,
// and the allocation stays near the input's size, not the 10 GB the chain asks for.
func TestNormalizerGrowthBudget(t *testing.T) {
	k := strings.Repeat("a", 1000)
	tok := normalizerFile(t, replaceNorm("a", k), replaceNorm("a", k), replaceNorm("a", k))
	var err error
	got := allocated(func() { _, err = tok.TryEncode("aaaaaaaaaa", false) })
	require.ErrorIs(t, err, ErrBudget)
	require.ErrorContains(t, err, `Replace("a" → "aaaaaaaaaaaaaaaaaaaa") would make 10000 bytes of a text of 10 bytes, over the limit of 4416`)
	require.Less(t, got, uint64(64<<10), "bytes allocated")
	require.PanicsWithError(t, err.Error(), func() { tok.Encode("aaaaaaaaaa", false) })
	require.PanicsWithError(t, err.Error(), func() { tok.EncodeOffsets("aaaaaaaaaa", false) })

	// One Replace, a long line: the check counts the matches, it does not build the text.
	one := normalizerFile(t, replaceNorm("a", k))
	for _, n := range []int{1 << 16, 1 << 18} {
		line := strings.Repeat("a", n)
		got := allocated(func() { _, err = one.TryEncode(line, false) })
		require.ErrorIs(t, err, ErrBudget)
		require.Less(t, got, uint64(64<<10), "bytes allocated for a line of %d bytes", n)
	}
	// An added token whose content the chain would grow past the budget fails the load.
	_, err = Parse(tinyFile(t, func(m map[string]any) {
		m["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{replaceNorm("a", k), replaceNorm("a", k)}}
		m["added_tokens"] = append(m["added_tokens"].([]any), map[string]any{"id": 1000, "content": "aaaaa", "special": false, "normalized": true})
	}))
	require.ErrorIs(t, err, ErrBudget)
	require.ErrorContains(t, err, "added_tokens[2]: normalizing its content")
}

// TestNormalizerLegalGrowth: the largest expansions of released normalizers (NFKC's
// 11 bytes a byte, U+FDFA; Llama 2's " " to "▁", 3×; both chained, then Lowercase)
// are within the budget, on long texts too.
func TestNormalizerLegalGrowth(t *testing.T) {
	tok := normalizerFile(t, map[string]any{"type": "NFKC"}, replaceNorm(" ", "▁"), map[string]any{"type": "Lowercase"},
		map[string]any{"type": "Prepend", "prepend": "▁"})
	for _, n := range []int{1, 1000, 100000} {
		for _, unit := range []string{"\uFDFA", " ", "\uFDFA ", "\u0130"} {
			_, err := tok.TryEncode(strings.Repeat(unit, n), false)
			require.NoError(t, err, "%d × %q", n, unit)
		}
	}
}

// TestNormalizerOutLen: each normalizer's outLen is the length of its output, and
// maxLen bounds it, on texts that exercise every branch.
func TestNormalizerOutLen(t *testing.T) {
	texts := []string{"", "a", "Ça\u00a0Va\x00 中文 É\u200b", "\uFDFA \u0130 ﬁ ㍻ Å Ω", strings.Repeat("ab ", 100),
		"e\u0301\u0327 \U0001D15F 한국어 \u1100\u1161\u11A8", "AaAaA  \t\n x"}
	for _, js := range []string{
		`{"type":"Replace","pattern":{"String":"a"},"content":"xyz"}`,
		`{"type":"Replace","pattern":{"String":"ab"},"content":""}`,
		`{"type":"Replace","pattern":{"Regex":"a|b*"},"content":"<>"}`,
		`{"type":"Prepend","prepend":"▁"}`,
		`{"type":"NFC"}`, `{"type":"NFD"}`, `{"type":"NFKC"}`, `{"type":"NFKD"}`,
		`{"type":"Lowercase"}`, `{"type":"Strip","strip_left":true,"strip_right":true}`,
		`{"type":"BertNormalizer"}`,
		`{"type":"BertNormalizer","strip_accents":false,"lowercase":true}`,
		`{"type":"BertNormalizer","clean_text":false,"handle_chinese_chars":true,"strip_accents":true,"lowercase":false}`,
	} {
		n, err := parseComponent(normalizers, json.RawMessage(js), "normalizer")
		require.NoError(t, err, js)
		for _, s := range texts {
			want := len(n.normalize(s))
			require.Equal(t, want, n.outLen(s), "%s on %q", js, s)
			require.LessOrEqual(t, want, n.maxLen(len(s)), "%s on %q", js, s)
		}
	}
}

// TestParityNormalizerOutLen: outLen and maxLen hold for every normalizer of the trained
// kinds and the real files (Precompiled among them) on the parity texts.
func TestParityNormalizerOutLen(t *testing.T) {
	eachKind(t, func(t *testing.T, kind string, tok *Tokenizer, r *kindResult, texts []string) {
		if tok.normalizer == nil {
			return
		}
		steps := []normalizer{tok.normalizer}
		if q, ok := tok.normalizer.(normSequence); ok {
			steps = q
		}
		for _, s := range append(texts, fixture.fuzz...) {
			for _, n := range steps {
				out := n.normalize(s)
				require.Equal(t, len(out), n.outLen(s), "%s: %s on %q", kind, n.describe(), s)
				require.LessOrEqual(t, len(out), n.maxLen(len(s)), "%s: %s on %q", kind, n.describe(), s)
				s = out
			}
		}
	})
}
