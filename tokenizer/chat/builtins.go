package chat

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// The globals transformers gives a chat template, and jinja2's own that templates use.
var globals = map[string]value{
	"range":           builtin(rangeFn),
	"dict":            builtin(dictFn),
	"namespace":       builtin(namespaceFn),
	"raise_exception": builtin(raiseFn),
	"strftime_now":    builtin(strftimeNowFn),
}

var knownFilters = set("tojson", "trim", "length", "count", "upper", "lower", "title", "capitalize",
	"replace", "join", "default", "d", "first", "last", "list", "string", "int", "float", "items",
	"selectattr", "rejectattr", "select", "reject", "map", "safe", "e", "escape", "forceescape",
	"abs", "round", "unique", "reverse", "sort", "sum", "min", "max", "indent", "wordcount",
	"dictsort", "attr", "center", "truncate")

var knownTests = set("defined", "undefined", "none", "string", "mapping", "iterable", "sequence",
	"number", "integer", "float", "boolean", "true", "false", "equalto", "eq", "==", "ne", "!=",
	"lt", "<", "le", "<=", "gt", ">", "ge", ">=", "in", "odd", "even", "divisibleby", "callable",
	"sameas", "lower", "upper", "filter", "test")

var (
	strMethods = set("strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith",
		"endswith", "replace", "upper", "lower", "title", "capitalize", "find", "rfind", "index",
		"rindex", "count", "join", "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper",
		"isnumeric", "isdecimal", "zfill", "removeprefix", "removesuffix", "partition", "rpartition",
		"swapcase", "casefold", "center", "ljust", "rjust")
	dictMethods = set("get", "items", "keys", "values")
	listMethods = set("index", "count")
	// knownMethods are the names a template may call as obj.name(...).
	knownMethods = union(strMethods, dictMethods, listMethods, set("cycle"))
)

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

func union(ms ...map[string]bool) map[string]bool {
	out := map[string]bool{}
	for _, m := range ms {
		for k := range m {
			out[k] = true
		}
	}
	return out
}

// arg returns positional argument i, or keyword argument name.
func arg(args []value, kw map[string]value, i int, name string) (value, bool) {
	if i < len(args) {
		return args[i], true
	}
	if v, ok := kw[name]; ok {
		return v, true
	}
	return nil, false
}

func strArg(args []value, kw map[string]value, i int, name string) (string, bool, error) {
	v, ok := arg(args, kw, i, name)
	if !ok || v == nil {
		return "", false, nil
	}
	s, isStr := v.(str)
	if !isStr {
		return "", false, fmt.Errorf("%s must be a string, not %s", name, typeName(v))
	}
	return s.s, true, nil
}

func intArg(args []value, kw map[string]value, i int, name string, def int64) (int64, error) {
	v, ok := arg(args, kw, i, name)
	if !ok || v == nil {
		return def, nil
	}
	n, isInt := intOf(v)
	if !isInt {
		return 0, fmt.Errorf("%s must be an integer, not %s", name, typeName(v))
	}
	return n, nil
}

func rangeFn(_ *renderer, _ pos, args []value, _ map[string]value) (value, error) {
	var ns []int64
	for _, a := range args {
		n, ok := intOf(a)
		if !ok {
			return nil, fmt.Errorf("range() arguments must be integers, not %s", typeName(a))
		}
		ns = append(ns, n)
	}
	start, stop, step := int64(0), int64(0), int64(1)
	switch len(ns) {
	case 1:
		stop = ns[0]
	case 2:
		start, stop = ns[0], ns[1]
	case 3:
		start, stop, step = ns[0], ns[1], ns[2]
	default:
		return nil, fmt.Errorf("range expected 1 to 3 arguments, got %d", len(ns))
	}
	if step == 0 {
		return nil, errors.New("range() arg 3 must not be zero")
	}
	out := &list{}
	for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
		if len(out.items) > 1_000_000 {
			return nil, errors.New("range too big")
		}
		out.items = append(out.items, i)
	}
	return out, nil
}

func dictFn(_ *renderer, _ pos, args []value, kw map[string]value) (value, error) {
	d := newDict()
	if len(args) > 1 {
		return nil, fmt.Errorf("dict expected at most 1 argument, got %d", len(args))
	}
	if len(args) == 1 {
		switch a := args[0].(type) {
		case *dict:
			for _, k := range a.keys {
				if err := d.setKey(a.keyVal(k), a.m[k]); err != nil {
					return nil, err
				}
			}
		default:
			items, err := iterate(a)
			if err != nil {
				return nil, err
			}
			for _, it := range items {
				kv, err := unpack(it, 2)
				if err != nil {
					return nil, err
				}
				if err := d.setKey(kv[0], kv[1]); err != nil {
					return nil, err
				}
			}
		}
	}
	for _, k := range sortedKeys(kw) {
		d.set(k, kw[k])
	}
	return d, nil
}

