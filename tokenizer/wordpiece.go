package tokenizer

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// wordPiece is the WordPiece model (BERT's): a word is split longest match first, from
// its start: the longest vocabulary token that begins the rest of the word (with the
// continuing_subword_prefix, "##", after the first token) is taken, and so on. A word
// with a part no token begins, or longer than max_input_chars_per_word characters, is
// the unk token alone, as tokenizers' WordPiece::tokenize.
//
// The longest match is a walk down a trie of the tokens, one step per byte, so a word
// costs at most its length times the longest token's (tokenizers tries every shorter end
// in turn, each a hash of the candidate); max_input_chars_per_word bounds the word.
type wordPiece struct {
	vocab    map[string]int32
	idTokens idTable
	unk      int32 // -1: unk_token is not in the vocabulary
	prefix   string
	maxChars int
	// edges maps node<<8|byte to the child node; node 0 is the root of the tokens that
	// begin a word, node 1 of the tokens that continue one (less their prefix).
	edges map[uint64]int32
	ids   []int32 // ids[node] is the token ending there, -1 if none
}

func parseWordPiece(raw json.RawMessage) (*wordPiece, error) {
	j := struct {
		UnkToken string           `json:"unk_token"`
		Prefix   string           `json:"continuing_subword_prefix"`
		MaxChars int64            `json:"max_input_chars_per_word"`
		Vocab    map[string]int64 `json:"vocab"`
	}{UnkToken: "[UNK]", Prefix: "##", MaxChars: 100}
	if err := decodeField(raw, "model", &j); err != nil {
		return nil, err
	}
	if j.MaxChars < 0 {
		return nil, fmt.Errorf("tokenizer: model.max_input_chars_per_word is %d, negative", j.MaxChars)
	}
	m := &wordPiece{
		vocab:    make(map[string]int32, len(j.Vocab)),
		unk:      -1,
		prefix:   j.Prefix,
		maxChars: int(min(j.MaxChars, math.MaxInt32)),
		edges:    make(map[uint64]int32, 4*len(j.Vocab)),
		ids:      []int32{-1, -1},
	}
	for tok, id := range j.Vocab {
		if id < 0 || id > math.MaxInt32 {
			return nil, fmt.Errorf("tokenizer: model.vocab: token %q has id %d, outside [0, %d]", tok, id, math.MaxInt32)
		}
		m.vocab[tok] = int32(id)
	}
	m.idTokens = newIDTable(m.vocab)
	// Without the unk token in the vocabulary, tokenizers fails to encode a word that
	// needs it; such a word is left out here, as Unigram's unknown pieces are.
	if id, ok := m.vocab[j.UnkToken]; ok {
		m.unk = id
	}
	for tok, id := range m.vocab {
		m.insert(0, tok, id)
		if rest, ok := strings.CutPrefix(tok, m.prefix); ok {
			m.insert(1, rest, id)
		}
	}
	return m, nil
}

func (m *wordPiece) insert(root int32, s string, id int32) {
	if s == "" {
		return // never matched: a match is never empty
	}
	n := root
	for i := 0; i < len(s); i++ {
		k := uint64(n)<<8 | uint64(s[i])
		next, ok := m.edges[k]
		if !ok {
			next = int32(len(m.ids))
			m.ids = append(m.ids, -1)
			m.edges[k] = next
		}
		n = next
	}
	m.ids[n] = id
}

func (m *wordPiece) tables() (map[string]int32, *idTable) { return m.vocab, &m.idTokens }

// longest returns the end and id of the longest token that begins w[start:] (a
// continuing one when start > 0), or ok false. Tokens are valid UTF-8, so a match ends
// on a character boundary, as tokenizers' character-by-character search does.
func (m *wordPiece) longest(w string, start int) (end int, id int32, ok bool) {
	n := int32(0)
	if start > 0 {
		n = 1
	}
	for i := start; i < len(w); i++ {
		next, found := m.edges[uint64(n)<<8|uint64(w[i])]
		if !found {
			break
		}
		n = next
		if m.ids[n] >= 0 {
			end, id, ok = i+1, m.ids[n], true
		}
	}
	return end, id, ok
}

