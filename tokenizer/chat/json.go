package chat

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// tojson is transformers' override of jinja2's filter: json.dumps(x, ensure_ascii=False,
// indent=None, separators=None, sort_keys=False), with no HTML escaping. The output keeps
// the provenance of the strings (and tagged containers) it encodes.
func tojson(v value, args []value, kw map[string]value) (value, error) {
	e := jsonEnc{itemSep: ", ", keySep: ": "}
	if a, ok := arg(args, kw, 0, "ensure_ascii"); ok {
		e.ascii = truthy(a)
	}
	if a, ok := arg(args, kw, 1, "indent"); ok && a != nil {
		switch x := a.(type) {
		case str:
			e.indent, e.hasIndent = x.s, true
		default:
			n, ok := intOf(x)
			if !ok {
				return nil, fmt.Errorf("tojson indent must be an integer or a string, not %s", typeName(a))
			}
			e.indent, e.hasIndent = strings.Repeat(" ", max(int(n), 0)), true
		}
		e.itemSep = ","
	}
	if a, ok := arg(args, kw, 2, "separators"); ok && a != nil {
		parts, err := unpack(a, 2)
		if err != nil {
			return nil, fmt.Errorf("tojson separators: %w", err)
		}
		s0, ok0 := parts[0].(str)
		s1, ok1 := parts[1].(str)
		if !ok0 || !ok1 {
			return nil, errors.New("tojson separators must be two strings")
		}
		e.itemSep, e.keySep = s0.s, s1.s
	}
	if a, ok := arg(args, kw, 3, "sort_keys"); ok {
		e.sortKeys = truthy(a)
	}
	if err := e.encode(v, 0); err != nil {
		return nil, err
	}
	return e.w.str(), nil
}

type jsonEnc struct {
	w               strBuf
	ascii, sortKeys bool
	indent          string
	hasIndent       bool
	itemSep, keySep string
}

func (e *jsonEnc) newline(level int) {
	if e.hasIndent {
		e.w.addPlain("\n" + strings.Repeat(e.indent, level))
	}
}

func (e *jsonEnc) encode(v value, level int) error {
	tag := containerTag(v)
	start := e.w.b.Len()
	if err := e.encodeInner(v, level); err != nil {
		return err
	}
	if tag != 0 {
		// A container from an assistant message is its output as a whole, keys and
		// punctuation included.
		e.retagFrom(start, tag)
	}
	return nil
}

// retagFrom tags the output written since byte start with tag.
func (e *jsonEnc) retagFrom(start, tag int) {
	end := e.w.b.Len()
	if start == end {
		return
	}
	kept := e.w.runs[:0]
	for _, r := range e.w.runs {
		if r.end <= start {
			kept = append(kept, r)
		}
	}
	e.w.runs = append(kept, run{start, end, tag})
}

func (e *jsonEnc) encodeInner(v value, level int) error {
	switch x := v.(type) {
	case nil:
		e.w.addPlain("null")
	case bool:
		if x {
			e.w.addPlain("true")
		} else {
			e.w.addPlain("false")
		}
	case int64:
		e.w.addPlain(strconv.FormatInt(x, 10))
	case float64:
		s := pyFloat(x)
		switch s {
		case "nan":
			s = "NaN"
		case "inf":
			s = "Infinity"
		case "-inf":
			s = "-Infinity"
		}
		e.w.addPlain(s)
	case str:
		q := jsonQuote(x.s, e.ascii)
		if len(q) == len(x.s)+2 {
			e.w.addPlain(`"`)
			e.w.add(x)
			e.w.addPlain(`"`)
		} else {
			e.w.add(retag(q, x))
		}
	case *list:
		if !x.plain() {
			return fmt.Errorf("Object of type %s is not JSON serializable", x.iter)
		}
		if len(x.items) == 0 {
			e.w.addPlain("[]")
			return nil
		}
		e.w.addPlain("[")
		for i, it := range x.items {
			if i > 0 {
				e.w.addPlain(e.itemSep)
			}
			e.newline(level + 1)
			if err := e.encode(it, level+1); err != nil {
				return err
			}
		}
		e.newline(level)
		e.w.addPlain("]")
	case *dict:
		if len(x.keys) == 0 {
			e.w.addPlain("{}")
			return nil
		}
		keys := x.keys
		if e.sortKeys {
			keys = append([]string{}, keys...)
			sort.Strings(keys)
		}
		e.w.addPlain("{")
		for i, k := range keys {
			if i > 0 {
				e.w.addPlain(e.itemSep)
			}
			e.newline(level + 1)
			e.w.addPlain(jsonQuote(jsonKey(x.keyVal(k)), e.ascii))
			e.w.addPlain(e.keySep)
			if err := e.encode(x.m[k], level+1); err != nil {
				return err
			}
		}
		e.newline(level)
		e.w.addPlain("}")
	case *namespace:
		return errors.New("Object of type Namespace is not JSON serializable")
	default:
		return fmt.Errorf("Object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

// jsonKey is the string json.dumps makes of a dict key.
func jsonKey(k value) string {
	switch x := k.(type) {
	case str:
		return x.s
	case nil:
		return "null"
	case bool:
		if x {
			return "true"
		}
		return "false"
	case float64:
		var e jsonEnc
		_ = e.encodeInner(x, 0)
		return e.w.b.String()
	}
	return repr(k)
}

// jsonQuote is Python's JSON string encoding (json.encoder's py_encode_basestring and,
// with ascii, py_encode_basestring_ascii).
func jsonQuote(s string, ascii bool) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				fmt.Fprintf(&b, `\u%04x`, r)
			case ascii && r > 0x7e:
				if r > 0xffff {
					r -= 0x10000
					fmt.Fprintf(&b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
				} else {
					fmt.Fprintf(&b, `\u%04x`, r)
				}
			case r == utf8.RuneError:
				b.WriteRune(r)
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}
