package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testpy"
)

// offsetsScript encodes the texts with each tokenizer.json in args["files"] and prints
// ids and offsets (characters, as Python counts them). It also writes gpt2trim.json: the
// gpt2 kind with GPT-2's own post-processor (ByteLevel with trim_offsets), whose offsets
// drop the spaces at a token's ends.
const offsetsScript = `
import json, os, sys
from tokenizers import Tokenizer, processors
args = json.load(open(sys.argv[1], encoding="utf-8"))
d = args["dir"]
tok = Tokenizer.from_file(os.path.join(d, "gpt2.json"))
tok.post_processor = processors.ByteLevel(add_prefix_space=True, trim_offsets=True)
tok.save(os.path.join(d, "gpt2trim.json"))
out = {}
for kind in args["kinds"]:
    tok = Tokenizer.from_file(os.path.join(d, kind + ".json"))
    r = {"ids": [], "offsets": [], "plain_offsets": []}
    for text in args["texts"]:
        e = tok.encode(text, add_special_tokens=True)
        r["ids"].append(e.ids)
        r["offsets"].append(e.offsets)
        r["plain_offsets"].append(tok.encode(text, add_special_tokens=False).offsets)
    out[kind] = r
json.dump(out, sys.stdout)
`

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

// TestParityOffsets compares EncodeOffsets with tokenizers' offsets on every parity
// kind (byte-level splits of multi-byte characters, NFC, NFD and NFKC, Prepend and
// Replace, Metaspace, added tokens with lstrip and rstrip, normalized added tokens, byte
// fallback, unk) and on GPT-2's trimming post-processor, for the corpus and the random
// strings, with and without special tokens.
func TestParityOffsets(t *testing.T) {
	dir, texts, _ := trained(t)
	all := append(append([]string(nil), kinds...), "gpt2trim")
	in, err := json.Marshal(map[string]any{"dir": dir, "kinds": all, "texts": texts})
	require.NoError(t, err)
	args := filepath.Join(t.TempDir(), "args.json")
	require.NoError(t, os.WriteFile(args, in, 0o644))
	var res map[string]struct {
		IDs          [][]int64  `json:"ids"`
		Offsets      [][][2]int `json:"offsets"`
		PlainOffsets [][][2]int `json:"plain_offsets"`
	}
	require.NoError(t, json.Unmarshal(testpy.Run(t, offsetsScript, []string{"tokenizers"}, args), &res))
	for _, kind := range all {
		t.Run(kind, func(t *testing.T) {
			tok := loadKind(t, dir, kind)
			r := res[kind]
			bad := 0
			for i, text := range texts {
				ids, offs := tok.EncodeOffsets(text, true)
				require.Equal(t, tok.Encode(text, true), ids, "text %d %q", i, text)
				require.True(t, equalIDs(r.IDs[i], ids), "text %d %q: %v, tokenizers %v", i, text, ids, r.IDs[i])
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
	// The byte-level tokens of U+FFFD (3 bytes) each cover the two invalid bytes.
	for _, o := range offs[2:5] {
		require.Equal(t, [2]int{5, 7}, o)
	}
	require.Equal(t, [2]int{7, len(text)}, offs[len(offs)-1], " world")
	for _, o := range offs {
		require.LessOrEqual(t, o[0], o[1])
		require.LessOrEqual(t, o[1], len(text))
	}
	require.True(t, utf8.ValidString(text[offs[1][0]:offs[1][1]]))
}
