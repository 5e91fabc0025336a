package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// A decoder turns the tokens of some ids back into text, as tokenizers' Decoder:
// decodeChain maps token strings to token strings, and Decode joins the last ones.
type decoder interface {
	decodeChain(tokens []string) []string
}

type decSequence []decoder

func (q decSequence) decodeChain(tokens []string) []string {
	for _, d := range q {
		tokens = d.decodeChain(tokens)
	}
	return tokens
}

// decByteLevel maps GPT-2's byte characters back to bytes; a token holding any other
// character stays as its UTF-8 bytes (an added token such as "<|endoftext|>" is
// made of byte characters anyway). The bytes of all tokens are one text, so a character
// split across tokens comes out whole; invalid UTF-8 becomes U+FFFD as Rust's
// String::from_utf8_lossy does.
type decByteLevel struct{}

func (decByteLevel) decodeChain(tokens []string) []string {
	var buf []byte
	for _, t := range tokens {
		mark := len(buf)
		ok := true
		for _, r := range t {
			b, found := byteLevelBytes[r]
			if !found {
				ok = false
				break
			}
			buf = append(buf, b)
		}
		if !ok {
			buf = append(buf[:mark], t...)
		}
	}
	return []string{lossyUTF8(buf)}
}

// decByteFallback turns runs of <0xNN> tokens into the text of their bytes, or one
// U+FFFD per byte when the run is not valid UTF-8.
type decByteFallback struct{}

func (decByteFallback) decodeChain(tokens []string) []string {
	out := make([]string, 0, len(tokens))
	var run []byte
	flush := func() {
		if len(run) == 0 {
			return
		}
		if utf8.Valid(run) {
			out = append(out, string(run))
		} else {
			for range run {
				out = append(out, "\uFFFD")
			}
		}
		run = run[:0]
	}
	for _, t := range tokens {
		if b, ok := byteToken(t); ok {
			run = append(run, b)
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

// byteToken parses a byte-fallback token "<0xNN>" as tokenizers does (with Rust's
// u8::from_str_radix, which also takes "+N").
func byteToken(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	digits := t[3:5]
	if digits[0] == '+' {
		digits = digits[1:]
	}
	v := 0
	for k := 0; k < len(digits); k++ {
		c := digits[k]
		var d int
		switch {
		case c >= '0' && c <= '9':
			d = int(c - '0')
		case c >= 'a' && c <= 'f':
			d = int(c-'a') + 10
		case c >= 'A' && c <= 'F':
			d = int(c-'A') + 10
		default:
			return 0, false
		}
		v = v*16 + d
	}
	return byte(v), true
}

// decFuse joins all tokens into one.
type decFuse struct{}

func (decFuse) decodeChain(tokens []string) []string {
	return []string{strings.Join(tokens, "")}
}

// decStrip removes up to start leading and stop trailing content characters from each
// token (Llama 2 strips the space its "▁" prefix became).
type decStrip struct {
	content     rune
	start, stop int
}

func (d decStrip) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for k, t := range tokens {
		rs := []rune(t)
		lo := 0
		for lo < len(rs) && lo < d.start && rs[lo] == d.content {
			lo++
		}
		hi := len(rs)
		for i := 0; i < d.stop && hi > lo && rs[hi-1] == d.content; i++ {
			hi--
		}
		out[k] = string(rs[lo:hi])
	}
	return out
}

// decReplace replaces a literal pattern in each token.
type decReplace struct{ pattern, content string }

func (d decReplace) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for k, t := range tokens {
		out[k] = strings.ReplaceAll(t, d.pattern, d.content)
	}
	return out
}

// decMetaspace turns the replacement character back into spaces, except in the first
// token (where the pre-tokenizer prepended it) unless prepend_scheme is "never".
type decMetaspace struct {
	repl   rune
	scheme prependScheme
}

func (d decMetaspace) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for k, t := range tokens {
		var sb strings.Builder
		for _, r := range t {
			if r == d.repl {
				if k == 0 && d.scheme != prependNever {
					continue
				}
				r = ' '
			}
			sb.WriteRune(r)
		}
		out[k] = sb.String()
	}
	return out
}

// lossyUTF8 is Rust's String::from_utf8_lossy: each maximal prefix of a valid UTF-8
// sequence that does not complete (or each byte that cannot start one) becomes one
// U+FFFD. Go's own conversions replace per byte, or per run of bad bytes.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return lossyString(string(b))
}

// lossyString is lossyUTF8 of a string.
func lossyString(s string) string {
	var sb strings.Builder
	sb.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		if n := invalidLen(s, i); n > 0 {
			sb.WriteString("\uFFFD")
			i += n
			continue
		}
		_, n := utf8.DecodeRuneInString(s[i:])
		sb.WriteString(s[i : i+n])
		i += n
	}
	return sb.String()
}

// invalidLen is the length of the maximal invalid UTF-8 subsequence at s[i:] that
// from_utf8_lossy (and Python's errors="replace") turns into one U+FFFD: the lead byte
// and the continuation bytes a valid sequence with this lead could have (Unicode's
// table 3-7); 0 when a valid character starts at i.
func invalidLen(s string, i int) int {
	c := s[i]
	if c < utf8.RuneSelf {
		return 0
	}
	if _, n := utf8.DecodeRuneInString(s[i:]); n > 1 {
		return 0
	}
	need, lo, hi := 0, byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	}
	j := i + 1
	for k := 0; k < need && j < len(s); k++ {
		if s[j] < lo || s[j] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
		j++
	}
	return j - i
}
