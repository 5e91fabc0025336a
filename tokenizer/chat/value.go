package chat

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Values are Python's as jinja2 sees them: nil (None), bool, int64, float64, str,
// *list (also tuples), *dict, *namespace, *undefined, *loopObj and callables.
type value = any

// undefined is jinja2's default Undefined: it prints as "", is false, iterates as empty,
// and fails when an attribute of it is read or it takes part in arithmetic.
type undefined struct{ hint string }

// run marks bytes [start,end) of a string as derived from assistant message tag-1.
type run struct{ start, end, tag int }

// str is a Python string with its provenance: runs of bytes that came from an
// assistant message's fields, which the rendering keeps through string operations so
// that the loss mask can find each assistant turn in the text.
type str struct {
	s    string
	runs []run
}

func newStr(s string) str { return str{s: s} }

func taggedStr(s string, tag int) str {
	if tag == 0 || s == "" {
		return str{s: s}
	}
	return str{s: s, runs: []run{{0, len(s), tag}}}
}

// slice returns bytes [i,j) of s with their provenance.
func (s str) slice(i, j int) str {
	out := str{s: s.s[i:j]}
	for _, r := range s.runs {
		a, b := max(r.start, i), min(r.end, j)
		if a < b {
			out.runs = append(out.runs, run{a - i, b - i, r.tag})
		}
	}
	return out
}

// firstTag is the tag of s's first tagged byte, or 0.
func (s str) firstTag() int {
	if len(s.runs) == 0 {
		return 0
	}
	return s.runs[0].tag
}

// strBuf accumulates a string and its provenance.
type strBuf struct {
	b    strings.Builder
	runs []run
}

func (w *strBuf) add(s str) {
	off := w.b.Len()
	w.b.WriteString(s.s)
	for _, r := range s.runs {
		n := len(w.runs)
		if n > 0 && w.runs[n-1].end == r.start+off && w.runs[n-1].tag == r.tag {
			w.runs[n-1].end = r.end + off
			continue
		}
		w.runs = append(w.runs, run{r.start + off, r.end + off, r.tag})
	}
}

func (w *strBuf) addPlain(s string) { w.b.WriteString(s) }

func (w *strBuf) str() str { return str{s: w.b.String(), runs: w.runs} }

func concat(parts ...str) str {
	var w strBuf
	for _, p := range parts {
		w.add(p)
	}
	return w.str()
}

// retag gives the whole of s the first tag found among srcs, for operations (case
// mapping that changes byte lengths, reversal) whose byte correspondence is lost.
func retag(s string, srcs ...str) str {
	for _, src := range srcs {
		if t := src.firstTag(); t != 0 {
			return taggedStr(s, t)
		}
	}
	return newStr(s)
}

type list struct {
	items []value
	tuple bool
	tag   int
	// iter names what Python would have instead of a list: "generator" (what map,
	// select, selectattr, unique and the items filter yield), "list_reverseiterator"
	// (reverse), or a dict view ("dict_items", "dict_keys", "dict_values"). These are
	// always true (iterators) or true when non-empty (views), have no len (iterators),
	// cannot be indexed, are not JSON, and an iterator is empty once consumed.
	iter string
	pos  int
}

// lazy reports whether l is a one-shot iterator.
func (l *list) lazy() bool { return l.iter == "generator" || l.iter == "list_reverseiterator" }

// plain reports whether l is a real list or tuple.
func (l *list) plain() bool { return l.iter == "" }

// renderPanic carries an error out of the value helpers that have no error result
// (printing a generator); Render recovers it and nothing else.
type renderPanic struct{ err error }

func newList(items []value) *list { return &list{items: items} }

// dict is an insertion-ordered Python dict. Keys are strings; another key (an int, a
// bool, None) is stored under an internal string (dictKey) and remembered in orig.
type dict struct {
	keys []string
	m    map[string]value
	orig map[string]value
	tag  int
}

