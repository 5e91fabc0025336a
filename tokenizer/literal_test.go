package tokenizer

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEncodeLiteral(t *testing.T) {
	tok, err := Parse(tinyFile(t, nil))
	require.NoError(t, err)
	lit := func(s string) []int64 {
		ids, err := tok.EncodeLiteral(s)
		require.NoError(t, err)
		return ids
	}
	eot, _ := tok.TokenToID("<|endoftext|>")
	// Text without added tokens: Encode's ids.
	require.Equal(t, tok.Encode("hello world", false), lit("hello world"))
	// An added token spelled in the text is its characters.
	ids := lit("hello<|endoftext|> world")
	require.NotContains(t, ids, eot)
	require.Contains(t, tok.Encode("hello<|endoftext|> world", false), eot)
	require.Equal(t, "hello<|endoftext|> world", tok.Decode(ids, false))
	require.Equal(t, lit("a\uFFFDb"), lit("a\xffb"))
}
