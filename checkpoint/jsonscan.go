package checkpoint

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonScanner reads one JSON text piece by piece, as its caller asks for the next
// piece: a delimiter, an object key, a string, an unsigned integer. It builds nothing
// the caller does not keep, so a reader applies its rules (lengths, counts, ranks) to
// each value as it arrives and refuses a hostile text at its first offending value,
// in memory that does not grow with the text. (encoding/json decodes a whole value
// before its caller sees any of it: a shape of 50 million dimensions is 400 MB of
// []int64 before its length can be checked.)
type jsonScanner struct {
	r   *bufio.Reader
	off int64  // bytes consumed, for error messages
	buf []byte // the last string read (readString's result aliases it)
}

// scanBuffer is the size of a jsonScanner's read buffer.
const scanBuffer = 64 << 10

// maxJSONDepth bounds the nesting of values that skipValue walks.
const maxJSONDepth = 64

func newJSONScanner(r io.Reader) *jsonScanner {
	return &jsonScanner{r: bufio.NewReaderSize(r, scanBuffer)}
}

// syntaxError is a JSON text that is not what the reader expects, at a byte offset.
type syntaxError struct {
	off int64
	msg string
}

func (e *syntaxError) Error() string { return fmt.Sprintf("byte %d: %s", e.off, e.msg) }

func (s *jsonScanner) errorf(format string, args ...any) error {
	return &syntaxError{s.off, fmt.Sprintf(format, args...)}
}

// readByte returns the next byte; the end of the text is an error.
func (s *jsonScanner) readByte() (byte, error) {
	c, err := s.r.ReadByte()
	if err != nil {
		if err == io.EOF {
			return 0, s.errorf("unexpected end of JSON")
		}
		return 0, err
	}
	s.off++
	return c, nil
}

// peek skips whitespace and returns the next byte without consuming it; io.EOF at the
// end of the text.
func (s *jsonScanner) peek() (byte, error) {
	for {
		c, err := s.r.ReadByte()
		if err != nil {
			return 0, err
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			s.off++
			continue
		}
		s.r.UnreadByte()
		return c, nil
	}
}

// next skips whitespace and consumes the next byte.
func (s *jsonScanner) next() (byte, error) {
	c, err := s.peek()
	if err == io.EOF {
		return 0, s.errorf("unexpected end of JSON")
	}
	if err != nil {
		return 0, err
	}
	s.r.ReadByte()
	s.off++
	return c, nil
}

// expect consumes the next non-space byte, which must be c.
func (s *jsonScanner) expect(c byte, what string) error {
	got, err := s.next()
	if err != nil {
		return err
	}
	if got != c {
		return s.errorf("want %s, found %s", what, quoteByte(got))
	}
	return nil
}

func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

// end checks that only whitespace follows.
func (s *jsonScanner) end() error {
	c, err := s.peek()
	if err == io.EOF {
		return nil
	}
	if err != nil {
		return err
	}
	return s.errorf("data after the JSON object (%s)", quoteByte(c))
}

// commaOr reads the separator after an object member or array element: true when
// another one follows, false at close.
func (s *jsonScanner) commaOr(close byte) (bool, error) {
	c, err := s.next()
	if err != nil {
		return false, err
	}
	switch c {
	case ',':
		return true, nil
	case close:
		return false, nil
	}
	return false, s.errorf("want ',' or %q, found %s", close, quoteByte(c))
}

// open consumes an object's or array's opening delimiter and reports whether it is
// empty (its closing delimiter consumed too).
func (s *jsonScanner) open(c byte, what string) (empty bool, err error) {
	if err := s.expect(c, what); err != nil {
		return false, err
	}
	close := byte('}')
	if c == '[' {
		close = ']'
	}
	n, err := s.peek()
	if err == io.EOF {
		return false, s.errorf("unexpected end of JSON")
	}
	if err != nil {
		return false, err
	}
	if n == close {
		s.r.ReadByte()
		s.off++
		return true, nil
	}
	return false, nil
}

// errLong is returned (wrapped) by readString for a string longer than its limit.
var errLong = errors.New("string too long")