// dictKey is the internal key of a Python dict key; equal keys in Python (1, 1.0, True)
// have the same one.
func dictKey(k value) (string, error) {
	switch x := k.(type) {
	case str:
		return x.s, nil
	case nil:
		return "\x00None", nil
	case bool, int64:
		i, _ := intOf(x)
		return "\x00n:" + strconv.FormatInt(i, 10), nil
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return "\x00n:" + strconv.FormatInt(int64(x), 10), nil
		}
		return "\x00f:" + pyFloat(x), nil
	}
	return "", fmt.Errorf("unhashable type: '%s'", typeName(k))
}

// setKey sets d[k] = v for any hashable key value.
func (d *dict) setKey(k, v value) error {
	ik, err := dictKey(k)
	if err != nil {
		return err
	}
	if _, isStr := k.(str); !isStr {
		if d.orig == nil {
			d.orig = map[string]value{}
		}
		if _, ok := d.m[ik]; !ok {
			d.orig[ik] = k
		}
	}
	d.set(ik, v)
	return nil
}

// keyVal is the Python value of internal key k.
func (d *dict) keyVal(k string) value {
	if v, ok := d.orig[k]; ok {
		return v
	}
	return taggedStr(k, d.tag)
}

// lookup is d[k] for any key value.
func (d *dict) lookup(k value) (value, bool) {
	ik, err := dictKey(k)
	if err != nil {
		return nil, false
	}
	v, ok := d.m[ik]
	return v, ok
}

func newDict() *dict { return &dict{m: map[string]value{}} }

func (d *dict) set(k string, v value) {
	if _, ok := d.m[k]; !ok {
		d.keys = append(d.keys, k)
	}
	d.m[k] = v
}

func (d *dict) get(k string) (value, bool) {
	v, ok := d.m[k]
	return v, ok
}

type namespace struct{ d *dict }

// Object is a JSON object that keeps its keys' order, as Python's dict does: tojson and
// items() render it in that order. DecodeMessages produces it for nested objects.
type Object struct {
	Keys   []string
	Values map[string]any
}

// MarshalJSON writes the object with its keys in order, so that DecodeValue reads back
// the same Object.
func (o Object) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, k := range o.Keys {
		if i > 0 {
			b = append(b, ',')
		}
		kj, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		vj, err := json.Marshal(o.Values[k])
		if err != nil {
			return nil, fmt.Errorf("%q: %w", k, err)
		}
		b = append(append(append(b, kj...), ':'), vj...)
	}
	return append(b, '}'), nil
}

// toValue converts a Go value (as decoded from JSON, or built by a caller) into a
// template value; strings, lists and dicts get tag (0 for none).
func toValue(x any, tag int) (value, error) {
	switch v := x.(type) {
	case nil:
		return nil, nil
	case value:
		switch v := v.(type) {
		case string:
			return taggedStr(v, tag), nil
		case bool:
			return v, nil
		case int:
			return int64(v), nil
		case int8:
			return int64(v), nil
		case int16:
			return int64(v), nil
		case int32:
			return int64(v), nil
		case int64:
			return v, nil
		case uint:
			return int64(v), nil
		case uint8:
			return int64(v), nil
		case uint16:
			return int64(v), nil
		case uint32:
			return int64(v), nil
		case uint64:
			if v > math.MaxInt64 {
				return float64(v), nil
			}
			return int64(v), nil
		case float32:
			return floatValue(float64(v)), nil
		case float64:
			return floatValue(v), nil
		case json.Number:
			return numberValue(v)
		case []any:
			return listValue(v, tag)
		case []string:
			return listValue(v, tag)
		case []map[string]any:
			return listValue(v, tag)
		case map[string]any:
			return objectValue(slices.Sorted(maps.Keys(v)), v, tag)
		case Object:
			return objectValue(v.Keys, v.Values, tag)
		case *Object:
			return objectValue(v.Keys, v.Values, tag)
		case map[string]string:
			return objectValue(slices.Sorted(maps.Keys(v)), v, tag)
		}
	}
	return nil, fmt.Errorf("unsupported value of type %T", x)
}