// sortedKeys orders keyword arguments; Go maps lose the order of the call, and Python
// keeps it, so a template that prints a dict(...) built from several keywords may differ.
func sortedKeys(m map[string]value) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func namespaceFn(r *renderer, p pos, args []value, kw map[string]value) (value, error) {
	d, err := dictFn(r, p, args, kw)
	if err != nil {
		return nil, err
	}
	for _, k := range d.(*dict).keys {
		if strings.HasPrefix(k, "_") {
			return nil, fmt.Errorf("Chat templates cannot store underscore-prefixed attributes on a namespace, but got %s", pyQuote(k))
		}
	}
	return &namespace{d: d.(*dict)}, nil
}

func raiseFn(_ *renderer, _ pos, args []value, _ map[string]value) (value, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("raise_exception() takes 1 argument, got %d", len(args))
	}
	return nil, &TemplateError{Msg: toStr(args[0]).s}
}

func strftimeNowFn(r *renderer, _ pos, args []value, _ map[string]value) (value, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("strftime_now() takes 1 argument, got %d", len(args))
	}
	f, ok := args[0].(str)
	if !ok {
		return nil, fmt.Errorf("strftime_now() argument must be str, not %s", typeName(args[0]))
	}
	return newStr(strftime(r.now, f.s)), nil
}

