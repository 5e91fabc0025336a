package tokenizer

import "unicode/utf8"

// EncodeLiteral encodes text as a piece in the middle of a text, with no added token
// matched in it: a chat marker spelled in it (a user typing "<|im_end|>") becomes the
// model's pieces of those characters, not the control token, as a server must encode
// what its clients write. Nothing is added around it (no BOS). A text over the
// tokenizer's budgets is an error (ErrBudget), as in TryEncode.
func (t *Tokenizer) EncodeLiteral(text string) (ids []int64, err error) {
	defer catchBudget(&err)
	if !utf8.ValidString(text) {
		text = lossyString(text)
	}
	if t.normalizer != nil {
		text = normalizeWithin(t.normalizer, text, normLimit(len(text)))
	}
	if t.pre == nil {
		return t.model.encodeWord(nil, text), nil
	}
	var out []int64
	t.pre.preTokenize(piece{text: text}, func(p piece) { out = t.model.encodeWord(out, p.text) })
	return out, nil
}
