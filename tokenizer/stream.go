package tokenizer

import (
	"fmt"
	"strings"
)

// DecodeStream decodes ids one at a time, as a generator produces them, and returns text
// only once it is complete: a character whose bytes span several tokens comes out when
// its last byte arrives, and decoders that look at neighbouring tokens (Llama 2's strip
// of the first space) give the same text as decoding all ids at once. It is tokenizers'
// DecodeStream, step for step. A DecodeStream is not safe for concurrent use.
type DecodeStream struct {
	t           *Tokenizer
	skip        bool
	ids         []int64
	prefix      string
	prefixIndex int
}

// NewDecodeStream starts a stream; skipSpecialTokens is as for Decode.
func (t *Tokenizer) NewDecodeStream(skipSpecialTokens bool) *DecodeStream {
	return &DecodeStream{t: t, skip: skipSpecialTokens}
}

// Step adds the next id and returns the text it completes, or "" when there is none yet
// (the id ends in the middle of a character, or is skipped). The error reports a decoder
// whose text for more ids does not extend its text for fewer, which no supported
// decoder does.
func (s *DecodeStream) Step(id int64) (string, error) {
	if s.prefix == "" && len(s.ids) > 0 {
		if p := s.t.Decode(s.ids, s.skip); !strings.HasSuffix(p, "\uFFFD") {
			s.prefix, s.prefixIndex = p, len(s.ids)
		}
	}
	s.ids = append(s.ids, id)
	text := s.t.Decode(s.ids, s.skip)
	if len(text) <= len(s.prefix) || strings.HasSuffix(text, "\uFFFD") {
		return "", nil
	}
	if !strings.HasPrefix(text, s.prefix) {
		return "", fmt.Errorf("tokenizer: decode stream: after id %d the text %q does not start with the text already returned, %q", id, text, s.prefix)
	}
	out := text[len(s.prefix):]
	newIndex := len(s.ids) - s.prefixIndex
	s.ids = append(s.ids[:0], s.ids[s.prefixIndex:]...)
	s.prefix = s.t.Decode(s.ids, s.skip)
	s.prefixIndex = newIndex
	return out, nil
}

// Flush returns the text the stream holds back at the end of a generation (bytes that
// never completed a character, as U+FFFD) and empties the stream.
func (s *DecodeStream) Flush() string {
	text := s.t.Decode(s.ids, s.skip)
	out := ""
	if len(text) > len(s.prefix) && strings.HasPrefix(text, s.prefix) {
		out = text[len(s.prefix):]
	}
	s.ids, s.prefix, s.prefixIndex = s.ids[:0], "", 0
	return out
}
