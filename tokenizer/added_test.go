package tokenizer

import (
	"math/rand"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// naiveFind is the matcher the automaton replaced, kept as the reference: from each
// position in turn, the longest token that starts there (leftmost-longest).
func naiveFind(tokens map[string]int64, s string, from int) (start, end int, id int64, ok bool) {
	for i := from; i < len(s); i++ {
		best := -1
		for tok, tid := range tokens {
			if strings.HasPrefix(s[i:], tok) && len(tok) > best-i {
				best, id = i+len(tok), tid
			}
		}
		if best >= 0 {
			return i, best, id, true
		}
	}
	return 0, 0, 0, false
}

// addedFile is tinyFile with the given added tokens (not normalized, not special).
func addedFile(t testing.TB, tokens []string) *Tokenizer {
	t.Helper()
	tok, err := Parse(tinyFile(t, func(m map[string]any) {
		list := m["added_tokens"].([]any)
		for k, c := range tokens {
			list = append(list, map[string]any{"id": 1000 + k, "content": c, "special": false, "normalized": false})
		}
		m["added_tokens"] = list
	}))
	require.NoError(t, err)
	return tok
}

// TestAddedMatcherLinear: 500 added tokens "b", "ab", ..., "a…ab" (the 5000 at a
// tenth of the scale) and a line of "a": the automaton takes at most two steps a byte
// and its allocation grows with the line, not with the line times the longest token
// (the trie walk it replaced took the line's length times 500 steps). Tokens "a" and
// "a…ab", where every position starts a match, too.
func TestAddedMatcherLinear(t *testing.T) {
	var ab []string
	for k := range 500 {
		ab = append(ab, strings.Repeat("a", k)+"b")
	}
	for _, c := range []struct {
		name   string
		tokens []string
		unit   string
	}{
		{"a…ab on a", ab, "a"},
		{"a…ab on a…ab", ab, strings.Repeat("a", 700) + "b"},
		{"a and a…ab on a", []string{"a", strings.Repeat("a", 499) + "b"}, "a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tok := addedFile(t, c.tokens)
			var work [2]int64
			var alloc [2]uint64
			for k, n := range []int{1 << 16, 1 << 18} {
				text := strings.Repeat(c.unit, n/len(c.unit))
				w0 := addedWork.Load()
				alloc[k] = allocated(func() { tok.added.split(nil, text, tok.added.raw, true) })
				work[k] = addedWork.Load() - w0
				require.LessOrEqual(t, work[k], int64(2*len(text)), "steps for %d bytes", len(text))
			}
			// 4× and a tenth for the growth steps of the slices (appends grow 1.25×).
			require.LessOrEqual(t, alloc[1], 44*alloc[0]/10+64<<10, "allocation for 4× the text: %d then %d bytes", alloc[0], alloc[1])
			require.LessOrEqual(t, work[1], 4*work[0]+1000, "steps for 4× the text")
		})
	}
	// Encode goes through it too: a 256 KB line of "a" with the 500 tokens.
	tok := addedFile(t, ab)
	w0 := addedWork.Load()
	ids := tok.Encode(strings.Repeat("a", 1<<18)+"b", false)
	require.LessOrEqual(t, addedWork.Load()-w0, int64(2<<18+2))
	last, _ := tok.TokenToID(ab[499])
	require.Equal(t, last, ids[len(ids)-1])
}

// TestAddedMatcherAsNaive: the automaton finds what the trie walk found, on random
// token sets and texts over a small alphabet (overlaps, prefixes and suffixes of one
// another), single_word, lstrip and rstrip included.
func TestAddedMatcherAsNaive(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	word := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = "ab c"[rng.Intn(4)]
		}
		return string(b)
	}
	for range 300 {
		tokens := map[string]int64{}
		var list []string
		for range 1 + rng.Intn(8) {
			w := strings.TrimSpace(word(1 + rng.Intn(5)))
			if _, dup := tokens[w]; w == "" || dup {
				continue
			}
			tokens[w] = int64(1000 + len(list))
			list = append(list, w)
		}
		if len(list) == 0 {
			continue
		}
		tok := addedFile(t, list)
		for w := range tokens {
			tokens[w], _ = tok.TokenToID(w)
		}
		for range 20 {
			s := word(rng.Intn(40))
			var want []addedMatch
			for pos := 0; pos < len(s); {
				start, end, id, ok := naiveFind(tokens, s, pos)
				if !ok {
					break
				}
				want = append(want, addedMatch{start, end, id})
				pos = end
			}
			var got []addedMatch
			for _, seg := range tok.added.split(nil, s, tok.added.raw, true) {
				if seg.id >= 0 {
					got = append(got, addedMatch{seg.start, seg.end, seg.id})
				}
			}
			require.Equal(t, want, got, "tokens %q, text %q", list, s)
		}
	}
}