func (m *wordPiece) wordTokens(dst []wordToken, w string) []wordToken {
	unk := func() []wordToken {
		if m.unk < 0 {
			return dst
		}
		return append(dst, wordToken{m.unk, 0, len(w)})
	}
	if utf8.RuneCountInString(w) > m.maxChars {
		return unk()
	}
	mark := len(dst)
	for start := 0; start < len(w); {
		end, id, ok := m.longest(w, start)
		if !ok {
			dst = dst[:mark]
			return unk()
		}
		dst = append(dst, wordToken{id, start, end})
		start = end
	}
	return dst
}

func (m *wordPiece) encodeWord(dst []int64, w string) []int64 {
	var buf [16]wordToken
	for _, t := range m.wordTokens(buf[:0], w) {
		dst = append(dst, int64(t.id))
	}
	return dst
}

// normBert is the BertNormalizer: with clean_text, NUL, U+FFFD and control characters
// (other than tab, newline and return) are removed and whitespace becomes a space; with
// handle_chinese_chars, CJK ideographs get a space on each side; with strip_accents
// (when the file has null there, it follows lowercase), the text is decomposed (NFD)
// and nonspacing marks are removed; with lowercase, each character is lowercased.
type normBert struct {
	cleanText, chinese, stripAccents, lowercase bool
}

func parseBertNormalizer(raw json.RawMessage, field string) (normBert, error) {
	j := struct {
		CleanText    bool  `json:"clean_text"`
		Chinese      bool  `json:"handle_chinese_chars"`
		StripAccents *bool `json:"strip_accents"`
		Lowercase    bool  `json:"lowercase"`
	}{CleanText: true, Chinese: true, Lowercase: true}
	if err := decodeField(raw, field, &j); err != nil {
		return normBert{}, err
	}
	n := normBert{cleanText: j.CleanText, chinese: j.Chinese, stripAccents: j.Lowercase, lowercase: j.Lowercase}
	if j.StripAccents != nil {
		n.stripAccents = *j.StripAccents
	}
	return n, nil
}

func (n normBert) normalize(s string) string {
	if n.cleanText {
		s = strings.Map(func(r rune) rune {
			switch {
			case bertRemoved(r):
				return -1
			case bertSpace(r):
				return ' '
			}
			return r
		}, s)
	}
	if n.chinese {
		var sb strings.Builder
		for _, r := range s {
			if isChineseChar(r) {
				sb.WriteByte(' ')
				sb.WriteRune(r)
				sb.WriteByte(' ')
			} else {
				sb.WriteRune(r)
			}
		}
		s = sb.String()
	}
	if n.stripAccents {
		s = strings.Map(func(r rune) rune {
			if isBertMn(r) {
				return -1
			}
			return r
		}, norm.NFD.String(s))
	}
	if n.lowercase {
		s = normLowercase{}.normalize(s)
	}
	return s
}

// normalizeAligned is normalize with alignments, as tokenizers' NormalizedString filter,
// map, transform, nfd and lowercase keep them.
func (n normBert) normalizeAligned(s alignedText) alignedText {
	if n.cleanText {
		s = filterAligned(s, func(r rune) bool { return !bertRemoved(r) })
		if s.text != "" {
			ch := make([]change, 0, len(s.text))
			for _, r := range s.text {
				if bertSpace(r) {
					r = ' '
				}
				ch = append(ch, change{r, 0})
			}
			s = transformAligned(s, ch)
		}
	}
	if n.chinese && s.text != "" {
		ch := make([]change, 0, len(s.text))
		for _, r := range s.text {
			if isChineseChar(r) {
				ch = append(ch, change{' ', 0}, change{r, 1}, change{' ', 1})
			} else {
				ch = append(ch, change{r, 0})
			}
		}
		s = transformAligned(s, ch)
	}
	if n.stripAccents {
		s = filterAligned(unicodeAligned(s, norm.NFD), func(r rune) bool { return !isBertMn(r) })
	}
	if n.lowercase && s.text != "" {
		s = transformAligned(s, lowercaseChanges(s.text))
	}
	return s
}