// listValue converts the elements of a Go slice into a template list.
func listValue[E any](v []E, tag int) (value, error) {
	l := &list{items: make([]value, len(v)), tag: tag}
	for i, e := range v {
		var err error
		if l.items[i], err = toValue(e, tag); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// objectValue converts the entries of a Go map into a template dict, in the order of
// keys.
func objectValue[V any](keys []string, m map[string]V, tag int) (value, error) {
	d := newDict()
	d.tag = tag
	for _, k := range keys {
		e, err := toValue(m[k], tag)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", k, err)
		}
		d.set(k, e)
	}
	return d, nil
}

// floatValue makes an integral float an int: Go's JSON decoder reads 1 as float64, which
// Python reads as int (and prints "1", not "1.0").
func floatValue(f float64) value {
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return int64(f)
	}
	return f
}

// numberValue reads a JSON number as Python's json module does: "1.0" stays a float.
func numberValue(n json.Number) (value, error) {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, fmt.Errorf("bad number %q", s)
	}
	return f, nil
}

func truthy(v value) bool {
	switch v := v.(type) {
	case nil, *undefined:
		return false
	case bool:
		return v
	case int64:
		return v != 0
	case float64:
		return v != 0
	case str:
		return v.s != ""
	case *list:
		return v.lazy() || len(v.items) > 0
	case *dict:
		return len(v.keys) > 0
	}
	return true
}

func typeName(v value) string {
	switch v.(type) {
	case nil:
		return "NoneType"
	case *undefined:
		return "Undefined"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case str:
		return "str"
	case *list:
		if it := v.(*list).iter; it != "" {
			return it
		}
		if v.(*list).tuple {
			return "tuple"
		}
		return "list"
	case *dict:
		return "dict"
	case *namespace:
		return "Namespace"
	case *loopObj:
		return "LoopContext"
	}
	return "function"
}

// toStr is Python's str(), keeping provenance.
func toStr(v value) str {
	switch v := v.(type) {
	case str:
		return v
	case *undefined:
		return str{}
	case *list, *dict:
		s := repr(v)
		return taggedStr(s, containerTag(v))
	}
	return newStr(repr(v))
}

func containerTag(v value) int {
	switch v := v.(type) {
	case *list:
		return v.tag
	case *dict:
		return v.tag
	}
	return 0
}

