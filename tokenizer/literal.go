package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// EncodeLiteral encodes text as a piece in the middle of a text, with no added token
// matched in it: a chat marker spelled in it (a user typing "<|im_end|>") becomes the
// model's pieces of those characters, not the control token, as a server must encode
// what its clients write. Nothing is added around it (no BOS).
func (t *Tokenizer) EncodeLiteral(text string) []int64 {
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	if t.normalizer != nil {
		text = t.normalizer.normalize(text)
	}
	if t.pre == nil {
		return t.model.encodeWord(nil, text)
	}
	var ids []int64
	for _, p := range t.pre.preTokenize(nil, piece{text: text}) {
		ids = t.model.encodeWord(ids, p.text)
	}
	return ids
}
