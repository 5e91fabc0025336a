package tokenizer

import (
	"encoding/json"
	"math/rand"
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

// TestLongLineAllocation: Encode streams a long line through the pre-tokenizer and the
// model piece by piece (no list of spans or pieces of the whole line): the bytes it
// allocates grow linearly with the line (4× the line, 4× the bytes, give or take the
// growth steps of the id slice) and stay under 16 bytes a byte of text, the ids
// (8 bytes a token, appended) included. Before, the spans and pieces of the whole line
// took 52 to 58 bytes a byte with ByteLevel, and a 60 MB line 3.4 GB.
func TestLongLineAllocation(t *testing.T) {
	split := func(pattern map[string]any, behavior string, invert bool) map[string]any {
		return map[string]any{"type": "Split", "pattern": pattern, "behavior": behavior, "invert": invert}
	}
	for _, c := range []struct {
		name    string
		pre     any // nil: tinyFile's ByteLevel
		perByte int
	}{
		{"ByteLevel", nil, 8},
		{"Metaspace", map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}, 8},
		{"Whitespace", map[string]any{"type": "Whitespace"}, 8},
		{"BertPreTokenizer", map[string]any{"type": "BertPreTokenizer"}, 8},
		{"Digits", map[string]any{"type": "Digits", "individual_digits": false}, 8},
		// regexp2 allocates for each match (garbage, not held): linear, but more.
		{"Split regexp2 + ByteLevel", map[string]any{"type": "Sequence", "pretokenizers": []any{
			split(map[string]any{"Regex": `\s+|[^\s]+(?=\s|$)`}, "Isolated", false),
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false},
		}}, 200},
		{"Split string MergedWithPrevious", split(map[string]any{"String": " "}, "MergedWithPrevious", false), 8},
		{"Split string Contiguous invert", split(map[string]any{"String": "o"}, "Contiguous", true), 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			tok, err := Parse(tinyFile(t, func(m map[string]any) {
				if c.pre != nil {
					m["pre_tokenizer"] = c.pre
				}
			}))
			require.NoError(t, err)
			unit := "hello world 12 tokens, "
			tok.Encode(strings.Repeat(unit, 100), false) // the word cache
			var alloc [2]uint64
			for k, n := range []int{1 << 18, 1 << 20} {
				text := strings.Repeat(unit, n/len(unit))
				ids := make([]int64, 0, len(text)+16)
				alloc[k] = allocated(func() { tok.AppendEncode(ids, text, false) })
				t.Logf("%d bytes: %d allocated, %.1f a byte", len(text), alloc[k], float64(alloc[k])/float64(len(text)))
				require.Less(t, alloc[k], uint64(c.perByte*len(text)), "bytes allocated for a line of %d bytes", len(text))
			}
			require.LessOrEqual(t, alloc[1], 44*alloc[0]/10+64<<10, "allocation for 4× the line: %d then %d bytes", alloc[0], alloc[1])
		})
	}
}

// TestSplitterAsApplyBehavior: the streaming splitter yields the pieces that
// applyBehavior's ranges (the offsets' path) give, for every behavior, on random tilings
// with empty matches, runs of matches and inversion.
func TestSplitterAsApplyBehavior(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for range 2000 {
		n := rng.Intn(12)
		text := "abcdefghijkl"[:n]
		var spans []span
		for i := 0; i < n || (i == n && rng.Intn(3) == 0 && len(spans) < 20); {
			l := rng.Intn(3)
			if i+l > n {
				l = n - i
			}
			if l == 0 && i == n {
				spans = append(spans, span{i, i, true})
				break
			}
			spans = append(spans, span{i, i + l, l == 0 || rng.Intn(2) == 0})
			i += l
		}
		for b := splitRemoved; b <= splitContiguous; b++ {
			for _, invert := range []bool{false, true} {
				p := piece{text: text, atStart: true}
				var want []piece
				in := append([]span(nil), spans...)
				if invert {
					for k := range in {
						in[k].match = !in[k].match
					}
				}
				for _, sp := range applyBehavior(in, b) {
					if sp.end > sp.start {
						want = append(want, piece{text[sp.start:sp.end], sp.start == 0})
					}
				}
				var got []piece
				z := getSplitter(p, b, func(c piece) { got = append(got, c) })
				z.invert = invert
				for _, sp := range spans {
					z.add(sp)
				}
				z.done()
				require.Equal(t, want, got, "behavior %d invert %v spans %v", b, invert, spans)
			}
		}
	}
}

// TestLongWordAllocation: without a pre-tokenizer (Llama 2's files) a line is one word
// for BPE, which merges it whole, exactly; its slices are sized once from the word's
// length, so a word allocates about 44 bytes a byte (16 a symbol, 24 a queued merge, 4
// an id), 4× for 4× the word, where append's growth made it 116.
func TestLongWordAllocation(t *testing.T) {
	tok, err := Parse(tinyFile(t, func(m map[string]any) { m["pre_tokenizer"] = nil }))
	require.NoError(t, err)
	var alloc [2]uint64
	for k, n := range []int{1 << 18, 1 << 20} {
		text := strings.Repeat("hello world ", n/12)
		ids := make([]int64, 0, len(text))
		alloc[k] = allocated(func() { tok.AppendEncode(ids, text, false) })
		require.Less(t, alloc[k], uint64(48*len(text)), "bytes allocated for a word of %d bytes", len(text))
	}
	require.LessOrEqual(t, alloc[1], 44*alloc[0]/10+64<<10, "allocation for 4× the word: %d then %d bytes", alloc[0], alloc[1])
}

// TestUnigramLongPiece: a Unigram vocabulary with one 5000-byte piece no text continues
// costs each position of a word the bytes that some piece continues with (here two or
// three steps), not a lookup of every length up to the longest piece (5000 lookups of up
// to 5000 bytes each at every position); the pieces are the ones the lookups found.
func TestUnigramLongPiece(t *testing.T) {
	long := strings.Repeat("c", 5000)
	file := map[string]any{
		"version": "1.0", "added_tokens": []any{}, "normalizer": nil, "pre_tokenizer": nil,
		"post_processor": nil, "decoder": nil,
		"model": map[string]any{"type": "Unigram", "unk_id": 0, "byte_fallback": false,
			"vocab": []any{[]any{"<unk>", 0.0}, []any{"a", -1.0}, []any{"b", -2.0}, []any{"ab", -2.5}, []any{long, -1.0}, []any{"cc", -1.5}}},
	}
	data, err := json.Marshal(file)
	require.NoError(t, err)
	tok, err := Parse(data)
	require.NoError(t, err)
	text := strings.Repeat("ab", 1<<15)
	w0 := unigramWork.Load()
	ids := tok.Encode(text, false)
	require.LessOrEqual(t, unigramWork.Load()-w0, int64(3*len(text)))
	require.Len(t, ids, 1<<15)
	abID, _ := tok.TokenToID("ab")
	require.Equal(t, abID, ids[0])
	longID, _ := tok.TokenToID(long)
	ccID, _ := tok.TokenToID("cc")
	require.Equal(t, []int64{longID, abID}, tok.Encode(long+"ab", false))
	require.Equal(t, []int64{ccID, abID, 0}, tok.Encode("ccabc", false), "c alone is unknown")
}
