package tokenizer

import (
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// byteOffsets converts character offsets in text to byte offsets.
func byteOffsets(text string, chars [][2]int) [][2]int {
	starts := make([]int, 0, len(text)+1)
	for i := range text {
		starts = append(starts, i)
	}
	starts = append(starts, len(text))
	out := make([][2]int, len(chars))
	for k, c := range chars {
		out[k] = [2]int{starts[c[0]], starts[c[1]]}
	}
	return out
}

// TestParityOffsets compares EncodeOffsets with tokenizers' offsets (the fixture's, in
// characters) on every parity kind (byte-level splits of multi-byte characters, NFC, NFD
// and NFKC, Prepend and Replace, Metaspace, added tokens with lstrip and rstrip,
// normalized added tokens, byte fallback, unk, BertNormalizer, WordPiece, RoBERTa's
// trimming), on GPT-2's trimming post-processor (gpt2trim) and on the real files, for
// the corpus and the random strings, with and without special tokens.
func TestParityOffsets(t *testing.T) {
	dir, texts, res := trained(t)
	for _, kind := range append(allKinds(), "gpt2trim") {
		t.Run(kind, func(t *testing.T) {
			skipMissing(t, kind)
			tok := loadKind(t, dir, kind)
			r := res[kind]
			bad := 0
			for i, text := range texts {
				ids, offs := tok.EncodeOffsets(text, true)
				require.Equal(t, tok.Encode(text, true), ids, "text %d %q", i, text)
				require.True(t, equalIDs(r.Special[i], ids), "text %d %q: %v, tokenizers %v", i, text, ids, r.Special[i])
				want := byteOffsets(text, r.Offsets[i])
				if !equalOffsets(want, offs) && bad < 5 {
					bad++
					t.Errorf("text %d %q:\n go     %v\n python %v", i, text, offs, want)
				}
				ids, offs = tok.EncodeOffsets(text, false)
				require.Equal(t, tok.Encode(text, false), ids, "text %d %q", i, text)
				want = byteOffsets(text, r.PlainOffsets[i])
				if !equalOffsets(want, offs) && bad < 5 {
					bad++
					t.Errorf("text %d %q without special tokens:\n go     %v\n python %v", i, text, offs, want)
				}
			}
		})
	}
}

// TestParityOffsetsReachTrim checks that the offsets of the parity inputs depend on the
// trimming post-processors: without RoBERTa's trim_offsets, or GPT-2's, some differ from
// tokenizers'.
func TestParityOffsetsReachTrim(t *testing.T) {
	dir, texts, res := trained(t)
	for _, kind := range []string{"roberta", "gpt2trim"} {
		tok := loadKind(t, dir, kind)
		require.NotNil(t, tok.trim, kind)
		tok.trim = nil
		differ := 0
		for i, text := range texts {
			if _, offs := tok.EncodeOffsets(text, true); !equalOffsets(byteOffsets(text, res[kind].Offsets[i]), offs) {
				differ++
			}
		}
		require.Positive(t, differ, "%s: no parity input depends on trim_offsets", kind)
	}
}

func equalOffsets(a, b [][2]int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestEncodeOffsetsInvalidUTF8 checks that the U+FFFD Encode puts for a run of invalid
// bytes covers the run, and that every range lies within the text.
func TestEncodeOffsetsInvalidUTF8(t *testing.T) {
	tok, err := Parse(tinyFile(t, nil))
	require.NoError(t, err)
	text := "hello\xff\xfe world"
	ids, offs := tok.EncodeOffsets(text, true)
	require.Equal(t, tok.Encode(text, true), ids)
	require.Equal(t, [2]int{0, 0}, offs[0], "the template's BOS has no text")
	require.Equal(t, [2]int{0, 5}, offs[1], "hello")
	// Each invalid byte is a U+FFFD of its own (as Python's errors="replace"), and the
	// byte-level tokens of each U+FFFD (3 bytes) cover its byte.
	for _, o := range offs[2:5] {
		require.Equal(t, [2]int{5, 6}, o)
	}
	for _, o := range offs[5:8] {
		require.Equal(t, [2]int{6, 7}, o)
	}
	require.Equal(t, [2]int{7, len(text)}, offs[len(offs)-1], " world")
	for _, o := range offs {
		require.LessOrEqual(t, o[0], o[1])
		require.LessOrEqual(t, o[1], len(text))
	}
	require.True(t, utf8.ValidString(text[offs[1][0]:offs[1][1]]))
}