// strftime formats t as C's strftime in the C locale (Python's datetime.strftime on
// Linux), with glibc's "-" flag (no padding).
func strftime(t time.Time, f string) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 == len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		pad := true
		if f[i] == '-' && i+1 < len(f) {
			pad = false
			i++
		}
		num := func(v, width int) {
			if pad {
				fmt.Fprintf(&b, "%0*d", width, v)
			} else {
				fmt.Fprintf(&b, "%d", v)
			}
		}
		switch f[i] {
		case 'Y':
			fmt.Fprintf(&b, "%d", t.Year())
		case 'y':
			num(t.Year()%100, 2)
		case 'm':
			num(int(t.Month()), 2)
		case 'd':
			num(t.Day(), 2)
		case 'e':
			if pad {
				fmt.Fprintf(&b, "%2d", t.Day())
			} else {
				fmt.Fprintf(&b, "%d", t.Day())
			}
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			num(h, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'j':
			num(t.YearDay(), 3)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'B':
			b.WriteString(t.Month().String())
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'w':
			fmt.Fprintf(&b, "%d", int(t.Weekday()))
		case 'F':
			b.WriteString(t.Format("2006-01-02"))
		case 'T':
			b.WriteString(t.Format("15:04:05"))
		case 'D':
			b.WriteString(t.Format("01/02/06"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(f[i])
		}
	}
	return b.String()
}

func runTest(name string, v value, args []value) (bool, error) {
	a0 := func() (value, error) {
		if len(args) < 1 {
			return nil, fmt.Errorf("test '%s' needs an argument", name)
		}
		return args[0], nil
	}
	switch name {
	case "defined":
		_, u := v.(*undefined)
		return !u, nil
	case "undefined":
		_, u := v.(*undefined)
		return u, nil
	case "none":
		return v == nil, nil
	case "string":
		_, ok := v.(str)
		return ok, nil
	case "mapping":
		_, ok := v.(*dict)
		return ok, nil
	case "iterable":
		switch v.(type) {
		case str, *list, *dict, *undefined:
			return true, nil
		}
		return false, nil
	case "sequence":
		switch x := v.(type) {
		case str, *dict, *undefined:
			return true, nil
		case *list:
			return x.plain(), nil
		}
		return false, nil
	case "number":
		_, ok := num(v)
		return ok, nil
	case "integer":
		_, ok := v.(int64)
		return ok, nil
	case "float":
		_, ok := v.(float64)
		return ok, nil
	case "boolean":
		_, ok := v.(bool)
		return ok, nil
	case "true":
		b, ok := v.(bool)
		return ok && b, nil
	case "false":
		b, ok := v.(bool)
		return ok && !b, nil
	case "callable":
		switch v.(type) {
		case builtin, *macro, *boundMethod:
			return true, nil
		}
		return false, nil
	case "lower", "upper":
		s, ok := v.(str)
		if !ok {
			return false, nil
		}
		if name == "lower" {
			return strings.ToLower(s.s) == s.s, nil
		}
		return strings.ToUpper(s.s) == s.s, nil
	case "odd", "even":
		n, ok := intOf(v)
		if !ok {
			return false, fmt.Errorf("test '%s' needs an integer, got %s", name, typeName(v))
		}
		return (n%2 != 0) == (name == "odd"), nil
	case "divisibleby":
		d, err := a0()
		if err != nil {
			return false, err
		}
		n, ok1 := intOf(v)
		m, ok2 := intOf(d)
		if !ok1 || !ok2 || m == 0 {
			return false, errors.New("divisibleby needs nonzero integers")
		}
		return n%m == 0, nil
	case "sameas":
		d, err := a0()
		if err != nil {
			return false, err
		}
		switch v.(type) {
		case nil, bool:
			return v == d, nil
		}
		return equal(v, d) && fmt.Sprintf("%p", v) == fmt.Sprintf("%p", d), nil
	case "in":
		d, err := a0()
		if err != nil {
			return false, err
		}
		return contains(d, v)
	case "filter":
		s, ok := v.(str)
		return ok && knownFilters[s.s], nil
	case "test":
		s, ok := v.(str)
		return ok && knownTests[s.s], nil
	}
	d, err := a0()
	if err != nil {
		return false, err
	}
	op := map[string]string{"equalto": "==", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[name]
	if op == "" {
		op = name
	}
	return cmpop(op, v, d)
}

func (r *renderer) callFilter(f *filterExpr, v value, sc *scope) (value, error) {
	args, err := r.evalList(f.args, sc)
	if err != nil {
		return nil, err
	}
	kw, err := r.evalKwargs(f.kwargs, sc)
	if err != nil {
		return nil, err
	}
	out, err := filter(f.name, v, args, kw)
	return out, at(f.p, err)
}

func filter(name string, v value, args []value, kw map[string]value) (value, error) {
	switch name {
	case "default", "d":
		def, _ := arg(args, kw, 0, "default_value")
		if def == nil && len(args) == 0 && !hasKey(kw, "default_value") {
			def = newStr("")
		}
		boolean, _ := arg(args, kw, 1, "boolean")
		if _, u := v.(*undefined); u || (truthy(boolean) && !truthy(v)) {
			return def, nil
		}
		return v, nil
	case "safe":
		return v, nil
	case "string":
		return toStr(v), nil
	case "tojson":
		return tojson(v, args, kw)
	case "length", "count":
		n, err := length(v)
		return int64(n), err
	case "first", "last":
		if l, ok := v.(*list); ok && l.lazy() {
			if name == "last" {
				return nil, fmt.Errorf("'%s' object is not reversible", l.iter)
			}
			if l.pos < len(l.items) {
				l.pos++
				return l.items[l.pos-1], nil
			}
		}
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return &undefined{hint: "No " + name + " item, sequence was empty."}, nil
		}
		if name == "first" {
			return items[0], nil
		}
		return items[len(items)-1], nil
	case "list":
		items, err := iterate(v)
		return &list{items: append([]value{}, items...)}, err
	case "items":
		if _, u := v.(*undefined); u {
			return &list{iter: "generator"}, nil
		}
		d, ok := v.(*dict)
		if !ok {
			return nil, fmt.Errorf("can only get item pairs from a mapping, not %s", typeName(v))
		}
		items := dictItems(d)
		items.iter = "generator"
		return items, nil
	case "reverse":
		switch x := v.(type) {
		case str:
			s, _ := sliceValue(x, nil, nil, ptr(-1))
			return s, nil
		}
		wasLazy := false
		if l, ok := v.(*list); ok {
			wasLazy = l.lazy()
		}
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		out := &list{}
		if !wasLazy {
			// reversed(seq) is an iterator; a generator is made a list first.
			out.iter = "list_reverseiterator"
		}
		for i := len(items) - 1; i >= 0; i-- {
			out.items = append(out.items, items[i])
		}
		return out, nil
	case "join":
		return joinFilter(v, args, kw)
	case "int":
		return toInt(v, args, kw)
	case "float":
		switch x := v.(type) {
		case str:
			f, err := strconv.ParseFloat(strings.TrimSpace(x.s), 64)
			if err != nil {
				def, _ := arg(args, kw, 0, "default")
				if def == nil {
					def = 0.0
				}
				return def, nil
			}
			return f, nil
		}
		f, ok := num(v)
		if !ok {
			return 0.0, nil
		}
		return f, nil
	case "abs":
		switch x := v.(type) {
		case int64:
			if x < 0 {
				return -x, nil
			}
			return x, nil
		case float64:
			return math.Abs(x), nil
		}
		return nil, fmt.Errorf("bad operand type for abs(): '%s'", typeName(v))
	case "round":
		f, ok := num(v)
		if !ok {
			return nil, fmt.Errorf("round needs a number, not %s", typeName(v))
		}
		prec, err := intArg(args, kw, 0, "precision", 0)
		if err != nil {
			return nil, err
		}
		method, _, _ := strArg(args, kw, 1, "method")
		p := math.Pow(10, float64(prec))
		switch method {
		case "ceil":
			return math.Ceil(f*p) / p, nil
		case "floor":
			return math.Floor(f*p) / p, nil
		}
		return math.RoundToEven(f*p) / p, nil
	case "e", "escape", "forceescape":
		s := toStr(v).s
		return newStr(strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;").Replace(s)), nil
	case "attr":
		n, _, err := strArg(args, kw, 0, "name")
		if err != nil {
			return nil, err
		}
		return getattr(v, n)
	}
	if s, ok := v.(str); ok || name == "trim" || name == "upper" || name == "lower" || name == "title" ||
		name == "capitalize" || name == "replace" || name == "indent" || name == "wordcount" || name == "center" || name == "truncate" {
		if !ok {
			s = toStr(v)
		}
		switch name {
		case "trim":
			chars, has, err := strArg(args, kw, 0, "chars")
			if err != nil {
				return nil, err
			}
			return strip(s, chars, has, true, true), nil
		case "upper", "lower", "capitalize":
			return callMethod(s, name, nil, nil)
		case "title":
			return titleFilter(s), nil
		case "replace":
			return callMethod(s, "replace", args, kw)
		case "indent":
			return indentFilter(s, args, kw)
		case "wordcount":
			return int64(len(strings.Fields(s.s))), nil
		case "center":
			return callMethod(s, "center", args, kw)
		case "truncate":
			return nil, errors.New("filter 'truncate' is not implemented")
		}
	}
	switch name {
	case "unique", "sort", "sum", "min", "max", "dictsort":
		return seqFilter(name, v, args, kw)
	case "map", "select", "reject", "selectattr", "rejectattr":
		return selectFilter(name, v, args, kw)
	}
	return nil, fmt.Errorf("filter '%s' does not apply to %s", name, typeName(v))
}

func ptr(i int64) *int64 { return &i }

func dictItems(d *dict) *list {
	out := &list{tag: d.tag}
	for _, k := range d.keys {
		out.items = append(out.items, &list{items: []value{d.keyVal(k), d.m[k]}, tuple: true})
	}
	return out
}

func joinFilter(v value, args []value, kw map[string]value) (value, error) {
	sep, _, err := strArg(args, kw, 0, "d")
	if err != nil {
		return nil, err
	}
	attrName, hasAttr, err := strArg(args, kw, 1, "attribute")
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	var w strBuf
	for i, it := range items {
		if i > 0 {
			w.addPlain(sep)
		}
		if hasAttr {
			if it, err = getattrPath(it, attrName); err != nil {
				return nil, err
			}
		}
		w.add(toStr(it))
	}
	return w.str(), nil
}

func toInt(v value, args []value, kw map[string]value) (value, error) {
	def, err := intArg(args, kw, 0, "default", 0)
	if err != nil {
		return nil, err
	}
	base, err := intArg(args, kw, 1, "base", 10)
	if err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case int64:
		return x, nil
	case bool:
		i, _ := intOf(x)
		return i, nil
	case float64:
		return int64(x), nil
	case str:
		s := strings.TrimSpace(x.s)
		if i, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), int(base), 64); err == nil {
			return i, nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil && base == 10 {
			return int64(f), nil
		}
	}
	return def, nil
}