// readString reads a string of at most max bytes (once unescaped; longer is an error
// as soon as the limit is passed). The result aliases the scanner's buffer and is
// valid until the next call: callers that keep it copy it (and charge the copy).
func (s *jsonScanner) readString(max int) ([]byte, error) {
	return s.scanString(max, true)
}

// skipString reads a string of any length without keeping it.
func (s *jsonScanner) skipString() error {
	_, err := s.scanString(math.MaxInt, false)
	return err
}

func (s *jsonScanner) scanString(max int, keep bool) ([]byte, error) {
	if err := s.expect('"', "a string"); err != nil {
		return nil, err
	}
	start := s.off
	buf := s.buf[:0]
	total := 0
	for {
		c, err := s.readByte()
		if err != nil {
			return nil, err
		}
		switch {
		case c == '"':
			if !utf8.Valid(buf) {
				return nil, &syntaxError{start, "string is not valid UTF-8"}
			}
			s.buf = buf
			return buf, nil
		case c < 0x20:
			return nil, s.errorf("control character 0x%02x in a string", c)
		case c == '\\':
			r, err := s.escape()
			if err != nil {
				return nil, err
			}
			buf = utf8.AppendRune(buf, r)
			total += utf8.RuneLen(r)
		default:
			buf = append(buf, c)
			total++
		}
		if total > max {
			return nil, fmt.Errorf("byte %d: %w (more than %d bytes)", start, errLong, max)
		}
		if !keep && len(buf) >= 4096 {
			// Validate what is complete and drop it: skipping a long string costs no
			// memory.
			if buf, err = dropValid(buf); err != nil {
				return nil, &syntaxError{start, "string is not valid UTF-8"}
			}
		}
	}
}

// dropValid checks the complete UTF-8 sequences at the start of b and returns b with
// them removed (an incomplete sequence at the end stays for the next bytes).
func dropValid(b []byte) ([]byte, error) {
	i := 0
	for i < len(b) {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		if !utf8.FullRune(b[i:]) {
			break
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return nil, errors.New("invalid UTF-8")
		}
		i += n
	}
	return b[:copy(b, b[i:])], nil
}

// escape reads the rest of a backslash escape. A \u escape of half a surrogate pair
// must be followed by the other half: a lone surrogate is no Unicode character (Go's
// encoding/json would turn it into U+FFFD, Rust's serde_json refuses it).
func (s *jsonScanner) escape() (rune, error) {
	c, err := s.readByte()
	if err != nil {
		return 0, err
	}
	switch c {
	case '"', '\\', '/':
		return rune(c), nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'u':
		r, err := s.hex4()
		if err != nil {
			return 0, err
		}
		if !utf16.IsSurrogate(r) {
			return r, nil
		}
		if r >= 0xdc00 {
			return 0, s.errorf("lone surrogate \\u%04x in a string", r)
		}
		if c1, err := s.readByte(); err != nil || c1 != '\\' {
			return 0, s.errorf("lone surrogate \\u%04x in a string", r)
		}
		if c2, err := s.readByte(); err != nil || c2 != 'u' {
			return 0, s.errorf("lone surrogate \\u%04x in a string", r)
		}
		r2, err := s.hex4()
		if err != nil {
			return 0, err
		}
		if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
			return dec, nil
		}
		return 0, s.errorf("lone surrogate \\u%04x in a string", r)
	}
	return 0, s.errorf("invalid escape \\%s", string(rune(c)))
}

func (s *jsonScanner) hex4() (rune, error) {
	var r rune
	for range 4 {
		c, err := s.readByte()
		if err != nil {
			return 0, err
		}
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, s.errorf("invalid \\u escape")
		}
		r = r<<4 | rune(d)
	}
	return r, nil
}