// repr is Python's repr() (str() for numbers, None and booleans).
func repr(v value) string {
	switch v := v.(type) {
	case nil:
		return "None"
	case *undefined:
		return ""
	case bool:
		if v {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return pyFloat(v)
	case str:
		return pyQuote(v.s)
	case *list:
		if v.lazy() {
			panic(renderPanic{fmt.Errorf("printing a Python %s is not supported (Python prints its address)", v.iter)})
		}
		parts := make([]string, len(v.items))
		for i, e := range v.items {
			parts[i] = repr(e)
		}
		if v.tuple {
			if len(parts) == 1 {
				return "(" + parts[0] + ",)"
			}
			return "(" + strings.Join(parts, ", ") + ")"
		}
		if v.iter != "" {
			// A dict view: dict_items([('a', 1)]).
			return v.iter + "([" + strings.Join(parts, ", ") + "])"
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case *dict:
		parts := make([]string, len(v.keys))
		for i, k := range v.keys {
			parts[i] = repr(v.keyVal(k)) + ": " + repr(v.m[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case *namespace:
		return "<Namespace " + repr(v.d) + ">"
	}
	return fmt.Sprintf("<%s>", typeName(v))
}

// pyFloat formats f as Python's repr(float).
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expS, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expS)
	if exp < -4 || exp >= 16 {
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		return fmt.Sprintf("%se%s%02d", mant, sign, exp)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

func pyQuote(s string) string {
	q := byte('\'')
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == rune(q):
			b.WriteByte('\\')
			b.WriteByte(q)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// equal is Python's ==.
func equal(a, b value) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case *undefined:
		_, ok := b.(*undefined)
		return ok
	case str:
		y, ok := b.(str)
		return ok && x.s == y.s
	case bool, int64, float64:
		fa, oka := num(a)
		fb, okb := num(b)
		if oka && okb {
			ia, aInt := intOf(a)
			ib, bInt := intOf(b)
			if aInt && bInt {
				return ia == ib
			}
			return fa == fb
		}
		return false
	case *list:
		y, ok := b.(*list)
		if ok && (!x.plain() || !y.plain()) {
			return x == y
		}
		if !ok || len(x.items) != len(y.items) || x.tuple != y.tuple {
			return false
		}
		for i := range x.items {
			if !equal(x.items[i], y.items[i]) {
				return false
			}
		}
		return true
	case *dict:
		y, ok := b.(*dict)
		if !ok || len(x.keys) != len(y.keys) {
			return false
		}
		for k, v := range x.m {
			w, ok := y.m[k]
			if !ok || !equal(v, w) {
				return false
			}
		}
		return true
	}
	return a == b
}

// num returns a number's value as float64 (bools are ints in Python).
func num(v value) (float64, bool) {
	switch v := v.(type) {
	case bool:
		if v {
			return 1, true
		}
		return 0, true
	case int64:
		return float64(v), true
	case float64:
		return v, true
	}
	return 0, false
}

func intOf(v value) (int64, bool) {
	switch v := v.(type) {
	case bool:
		if v {
			return 1, true
		}
		return 0, true
	case int64:
		return v, true
	}
	return 0, false
}

// compare is Python's ordering of numbers, strings and lists: -1, 0 or 1.
func compare(a, b value) (int, error) {
	if fa, ok := num(a); ok {
		if fb, ok := num(b); ok {
			ia, aInt := intOf(a)
			ib, bInt := intOf(b)
			switch {
			case aInt && bInt && ia < ib, !(aInt && bInt) && fa < fb:
				return -1, nil
			case aInt && bInt && ia > ib, !(aInt && bInt) && fa > fb:
				return 1, nil
			}
			return 0, nil
		}
	}
	if sa, ok := a.(str); ok {
		if sb, ok := b.(str); ok {
			return strings.Compare(sa.s, sb.s), nil
		}
	}
	if la, ok := a.(*list); ok && la.plain() {
		if lb, ok := b.(*list); ok && lb.plain() {
			for i := 0; i < len(la.items) && i < len(lb.items); i++ {
				if !equal(la.items[i], lb.items[i]) {
					return compare(la.items[i], lb.items[i])
				}
			}
			return compareInt(len(la.items), len(lb.items)), nil
		}
	}
	return 0, fmt.Errorf("'<' not supported between instances of '%s' and '%s'", typeName(a), typeName(b))
}

func compareInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// length is Python's len().
func length(v value) (int, error) {
	switch v := v.(type) {
	case str:
		return utf8.RuneCountInString(v.s), nil
	case *list:
		if v.lazy() {
			return 0, fmt.Errorf("object of type '%s' has no len()", v.iter)
		}
		return len(v.items), nil
	case *dict:
		return len(v.keys), nil
	case *undefined:
		return 0, nil
	case *namespace:
		return len(v.d.keys), nil
	}
	return 0, fmt.Errorf("object of type '%s' has no len()", typeName(v))
}

// iterate returns the items a for loop over v sees.
func iterate(v value) ([]value, error) {
	switch v := v.(type) {
	case *list:
		if v.lazy() {
			items := v.items[v.pos:]
			v.pos = len(v.items)
			return items, nil
		}
		return v.items, nil
	case *dict:
		out := make([]value, len(v.keys))
		for i, k := range v.keys {
			out[i] = v.keyVal(k)
		}
		return out, nil
	case str:
		var out []value
		for i, r := range v.s {
			out = append(out, v.slice(i, i+utf8.RuneLen(r)))
		}
		return out, nil
	case *undefined:
		return nil, nil
	}
	return nil, fmt.Errorf("'%s' object is not iterable", typeName(v))
}
