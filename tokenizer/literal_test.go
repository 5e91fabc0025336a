package tokenizer

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEncodeLiteral(t *testing.T) {
	tok, err := Parse(tinyFile(t, nil))
	require.NoError(t, err)
	eot, _ := tok.TokenToID("<|endoftext|>")
	// Text without added tokens: Encode's ids.
	require.Equal(t, tok.Encode("hello world", false), tok.EncodeLiteral("hello world"))
	// An added token spelled in the text is its characters.
	ids := tok.EncodeLiteral("hello<|endoftext|> world")
	require.NotContains(t, ids, eot)
	require.Contains(t, tok.Encode("hello<|endoftext|> world", false), eot)
	require.Equal(t, "hello<|endoftext|> world", tok.Decode(ids, false))
	require.Equal(t, tok.EncodeLiteral("a\uFFFDb"), tok.EncodeLiteral("a\xffb"))
}