// filterAligned is NormalizedString::filter: the characters keep does not hold for are
// removed; the alignments of the others are theirs.
func filterAligned(s alignedText, keep func(rune) bool) alignedText {
	var sb strings.Builder
	al := make([][2]int, 0, len(s.al))
	for i, r := range s.text {
		if keep(r) {
			n := utf8.RuneLen(r)
			sb.WriteString(s.text[i : i+n])
			al = append(al, s.al[i:i+n]...)
		}
	}
	return alignedText{sb.String(), al}
}

// bertRemoved is what clean_text removes: NUL, U+FFFD, and tokenizers' is_control
// (the unicode_categories crate's Cc, Cf and Co, other than tab, newline and return).
// That crate's tables are older than Go's: the format characters Unicode assigned since
// are kept, as tokenizers keeps them.
func bertRemoved(r rune) bool {
	switch r {
	case 0, 0xFFFD:
		return true
	case '\t', '\n', '\r':
		return false
	}
	if r < utf8.RuneSelf {
		return r < ' ' || r == 0x7F
	}
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co) && !unicode.Is(newerCf, r)
}

// bertSpace is tokenizers' BERT is_whitespace: tab, newline, return, or White_Space.
func bertSpace(r rune) bool { return unicode.IsSpace(r) }

// isChineseChar is tokenizers' is_chinese_char: the CJK ideograph blocks.
func isChineseChar(r rune) bool {
	switch {
	case r >= 0x4E00 && r <= 0x9FFF, r >= 0x3400 && r <= 0x4DBF, r >= 0x20000 && r <= 0x2A6DF,
		r >= 0x2A700 && r <= 0x2B73F, r >= 0x2B740 && r <= 0x2B81F, r >= 0x2B920 && r <= 0x2CEAF,
		r >= 0xF900 && r <= 0xFAFF, r >= 0x2F800 && r <= 0x2FA1F:
		return true
	}
	return false
}

// isBertMn is the unicode_categories crate's Mn, which strip_accents removes: Go's Mn
// less the marks Unicode assigned after the crate's tables, plus U+1734, Mn then.
func isBertMn(r rune) bool {
	if r < 0x300 {
		return false
	}
	return (unicode.Is(unicode.Mn, r) && !unicode.Is(newerMn, r)) || r == 0x1734
}

// newerCf are format characters (Cf) that tokenizers' unicode_categories tables do not
// have; newerMn the same for nonspacing marks (Mn). Both are the differences between
// Go's tables and tokenizers 0.23's answers over every code point.
var newerCf = &unicode.RangeTable{
	R16: []unicode.Range16{{0x890, 0x891, 1}, {0x8E2, 0x8E2, 1}},
	R32: []unicode.Range32{{0x110CD, 0x110CD, 1}, {0x13430, 0x1343F, 1}},
}