// getattrPath reads a dotted attribute path ("function.name"), as jinja2's
// make_attrgetter does; a number in the path indexes a list.
func getattrPath(v value, path string) (value, error) {
	for _, part := range strings.Split(path, ".") {
		var err error
		if n, e := strconv.Atoi(part); e == nil {
			v, err = getitem(v, int64(n))
		} else {
			v, err = getitem(v, newStr(part))
		}
		if err != nil {
			return nil, err
		}
	}
	return v, nil
}

func titleFilter(s str) str {
	// jinja2's title: words are split at whitespace, '-', '(', '{', '[' and '<'; each is
	// capitalized (first letter upper, the rest lower).
	var b strings.Builder
	start := true
	for _, r := range s.s {
		if unicode.IsSpace(r) || strings.ContainsRune("-({[<", r) {
			b.WriteRune(r)
			start = true
			continue
		}
		if start {
			b.WriteString(strings.ToUpper(string(r)))
			start = false
		} else {
			b.WriteString(strings.ToLower(string(r)))
		}
	}
	return keepRunsIfSameLen(b.String(), s)
}

func keepRunsIfSameLen(out string, src str) str {
	if len(out) == len(src.s) {
		return str{s: out, runs: src.runs}
	}
	return retag(out, src)
}

func indentFilter(s str, args []value, kw map[string]value) (value, error) {
	w, ok := arg(args, kw, 0, "width")
	pad := "    "
	if ok {
		switch x := w.(type) {
		case str:
			pad = x.s
		default:
			n, isInt := intOf(x)
			if !isInt {
				return nil, errors.New("indent width must be an integer or a string")
			}
			pad = strings.Repeat(" ", int(n))
		}
	}
	first, _ := arg(args, kw, 1, "first")
	blank, _ := arg(args, kw, 2, "blank")
	lines := strings.Split(s.s, "\n")
	var w2 strBuf
	off := 0
	for i, ln := range lines {
		piece := s.slice(off, off+len(ln))
		off += len(ln) + 1
		if i > 0 {
			w2.addPlain("\n")
		}
		if (i > 0 || truthy(first)) && (truthy(blank) || strings.TrimSpace(ln) != "") {
			w2.addPlain(pad)
		}
		w2.add(piece)
	}
	return w2.str(), nil
}

