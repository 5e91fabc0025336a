package chat

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The lexer follows jinja2's with transformers' settings: trim_blocks and lstrip_blocks
// on, keep_trailing_newline off, "\r\n" and "\r" read as "\n".

type tokKind int

const (
	tEOF tokKind = iota
	tText
	tVarBegin   // {{
	tVarEnd     // }}
	tBlockBegin // {%
	tBlockEnd   // %}
	tName
	tString
	tInt
	tFloat
	tOp
)

type pos struct{ line, col int }

func (p pos) String() string { return fmt.Sprintf("%d:%d", p.line, p.col) }

type token struct {
	kind tokKind
	val  string // text, name, decoded string literal, number literal or operator
	pos  pos
}

func (t token) String() string {
	switch t.kind {
	case tEOF:
		return "end of template"
	case tText:
		return "template text"
	case tVarBegin:
		return "'{{'"
	case tVarEnd:
		return "'}}'"
	case tBlockBegin:
		return "'{%'"
	case tBlockEnd:
		return "'%}'"
	case tString:
		return strconv.Quote(t.val)
	}
	return "'" + t.val + "'"
}

// SyntaxError is a template that cannot be parsed, or uses a construct this package does
// not implement.
type SyntaxError struct {
	Line, Col int
	Msg       string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("chat template %d:%d: %s", e.Line, e.Col, e.Msg)
}

func errAt(p pos, format string, args ...any) error {
	return &SyntaxError{Line: p.line, Col: p.col, Msg: fmt.Sprintf(format, args...)}
}

type lexer struct {
	src  string
	i    int
	toks []token
	// lineStarting is jinja2's flag: the last thing consumed ended with a newline, so
	// lstrip_blocks may strip the indentation before the next tag.
	lineStarting bool
}

// normalizeSource applies jinja2's newline handling to a template source.
func normalizeSource(src string) string {
	src = strings.ReplaceAll(src, "\r\n", "\n")
	src = strings.ReplaceAll(src, "\r", "\n")
	return strings.TrimSuffix(src, "\n")
}

func lex(src string) ([]token, error) {
	lx := &lexer{src: normalizeSource(src), lineStarting: true}
	if err := lx.run(); err != nil {
		return nil, err
	}
	return lx.toks, nil
}

func (lx *lexer) posOf(i int) pos {
	before := lx.src[:i]
	line := strings.Count(before, "\n") + 1
	col := utf8.RuneCountInString(before[strings.LastIndexByte(before, '\n')+1:]) + 1
	return pos{line, col}
}

func isSpace(r rune) bool { return unicode.IsSpace(r) }

func (lx *lexer) run() error {
	for lx.i < len(lx.src) {
		rest := lx.src[lx.i:]
		j := strings.IndexByte(rest, '{')
		for j >= 0 && (j+1 >= len(rest) || (rest[j+1] != '{' && rest[j+1] != '%' && rest[j+1] != '#')) {
			k := strings.IndexByte(rest[j+1:], '{')
			if k < 0 {
				j = -1
				break
			}
			j += 1 + k
		}
		if j < 0 {
			lx.emitText(rest, lx.i)
			lx.i = len(lx.src)
			break
		}
		text := rest[:j]
		start := lx.i + j
		kind := lx.src[start+1]
		sign := byte(0)
		if start+2 < len(lx.src) && (lx.src[start+2] == '-' || lx.src[start+2] == '+') {
			sign = lx.src[start+2]
		}
		switch {
		case sign == '-':
			text = strings.TrimRightFunc(text, isSpace)
		case sign != '+' && kind != '{':
			// lstrip_blocks: drop the indentation before a block or comment tag that
			// starts its line.
			l := strings.LastIndexByte(text, '\n') + 1
			if l > 0 || lx.lineStarting {
				tail := text[l:]
				if tail != "" && strings.TrimFunc(tail, isSpace) == "" {
					text = text[:l]
				}
			}
		}
		lx.emitText(text, lx.i)
		body := start + 2
		if sign != 0 {
			body++
		}
		var err error
		switch kind {
		case '#':
			err = lx.comment(start, body)
		case '%':
			err = lx.tag(start, body, tBlockBegin, tBlockEnd, "%}")
		default:
			err = lx.tag(start, body, tVarBegin, tVarEnd, "}}")
		}
		if err != nil {
			return err
		}
	}
	lx.toks = append(lx.toks, token{kind: tEOF, pos: lx.posOf(len(lx.src))})
	return nil
}

func (lx *lexer) emitText(text string, at int) {
	if text != "" {
		lx.toks = append(lx.toks, token{kind: tText, val: text, pos: lx.posOf(at)})
	}
}

// afterEnd consumes what follows a closing delimiter at lx.i (already past it): all
// whitespace after a '-' sign, one newline after a block or comment (trim_blocks).
func (lx *lexer) afterEnd(sign byte, block bool) {
	switch {
	case sign == '-':
		for lx.i < len(lx.src) {
			r, n := utf8.DecodeRuneInString(lx.src[lx.i:])
			if !isSpace(r) {
				break
			}
			lx.i += n
		}
	case sign != '+' && block && lx.i < len(lx.src) && lx.src[lx.i] == '\n':
		lx.i++
	}
	lx.lineStarting = lx.i > 0 && lx.src[lx.i-1] == '\n'
}