var newerMn = &unicode.RangeTable{
	R16: []unicode.Range16{
		{0x7FD, 0x7FD, 1}, {0x898, 0x89F, 1}, {0x8CA, 0x8E1, 1}, {0x9FE, 0x9FE, 1}, {0xAFA, 0xAFF, 1},
		{0xB55, 0xB55, 1}, {0xC04, 0xC04, 1}, {0xC3C, 0xC3C, 1}, {0xD00, 0xD00, 1}, {0xD3B, 0xD3C, 1},
		{0xD81, 0xD81, 1}, {0xEBA, 0xEBA, 1}, {0xECE, 0xECE, 1}, {0x180F, 0x180F, 1}, {0x1885, 0x1886, 1},
		{0x1ABF, 0x1ACE, 1}, {0x1DF6, 0x1DFB, 1}, {0xA82C, 0xA82C, 1}, {0xA8C5, 0xA8C5, 1},
		{0xA8FF, 0xA8FF, 1}, {0xA9BD, 0xA9BD, 1},
	},
	R32: []unicode.Range32{
		{0x10D24, 0x10D27, 1}, {0x10EAB, 0x10EAC, 1}, {0x10EFD, 0x10EFF, 1}, {0x10F46, 0x10F50, 1},
		{0x10F82, 0x10F85, 1}, {0x11070, 0x11070, 1}, {0x11073, 0x11074, 1}, {0x110C2, 0x110C2, 1},
		{0x111C9, 0x111C9, 1}, {0x111CF, 0x111CF, 1}, {0x1123E, 0x1123E, 1}, {0x11241, 0x11241, 1},
		{0x1133B, 0x1133B, 1}, {0x11438, 0x1143F, 1}, {0x11442, 0x11444, 1}, {0x11446, 0x11446, 1},
		{0x1145E, 0x1145E, 1}, {0x1182F, 0x11837, 1}, {0x11839, 0x1183A, 1}, {0x1193B, 0x1193C, 1},
		{0x1193E, 0x1193E, 1}, {0x11943, 0x11943, 1}, {0x119D4, 0x119D7, 1}, {0x119DA, 0x119DB, 1},
		{0x119E0, 0x119E0, 1}, {0x11A01, 0x11A0A, 1}, {0x11A33, 0x11A38, 1}, {0x11A3B, 0x11A3E, 1},
		{0x11A47, 0x11A47, 1}, {0x11A51, 0x11A56, 1}, {0x11A59, 0x11A5B, 1}, {0x11A8A, 0x11A96, 1},
		{0x11A98, 0x11A99, 1}, {0x11C30, 0x11C36, 1}, {0x11C38, 0x11C3D, 1}, {0x11C3F, 0x11C3F, 1},
		{0x11C92, 0x11CA7, 1}, {0x11CAA, 0x11CB0, 1}, {0x11CB2, 0x11CB3, 1}, {0x11CB5, 0x11CB6, 1},
		{0x11D31, 0x11D36, 1}, {0x11D3A, 0x11D3A, 1}, {0x11D3C, 0x11D3D, 1}, {0x11D3F, 0x11D45, 1},
		{0x11D47, 0x11D47, 1}, {0x11D90, 0x11D91, 1}, {0x11D95, 0x11D95, 1}, {0x11D97, 0x11D97, 1},
		{0x11EF3, 0x11EF4, 1}, {0x11F00, 0x11F01, 1}, {0x11F36, 0x11F3A, 1}, {0x11F40, 0x11F40, 1},
		{0x11F42, 0x11F42, 1}, {0x13440, 0x13440, 1}, {0x13447, 0x13455, 1}, {0x16F4F, 0x16F4F, 1},
		{0x16FE4, 0x16FE4, 1}, {0x1CF00, 0x1CF2D, 1}, {0x1CF30, 0x1CF46, 1}, {0x1E000, 0x1E006, 1},
		{0x1E008, 0x1E018, 1}, {0x1E01B, 0x1E021, 1}, {0x1E023, 0x1E024, 1}, {0x1E026, 0x1E02A, 1},
		{0x1E08F, 0x1E08F, 1}, {0x1E130, 0x1E136, 1}, {0x1E2AE, 0x1E2AE, 1}, {0x1E2EC, 0x1E2EF, 1},
		{0x1E4EC, 0x1E4EF, 1}, {0x1E944, 0x1E94A, 1},
	},
}

// decWordPiece is the WordPiece decoder: every token but the first is joined with a
// space, unless it begins with the prefix, which is removed; with cleanup, the spaces
// BERT's tokenization puts before punctuation and contractions are taken out again.
type decWordPiece struct {
	prefix  string
	cleanup bool
}

func (d decWordPiece) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for k, t := range tokens {
		if k != 0 {
			if strings.HasPrefix(t, d.prefix) {
				t = strings.Replace(t, d.prefix, "", 1)
			} else {
				t = " " + t
			}
		}
		if d.cleanup {
			t = wordPieceCleanup(t)
		}
		out[k] = t
	}
	return out
}

// wordPieceCleanups are the replacements of tokenizers' decoders::wordpiece::cleanup,
// made one after the other.
var wordPieceCleanups = [][2]string{
	{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
	{" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
}

func wordPieceCleanup(s string) string {
	for _, p := range wordPieceCleanups {
		s = strings.ReplaceAll(s, p[0], p[1])
	}
	return s
}