func seqFilter(name string, v value, args []value, kw map[string]value) (value, error) {
	if name == "dictsort" {
		d, ok := v.(*dict)
		if !ok {
			return nil, errors.New("dictsort needs a mapping")
		}
		items := dictItems(d)
		var sortErr error
		sort.SliceStable(items.items, func(i, j int) bool {
			c, err := compare(lowerIfStr(items.items[i].(*list).items[0]), lowerIfStr(items.items[j].(*list).items[0]))
			if err != nil {
				sortErr = err
			}
			return c < 0
		})
		return items, sortErr
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	attrName, hasAttr, err := strArg(args, kw, 2, "attribute")
	if name == "sum" {
		attrName, hasAttr, err = strArg(args, kw, 0, "attribute")
	}
	if name == "unique" || name == "min" || name == "max" {
		attrName, hasAttr, err = strArg(args, kw, 1, "attribute")
	}
	if err != nil {
		return nil, err
	}
	key := func(x value) (value, error) {
		if hasAttr {
			return getattrPath(x, attrName)
		}
		return x, nil
	}
	switch name {
	case "sum":
		var total value = int64(0)
		if s, ok := arg(args, kw, 1, "start"); ok {
			total = s
		}
		for _, it := range items {
			k, err := key(it)
			if err != nil {
				return nil, err
			}
			if total, err = binop("+", total, k); err != nil {
				return nil, err
			}
		}
		return total, nil
	case "unique":
		out := &list{iter: "generator"}
		for _, it := range items {
			k, err := key(it)
			if err != nil {
				return nil, err
			}
			dup := false
			for _, o := range out.items {
				ok, _ := key(o)
				if equal(lowerIfStr(ok), lowerIfStr(k)) {
					dup = true
				}
			}
			if !dup {
				out.items = append(out.items, it)
			}
		}
		return out, nil
	}
	sorted := append([]value{}, items...)
	var sortErr error
	sort.SliceStable(sorted, func(i, j int) bool {
		a, err1 := key(sorted[i])
		b, err2 := key(sorted[j])
		if err1 != nil || err2 != nil {
			sortErr = errors.Join(err1, err2)
			return false
		}
		c, err := compare(lowerIfStr(a), lowerIfStr(b))
		if err != nil {
			sortErr = err
		}
		return c < 0
	})
	if sortErr != nil {
		return nil, sortErr
	}
	switch name {
	case "min":
		if len(sorted) == 0 {
			return &undefined{hint: "No aggregated item, sequence was empty."}, nil
		}
		return sorted[0], nil
	case "max":
		if len(sorted) == 0 {
			return &undefined{hint: "No aggregated item, sequence was empty."}, nil
		}
		return sorted[len(sorted)-1], nil
	}
	if rev, _ := arg(args, kw, 0, "reverse"); truthy(rev) {
		for i, j := 0, len(sorted)-1; i < j; i, j = i+1, j-1 {
			sorted[i], sorted[j] = sorted[j], sorted[i]
		}
	}
	return &list{items: sorted}, nil
}

// lowerIfStr is jinja2's ignore_case for sorting and unique (case_sensitive=False).
func lowerIfStr(v value) value {
	if s, ok := v.(str); ok {
		return newStr(strings.ToLower(s.s))
	}
	return v
}

func selectFilter(name string, v value, args []value, kw map[string]value) (value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := &list{iter: "generator"}
	if name == "map" {
		if a, ok := kw["attribute"]; ok {
			path, ok := a.(str)
			if !ok {
				return nil, errors.New("map attribute must be a string")
			}
			def, hasDef := kw["default"]
			for _, it := range items {
				x, err := getattrPath(it, path.s)
				if err != nil {
					return nil, err
				}
				if _, u := x.(*undefined); u && hasDef {
					x = def
				}
				out.items = append(out.items, x)
			}
			return out, nil
		}
		if len(args) == 0 {
			return nil, errors.New("map needs a filter name or attribute=")
		}
		fname, ok := args[0].(str)
		if !ok || !knownFilters[fname.s] {
			return nil, fmt.Errorf("map: unsupported filter %s", repr(args[0]))
		}
		for _, it := range items {
			x, err := filter(fname.s, it, args[1:], kw)
			if err != nil {
				return nil, err
			}
			out.items = append(out.items, x)
		}
		return out, nil
	}
	byAttr := name == "selectattr" || name == "rejectattr"
	rest := args
	var path string
	if byAttr {
		if len(args) == 0 {
			return nil, fmt.Errorf("%s needs an attribute name", name)
		}
		p, ok := args[0].(str)
		if !ok {
			return nil, fmt.Errorf("%s: attribute name must be a string", name)
		}
		path, rest = p.s, args[1:]
	}
	test := ""
	if len(rest) > 0 {
		t, ok := rest[0].(str)
		if !ok || !knownTests[t.s] {
			return nil, fmt.Errorf("%s: unsupported test %s", name, repr(rest[0]))
		}
		test, rest = t.s, rest[1:]
	}
	want := name == "select" || name == "selectattr"
	for _, it := range items {
		x := it
		if byAttr {
			if x, err = getattrPath(it, path); err != nil {
				return nil, err
			}
		}
		ok := truthy(x)
		if test != "" {
			if ok, err = runTest(test, x, rest); err != nil {
				return nil, err
			}
		}
		if ok == want {
			out.items = append(out.items, it)
		}
	}
	return out, nil
}

// callMethod calls a Python method of a string, dict, list or loop.
func callMethod(recv value, name string, args []value, kw map[string]value) (value, error) {
	switch o := recv.(type) {
	case str:
		return strMethod(o, name, args, kw)
	case *dict:
		switch name {
		case "get":
			k, _ := arg(args, kw, 0, "key")
			def, _ := arg(args, kw, 1, "default")
			if v, ok := o.lookup(k); ok {
				return v, nil
			}
			return def, nil
		case "items":
			items := dictItems(o)
			items.iter = "dict_items"
			return items, nil
		case "keys":
			out := &list{tag: o.tag, iter: "dict_keys"}
			for _, k := range o.keys {
				out.items = append(out.items, o.keyVal(k))
			}
			return out, nil
		case "values":
			out := &list{tag: o.tag, iter: "dict_values"}
			for _, k := range o.keys {
				out.items = append(out.items, o.m[k])
			}
			return out, nil
		}
	case *list:
		if !o.plain() {
			break
		}
		x, _ := arg(args, kw, 0, "value")
		switch name {
		case "count":
			n := int64(0)
			for _, it := range o.items {
				if equal(it, x) {
					n++
				}
			}
			return n, nil
		case "index":
			for i, it := range o.items {
				if equal(it, x) {
					return int64(i), nil
				}
			}
			return nil, fmt.Errorf("%s is not in list", repr(x))
		}
	case *loopObj:
		if name == "cycle" {
			if len(args) == 0 {
				return nil, errors.New("no items for cycling given")
			}
			return args[o.i%len(args)], nil
		}
	}
	return nil, fmt.Errorf("'%s' object has no attribute '%s'", typeName(recv), name)
}

// strip is Python's str.strip/lstrip/rstrip (chars given or whitespace), keeping
// provenance.
func strip(s str, chars string, has, left, right bool) str {
	in := func(r rune) bool {
		if has {
			return strings.ContainsRune(chars, r)
		}
		return unicode.IsSpace(r)
	}
	i, j := 0, len(s.s)
	if left {
		for i < j {
			r, n := utf8.DecodeRuneInString(s.s[i:])
			if !in(r) {
				break
			}
			i += n
		}
	}
	if right {
		for j > i {
			r, n := utf8.DecodeLastRuneInString(s.s[i:j])
			if !in(r) {
				break
			}
			j -= n
		}
	}
	return s.slice(i, j)
}

// split is Python's str.split / rsplit.
func split(s str, sep string, hasSep bool, maxsplit int64, fromRight bool) *list {
	out := &list{}
	var idx [][2]int // byte ranges of the parts
	if !hasSep {
		// Runs of whitespace separate; empty parts are dropped.
		var fields [][2]int
		start := -1
		for i, r := range s.s {
			if unicode.IsSpace(r) {
				if start >= 0 {
					fields = append(fields, [2]int{start, i})
					start = -1
				}
			} else if start < 0 {
				start = i
			}
		}
		if start >= 0 {
			fields = append(fields, [2]int{start, len(s.s)})
		}
		if maxsplit >= 0 && int64(len(fields)) > maxsplit+1 {
			if fromRight {
				k := len(fields) - int(maxsplit)
				first := [2]int{fields[0][0], fields[k-1][1]}
				fields = append([][2]int{first}, fields[k:]...)
			} else {
				last := [2]int{fields[maxsplit][0], len(strings.TrimRightFunc(s.s, unicode.IsSpace))}
				fields = append(fields[:maxsplit], last)
			}
		}
		idx = fields
	} else if fromRight {
		end := len(s.s)
		n := int64(0)
		for maxsplit < 0 || n < maxsplit {
			k := strings.LastIndex(s.s[:end], sep)
			if k < 0 {
				break
			}
			idx = append([][2]int{{k + len(sep), end}}, idx...)
			end = k
			n++
		}
		idx = append([][2]int{{0, end}}, idx...)
	} else {
		start := 0
		n := int64(0)
		for maxsplit < 0 || n < maxsplit {
			k := strings.Index(s.s[start:], sep)
			if k < 0 {
				break
			}
			idx = append(idx, [2]int{start, start + k})
			start += k + len(sep)
			n++
		}
		idx = append(idx, [2]int{start, len(s.s)})
	}
	for _, r := range idx {
		out.items = append(out.items, s.slice(r[0], r[1]))
	}
	return out
}

func strMethod(s str, name string, args []value, kw map[string]value) (value, error) {
	switch name {
	case "strip", "lstrip", "rstrip":
		chars, has, err := strArg(args, kw, 0, "chars")
		if err != nil {
			return nil, err
		}
		return strip(s, chars, has, name != "rstrip", name != "lstrip"), nil
	case "split", "rsplit":
		sep, has, err := strArg(args, kw, 0, "sep")
		if err != nil {
			return nil, err
		}
		if has && sep == "" {
			return nil, errors.New("empty separator")
		}
		maxsplit, err := intArg(args, kw, 1, "maxsplit", -1)
		if err != nil {
			return nil, err
		}
		return split(s, sep, has, maxsplit, name == "rsplit"), nil
	case "splitlines":
		out := &list{}
		start := 0
		for i := 0; i < len(s.s); i++ {
			if s.s[i] == '\n' || s.s[i] == '\r' {
				out.items = append(out.items, s.slice(start, i))
				if s.s[i] == '\r' && i+1 < len(s.s) && s.s[i+1] == '\n' {
					i++
				}
				start = i + 1
			}
		}
		if start < len(s.s) {
			out.items = append(out.items, s.slice(start, len(s.s)))
		}
		return out, nil
	case "startswith", "endswith":
		x, _ := arg(args, kw, 0, "prefix")
		var cands []string
		switch p := x.(type) {
		case str:
			cands = []string{p.s}
		case *list:
			for _, it := range p.items {
				ps, ok := it.(str)
				if !ok {
					return nil, errors.New(name + " first arg must be str or a tuple of str")
				}
				cands = append(cands, ps.s)
			}
		default:
			return nil, fmt.Errorf("%s first arg must be str or a tuple of str, not %s", name, typeName(x))
		}
		for _, c := range cands {
			if (name == "startswith" && strings.HasPrefix(s.s, c)) || (name == "endswith" && strings.HasSuffix(s.s, c)) {
				return true, nil
			}
		}
		return false, nil
	case "replace":
		old, _, err := strArg(args, kw, 0, "old")
		if err != nil {
			return nil, err
		}
		nv, _ := arg(args, kw, 1, "new")
		ns, ok := nv.(str)
		if !ok {
			return nil, fmt.Errorf("replace() argument 2 must be str, not %s", typeName(nv))
		}
		count, err := intArg(args, kw, 2, "count", -1)
		if err != nil {
			return nil, err
		}
		var w strBuf
		start, n := 0, int64(0)
		for count < 0 || n < count {
			var k int
			if old == "" {
				if start > len(s.s) || (n > 0 && start == len(s.s)) {
					break
				}
				k = 0
				if n > 0 {
					_, size := utf8.DecodeRuneInString(s.s[start:])
					w.add(s.slice(start, start+size))
					start += size
				}
			} else {
				k = strings.Index(s.s[start:], old)
				if k < 0 {
					break
				}
				w.add(s.slice(start, start+k))
			}
			w.add(ns)
			start += k + len(old)
			n++
		}
		w.add(s.slice(min(start, len(s.s)), len(s.s)))
		return w.str(), nil
	case "upper":
		return keepRunsIfSameLen(strings.ToUpper(s.s), s), nil
	case "lower", "casefold":
		return keepRunsIfSameLen(strings.ToLower(s.s), s), nil
	case "swapcase":
		var b strings.Builder
		for _, r := range s.s {
			if unicode.IsUpper(r) {
				b.WriteRune(unicode.ToLower(r))
			} else {
				b.WriteRune(unicode.ToUpper(r))
			}
		}
		return keepRunsIfSameLen(b.String(), s), nil
	case "capitalize":
		if s.s == "" {
			return s, nil
		}
		r, n := utf8.DecodeRuneInString(s.s)
		return keepRunsIfSameLen(strings.ToUpper(string(r))+strings.ToLower(s.s[n:]), s), nil
	case "title":
		var b strings.Builder
		prevLetter := false
		for _, r := range s.s {
			if prevLetter {
				b.WriteRune(unicode.ToLower(r))
			} else {
				b.WriteRune(unicode.ToTitle(r))
			}
			prevLetter = unicode.IsLetter(r)
		}
		return keepRunsIfSameLen(b.String(), s), nil
	case "find", "rfind", "index", "rindex", "count":
		sub, _, err := strArg(args, kw, 0, "sub")
		if err != nil {
			return nil, err
		}
		if len(args) > 1 {
			return nil, fmt.Errorf("str.%s with start/end is not supported", name)
		}
		switch name {
		case "count":
			if sub == "" {
				return int64(utf8.RuneCountInString(s.s) + 1), nil
			}
			return int64(strings.Count(s.s, sub)), nil
		case "find", "index":
			k := strings.Index(s.s, sub)
			if k < 0 {
				if name == "index" {
					return nil, errors.New("substring not found")
				}
				return int64(-1), nil
			}
			return int64(utf8.RuneCountInString(s.s[:k])), nil
		}
		k := strings.LastIndex(s.s, sub)
		if k < 0 {
			if name == "rindex" {
				return nil, errors.New("substring not found")
			}
			return int64(-1), nil
		}
		return int64(utf8.RuneCountInString(s.s[:k])), nil
	case "join":
		x, _ := arg(args, kw, 0, "iterable")
		items, err := iterate(x)
		if err != nil {
			return nil, err
		}
		var w strBuf
		for i, it := range items {
			is, ok := it.(str)
			if !ok {
				return nil, fmt.Errorf("sequence item %d: expected str instance, %s found", i, typeName(it))
			}
			if i > 0 {
				w.add(s)
			}
			w.add(is)
		}
		return w.str(), nil
	case "isdigit", "isnumeric", "isdecimal", "isalpha", "isalnum", "isspace", "islower", "isupper":
		if s.s == "" {
			return false, nil
		}
		cased := false
		for _, r := range s.s {
			var ok bool
			switch name {
			case "isdigit", "isnumeric", "isdecimal":
				ok = unicode.IsDigit(r)
			case "isalpha":
				ok = unicode.IsLetter(r)
			case "isalnum":
				ok = unicode.IsLetter(r) || unicode.IsDigit(r)
			case "isspace":
				ok = unicode.IsSpace(r)
			case "islower":
				ok = !unicode.IsUpper(r)
				cased = cased || unicode.IsLower(r)
			case "isupper":
				ok = !unicode.IsLower(r)
				cased = cased || unicode.IsUpper(r)
			}
			if !ok {
				return false, nil
			}
		}
		if name == "islower" || name == "isupper" {
			return cased, nil
		}
		return true, nil
	case "removeprefix", "removesuffix":
		a, _, err := strArg(args, kw, 0, "prefix")
		if err != nil {
			return nil, err
		}
		if name == "removeprefix" && strings.HasPrefix(s.s, a) {
			return s.slice(len(a), len(s.s)), nil
		}
		if name == "removesuffix" && strings.HasSuffix(s.s, a) && a != "" {
			return s.slice(0, len(s.s)-len(a)), nil
		}
		return s, nil
	case "partition", "rpartition":
		sep, _, err := strArg(args, kw, 0, "sep")
		if err != nil {
			return nil, err
		}
		k := strings.Index(s.s, sep)
		if name == "rpartition" {
			k = strings.LastIndex(s.s, sep)
		}
		if k < 0 {
			if name == "rpartition" {
				return &list{items: []value{newStr(""), newStr(""), s}, tuple: true}, nil
			}
			return &list{items: []value{s, newStr(""), newStr("")}, tuple: true}, nil
		}
		return &list{items: []value{s.slice(0, k), s.slice(k, k+len(sep)), s.slice(k+len(sep), len(s.s))}, tuple: true}, nil
	case "zfill", "center", "ljust", "rjust":
		width, err := intArg(args, kw, 0, "width", 0)
		if err != nil {
			return nil, err
		}
		fill := " "
		if f, has, _ := strArg(args, kw, 1, "fillchar"); has {
			fill = f
		}
		n := utf8.RuneCountInString(s.s)
		if int64(n) >= width {
			return s, nil
		}
		pad := int(width) - n
		switch name {
		case "zfill":
			return concat(newStr(strings.Repeat("0", pad)), s), nil
		case "ljust":
			return concat(s, newStr(strings.Repeat(fill, pad))), nil
		case "rjust":
			return concat(newStr(strings.Repeat(fill, pad)), s), nil
		}
		left := pad / 2
		if pad%2 == 1 && int(width)%2 == 1 {
			left++
		}
		return concat(newStr(strings.Repeat(fill, left)), s, newStr(strings.Repeat(fill, pad-left))), nil
	}
	return nil, fmt.Errorf("'str' object has no attribute '%s'", name)
}