func (lx *lexer) comment(start, body int) error {
	k := strings.Index(lx.src[body:], "#}")
	if k < 0 {
		return errAt(lx.posOf(start), "unclosed comment")
	}
	end := body + k
	sign := byte(0)
	if end > body && (lx.src[end-1] == '-' || lx.src[end-1] == '+') {
		sign = lx.src[end-1]
	}
	lx.i = end + 2
	lx.afterEnd(sign, true)
	return nil
}

var ops3 = []string{"//", "**", "==", "!=", "<=", ">="}

func (lx *lexer) tag(start, body int, begin, end tokKind, closer string) error {
	lx.toks = append(lx.toks, token{kind: begin, pos: lx.posOf(start)})
	i := body
	depth := 0
	for {
		for i < len(lx.src) {
			r, n := utf8.DecodeRuneInString(lx.src[i:])
			if !isSpace(r) {
				break
			}
			i += n
		}
		if i >= len(lx.src) {
			return errAt(lx.posOf(start), "unclosed %s", map[tokKind]string{tBlockBegin: "'{%'", tVarBegin: "'{{'"}[begin])
		}
		rest := lx.src[i:]
		if depth == 0 {
			sign := byte(0)
			r := rest
			if r[0] == '-' || r[0] == '+' {
				sign, r = r[0], r[1:]
			}
			if strings.HasPrefix(r, closer) && !(sign == '+' && begin == tVarBegin) {
				// ('+}}' is not a closer in jinja2: '+' is an operator there.)
				lx.toks = append(lx.toks, token{kind: end, pos: lx.posOf(i)})
				lx.i = i + len(closer)
				if sign != 0 {
					lx.i++
				}
				lx.afterEnd(sign, begin == tBlockBegin)
				return nil
			}
		}
		p := lx.posOf(i)
		c := rest[0]
		switch {
		case c == '_' || unicode.IsLetter(rune(c)) && c < 0x80:
			k := 1
			for k < len(rest) && (rest[k] == '_' || rest[k] < 0x80 && (unicode.IsLetter(rune(rest[k])) || unicode.IsDigit(rune(rest[k])))) {
				k++
			}
			lx.toks = append(lx.toks, token{kind: tName, val: rest[:k], pos: p})
			i += k
		case c >= '0' && c <= '9':
			k := 0
			for k < len(rest) && (rest[k] >= '0' && rest[k] <= '9' || rest[k] == '_') {
				k++
			}
			kind := tInt
			if k+1 < len(rest) && rest[k] == '.' && rest[k+1] >= '0' && rest[k+1] <= '9' {
				kind = tFloat
				k++
				for k < len(rest) && (rest[k] >= '0' && rest[k] <= '9' || rest[k] == '_') {
					k++
				}
			}
			if k < len(rest) && (rest[k] == 'e' || rest[k] == 'E') {
				m := k + 1
				if m < len(rest) && (rest[m] == '+' || rest[m] == '-') {
					m++
				}
				if m < len(rest) && rest[m] >= '0' && rest[m] <= '9' {
					kind = tFloat
					k = m
					for k < len(rest) && rest[k] >= '0' && rest[k] <= '9' {
						k++
					}
				}
			}
			lx.toks = append(lx.toks, token{kind: kind, val: strings.ReplaceAll(rest[:k], "_", ""), pos: p})
			i += k
		case c == '\'' || c == '"':
			s, n, err := unquote(rest)
			if err != nil {
				return errAt(p, "%v", err)
			}
			lx.toks = append(lx.toks, token{kind: tString, val: s, pos: p})
			i += n
		default:
			op := ""
			for _, o := range ops3 {
				if strings.HasPrefix(rest, o) {
					op = o
					break
				}
			}
			if op == "" {
				if !strings.ContainsRune("+-*/%~()[]{},.:|=<>", rune(c)) {
					r, _ := utf8.DecodeRuneInString(rest)
					return errAt(p, "unexpected character %q", r)
				}
				op = rest[:1]
			}
			switch op {
			case "(", "[", "{":
				depth++
			case ")", "]", "}":
				depth--
			}
			lx.toks = append(lx.toks, token{kind: tOp, val: op, pos: p})
			i += len(op)
		}
	}
}

// unquote decodes a Jinja string literal at the start of s (Python's escapes) and
// returns it with the number of bytes it took.
func unquote(s string) (string, int, error) {
	q := s[0]
	var b strings.Builder
	for i := 1; i < len(s); {
		c := s[i]
		switch {
		case c == q:
			return b.String(), i + 1, nil
		case c == '\\' && i+1 < len(s):
			e := s[i+1]
			i += 2
			switch e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case '0':
				b.WriteByte(0)
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'v':
				b.WriteByte('\v')
			case '\\', '\'', '"':
				b.WriteByte(e)
			case '\n':
			case 'x', 'u', 'U':
				n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
				if i+n > len(s) {
					return "", 0, fmt.Errorf("bad \\%c escape in string literal", e)
				}
				v, err := strconv.ParseUint(s[i:i+n], 16, 32)
				if err != nil {
					return "", 0, fmt.Errorf("bad \\%c escape in string literal", e)
				}
				b.WriteRune(rune(v))
				i += n
			default:
				b.WriteByte('\\')
				b.WriteByte(e)
			}
		default:
			b.WriteByte(c)
			i++
		}
	}
	return "", 0, fmt.Errorf("unterminated string literal")
}