// readUint reads a non-negative JSON integer that fits an int64, refusing a fraction,
// an exponent, a sign or a leading zero (what Rust's serde_json refuses for a usize),
// and an overflow as soon as the digit that causes it arrives.
func (s *jsonScanner) readUint() (int64, error) {
	c, err := s.next()
	if err != nil {
		return 0, err
	}
	if c < '0' || c > '9' {
		return 0, s.errorf("want a non-negative integer, found %s", quoteByte(c))
	}
	v := int64(c - '0')
	for {
		d, err := s.r.ReadByte()
		if err == io.EOF {
			return v, nil
		}
		if err != nil {
			return 0, err
		}
		if d < '0' || d > '9' {
			s.r.UnreadByte()
			if d == '.' || d == 'e' || d == 'E' {
				return 0, s.errorf("want an integer, found a fraction or exponent")
			}
			return v, nil
		}
		s.off++
		if v == 0 {
			return 0, s.errorf("integer with a leading zero")
		}
		if v > (math.MaxInt64-int64(d-'0'))/10 {
			return 0, s.errorf("integer larger than %d", int64(math.MaxInt64))
		}
		v = v*10 + int64(d-'0')
	}
}

// skipValue reads any JSON value without keeping it, nested at most maxJSONDepth deep.
func (s *jsonScanner) skipValue(depth int) error {
	if depth > maxJSONDepth {
		return s.errorf("values nested deeper than %d", maxJSONDepth)
	}
	c, err := s.peek()
	if err == io.EOF {
		return s.errorf("unexpected end of JSON")
	}
	if err != nil {
		return err
	}
	switch {
	case c == '{' || c == '[':
		empty, err := s.open(c, string(c))
		if err != nil || empty {
			return err
		}
		close := byte('}')
		if c == '[' {
			close = ']'
		}
		for {
			if c == '{' {
				if err := s.skipString(); err != nil {
					return err
				}
				if err := s.expect(':', "':'"); err != nil {
					return err
				}
			}
			if err := s.skipValue(depth + 1); err != nil {
				return err
			}
			more, err := s.commaOr(close)
			if err != nil || !more {
				return err
			}
		}
	case c == '"':
		return s.skipString()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return s.skipNumber()
	}
	return s.errorf("unexpected %s", quoteByte(c))
}

func (s *jsonScanner) literal(word string) error {
	for i := range len(word) {
		c, err := s.readByte()
		if err != nil {
			return err
		}
		if c != word[i] {
			return s.errorf("invalid literal (want %s)", word)
		}
	}
	return nil
}

// skipNumber reads a number in JSON's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *jsonScanner) skipNumber() error {
	c, _ := s.readByte()
	if c == '-' {
		var err error
		if c, err = s.readByte(); err != nil {
			return err
		}
	}
	if c < '0' || c > '9' {
		return s.errorf("invalid number")
	}
	digits := func() (int, error) {
		n := 0
		for {
			d, err := s.r.ReadByte()
			if err == io.EOF {
				return n, nil
			}
			if err != nil {
				return n, err
			}
			if d < '0' || d > '9' {
				s.r.UnreadByte()
				return n, nil
			}
			s.off++
			n++
		}
	}
	if c != '0' {
		if _, err := digits(); err != nil {
			return err
		}
	}
	d, err := s.r.ReadByte()
	if err == io.EOF {
		return nil
	}
	if err != nil {
		return err
	}
	if d == '.' {
		s.off++
		if n, err := digits(); err != nil || n == 0 {
			return errors.Join(err, s.errorf("invalid number"))
		}
		if d, err = s.r.ReadByte(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
	if d == 'e' || d == 'E' {
		s.off++
		if d, err = s.r.ReadByte(); err != nil && err != io.EOF {
			return err
		}
		if d == '+' || d == '-' {
			s.off++
		} else if err == nil {
			s.r.UnreadByte()
		}
		if n, err := digits(); err != nil || n == 0 {
			return errors.Join(err, s.errorf("invalid number"))
		}
		return nil
	}
	s.r.UnreadByte()
	return nil
}

// cutName quotes a name read from a file for an error message, cut to 200 bytes so
// that a name of megabytes does not become a message of megabytes.
func cutName(s string) string {
	if len(s) <= 200 {
		return strconv.Quote(s)
	}
	i := 200
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(s[:i]), len(s))
}
