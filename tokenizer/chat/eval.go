package chat

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// TemplateError is an error the template raised itself with raise_exception(msg): Msg
// is msg, as transformers' jinja2.exceptions.TemplateError carries it.
type TemplateError struct{ Msg string }

func (e *TemplateError) Error() string { return e.Msg }

// RenderError is a failure while rendering (a type error, an undefined value used), at a
// template position.
type RenderError struct {
	Line, Col int
	Msg       string
}

func (e *RenderError) Error() string {
	return fmt.Sprintf("chat template %d:%d: %s", e.Line, e.Col, e.Msg)
}

func rerr(p pos, format string, args ...any) error {
	return &RenderError{Line: p.line, Col: p.col, Msg: fmt.Sprintf(format, args...)}
}

// at gives err the position p unless it already has one.
func at(p pos, err error) error {
	if err == nil {
		return nil
	}
	var te *TemplateError
	var re *RenderError
	if errors.As(err, &te) || errors.As(err, &re) {
		return err
	}
	return rerr(p, "%v", err)
}

var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
)

// maxDepth bounds macro recursion, as Python's recursion limit does.
const maxDepth = 200

type scope struct {
	vars   map[string]value
	parent *scope
}

func (s *scope) lookup(name string) (value, bool) {
	for ; s != nil; s = s.parent {
		if v, ok := s.vars[name]; ok {
			return v, true
		}
	}
	return nil, false
}

func (s *scope) set(name string, v value) { s.vars[name] = v }

func newScope(parent *scope) *scope { return &scope{vars: map[string]value{}, parent: parent} }

type renderer struct {
	now   time.Time
	top   *strBuf
	gens  [][2]int
	depth int
}

type macro struct {
	n    *macroNode
	defs *scope
}

type loopObj struct {
	items []value
	i     int
	depth int
}

// builtin is a global function: range, namespace, raise_exception, ...
type builtin func(r *renderer, p pos, args []value, kw map[string]value) (value, error)

// boundMethod is obj.name before it is called.
type boundMethod struct {
	recv value
	name string
}

func (r *renderer) exec(b body, sc *scope, w *strBuf) error {
	for _, n := range b {
		if err := r.execOne(n, sc, w); err != nil {
			return err
		}
	}
	return nil
}

func (r *renderer) execOne(n node, sc *scope, w *strBuf) error {
	switch n := n.(type) {
	case *textNode:
		w.addPlain(n.s)
	case *outNode:
		v, err := r.eval(n.e, sc)
		if err != nil {
			return err
		}
		w.add(toStr(v))
	case *ifNode:
		for i, c := range n.conds {
			v, err := r.eval(c, sc)
			if err != nil {
				return err
			}
			if truthy(v) {
				return r.exec(n.bodies[i], sc, w)
			}
		}
		return r.exec(n.els, sc, w)
	case *forNode:
		return r.execFor(n, sc, w)
	case *setNode:
		return r.execSet(n, sc)
	case *macroNode:
		sc.set(n.name, &macro{n: n, defs: sc})
	case *genNode:
		start := r.top.b.Len()
		if w != r.top {
			// As transformers' tracker: offsets count the top-level output so far.
			var inner strBuf
			if err := r.exec(n.body, sc, &inner); err != nil {
				return err
			}
			r.gens = append(r.gens, [2]int{start, start + inner.b.Len()})
			w.add(inner.str())
			return nil
		}
		if err := r.exec(n.body, sc, w); err != nil {
			return err
		}
		r.gens = append(r.gens, [2]int{start, w.b.Len()})
	case *loopCtl:
		if n.brk {
			return errBreak
		}
		return errContinue
	case *withNode:
		inner := newScope(sc)
		for i, name := range n.names {
			v, err := r.eval(n.values[i], sc)
			if err != nil {
				return err
			}
			inner.set(name, v)
		}
		return r.exec(n.body, inner, w)
	case *filterBlock:
		var inner strBuf
		if err := r.exec(n.body, sc, &inner); err != nil {
			return err
		}
		v, err := r.applyFilters(inner.str(), n.filters, sc)
		if err != nil {
			return err
		}
		w.add(toStr(v))
	default:
		return fmt.Errorf("chat: unknown node %T", n)
	}
	return nil
}

func (r *renderer) applyFilters(v value, fs []*filterExpr, sc *scope) (value, error) {
	for _, f := range fs {
		var err error
		if v, err = r.callFilter(f, v, sc); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func (r *renderer) execSet(n *setNode, sc *scope) error {
	var v value
	if n.block != nil {
		var inner strBuf
		if err := r.exec(n.block, sc, &inner); err != nil {
			return err
		}
		var err error
		if v, err = r.applyFilters(inner.str(), n.filters, sc); err != nil {
			return err
		}
	} else {
		var err error
		if v, err = r.eval(n.value, sc); err != nil {
			return err
		}
	}
	if n.attr != "" {
		obj, _ := sc.lookup(n.targets[0])
		ns, ok := obj.(*namespace)
		if !ok {
			return rerr(n.p, "cannot assign attribute on non-namespace object '%s'", n.targets[0])
		}
		if strings.HasPrefix(n.attr, "_") {
			return rerr(n.p, "Chat templates cannot store underscore-prefixed attributes on a namespace, but got %s", pyQuote(n.attr))
		}
		ns.d.set(n.attr, v)
		return nil
	}
	if len(n.targets) == 1 {
		sc.set(n.targets[0], v)
		return nil
	}
	items, err := unpack(v, len(n.targets))
	if err != nil {
		return at(n.p, err)
	}
	for i, t := range n.targets {
		sc.set(t, items[i])
	}
	return nil
}

func unpack(v value, n int) ([]value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) != n {
		return nil, fmt.Errorf("cannot unpack %d values into %d names", len(items), n)
	}
	return items, nil
}

func (r *renderer) execFor(n *forNode, sc *scope, w *strBuf) error {
	iv, err := r.eval(n.iter, sc)
	if err != nil {
		return err
	}
	items, err := iterate(iv)
	if err != nil {
		return at(n.p, err)
	}
	// Each iteration has its own scope, as in jinja2: what the body sets is gone at the
	// next iteration and after the loop (namespace objects carry state across).
	bind := func(inner *scope, item value) error {
		if len(n.targets) == 1 {
			inner.set(n.targets[0], item)
			return nil
		}
		parts, err := unpack(item, len(n.targets))
		if err != nil {
			return at(n.p, err)
		}
		for i, t := range n.targets {
			inner.set(t, parts[i])
		}
		return nil
	}
	if n.cond != nil {
		var kept []value
		for _, it := range items {
			inner := newScope(sc)
			if err := bind(inner, it); err != nil {
				return err
			}
			c, err := r.eval(n.cond, inner)
			if err != nil {
				return err
			}
			if truthy(c) {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	depth := 1
	if outer, ok := sc.lookup("loop"); ok {
		if lo, ok := outer.(*loopObj); ok {
			depth = lo.depth + 1
		}
	}
	for i, it := range items {
		inner := newScope(sc)
		inner.set("loop", &loopObj{items: items, i: i, depth: depth})
		if err := bind(inner, it); err != nil {
			return err
		}
		err := r.exec(n.body, inner, w)
		if err == errBreak {
			break
		}
		if err != nil && err != errContinue {
			return err
		}
	}
	if len(items) == 0 {
		return r.exec(n.els, sc, w)
	}
	return nil
}

func (r *renderer) eval(e expr, sc *scope) (value, error) {
	switch e := e.(type) {
	case *constExpr:
		return e.v, nil
	case *nameExpr:
		if v, ok := sc.lookup(e.name); ok {
			return v, nil
		}
		if b, ok := globals[e.name]; ok {
			return b, nil
		}
		return &undefined{hint: fmt.Sprintf("'%s' is undefined", e.name)}, nil
	case *attrExpr:
		obj, err := r.eval(e.obj, sc)
		if err != nil {
			return nil, err
		}
		v, err := getattr(obj, e.name)
		return v, at(e.p, err)
	case *itemExpr:
		obj, err := r.eval(e.obj, sc)
		if err != nil {
			return nil, err
		}
		k, err := r.eval(e.key, sc)
		if err != nil {
			return nil, err
		}
		v, err := getitem(obj, k)
		return v, at(e.p, err)
	case *sliceExpr:
		return r.evalSlice(e, sc)
	case *callExpr:
		return r.evalCall(e, sc)
	case *filterExpr:
		v, err := r.eval(e.arg, sc)
		if err != nil {
			return nil, err
		}
		return r.callFilter(e, v, sc)
	case *testExpr:
		v, err := r.eval(e.arg, sc)
		if err != nil {
			return nil, err
		}
		args, err := r.evalList(e.args, sc)
		if err != nil {
			return nil, err
		}
		ok, err := runTest(e.name, v, args)
		if err != nil {
			return nil, at(e.p, err)
		}
		return ok != e.neg, nil
	case *binExpr:
		l, err := r.eval(e.l, sc)
		if err != nil {
			return nil, err
		}
		switch e.op {
		case "and":
			if !truthy(l) {
				return l, nil
			}
			return r.eval(e.r, sc)
		case "or":
			if truthy(l) {
				return l, nil
			}
			return r.eval(e.r, sc)
		}
		rv, err := r.eval(e.r, sc)
		if err != nil {
			return nil, err
		}
		v, err := binop(e.op, l, rv)
		return v, at(e.p, err)
	case *unExpr:
		x, err := r.eval(e.x, sc)
		if err != nil {
			return nil, err
		}
		switch e.op {
		case "not":
			return !truthy(x), nil
		case "-":
			switch x := x.(type) {
			case bool, int64:
				i, _ := intOf(x)
				return -i, nil
			case float64:
				return -x, nil
			}
			return nil, rerr(e.p, "bad operand type for unary -: '%s'", typeName(x))
		default:
			if _, ok := num(x); !ok {
				return nil, rerr(e.p, "bad operand type for unary +: '%s'", typeName(x))
			}
			if b, ok := x.(bool); ok {
				i, _ := intOf(b)
				return i, nil
			}
			return x, nil
		}
	case *cmpExpr:
		l, err := r.eval(e.first, sc)
		if err != nil {
			return nil, err
		}
		for i, op := range e.ops {
			rv, err := r.eval(e.rest[i], sc)
			if err != nil {
				return nil, err
			}
			ok, err := cmpop(op, l, rv)
			if err != nil {
				return nil, at(e.p, err)
			}
			if !ok {
				return false, nil
			}
			l = rv
		}
		return true, nil
	case *condExpr:
		c, err := r.eval(e.cond, sc)
		if err != nil {
			return nil, err
		}
		if truthy(c) {
			return r.eval(e.yes, sc)
		}
		if e.no == nil {
			return &undefined{hint: "the conditional expression had no else"}, nil
		}
		return r.eval(e.no, sc)
	case *listExpr:
		items, err := r.evalList(e.items, sc)
		if err != nil {
			return nil, err
		}
		return &list{items: items, tuple: e.tuple}, nil
	case *dictExpr:
		d := newDict()
		for i, ke := range e.keys {
			k, err := r.eval(ke, sc)
			if err != nil {
				return nil, err
			}
			v, err := r.eval(e.vals[i], sc)
			if err != nil {
				return nil, err
			}
			if err := d.setKey(k, v); err != nil {
				return nil, err
			}
		}
		return d, nil
	}
	return nil, fmt.Errorf("chat: unknown expression %T", e)
}

func (r *renderer) evalList(es []expr, sc *scope) ([]value, error) {
	out := make([]value, len(es))
	for i, e := range es {
		var err error
		if out[i], err = r.eval(e, sc); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (r *renderer) evalKwargs(ks []kwarg, sc *scope) (map[string]value, error) {
	if len(ks) == 0 {
		return nil, nil
	}
	m := make(map[string]value, len(ks))
	for _, k := range ks {
		v, err := r.eval(k.v, sc)
		if err != nil {
			return nil, err
		}
		m[k.name] = v
	}
	return m, nil
}

func (r *renderer) evalSlice(e *sliceExpr, sc *scope) (value, error) {
	obj, err := r.eval(e.obj, sc)
	if err != nil {
		return nil, err
	}
	var bounds [3]*int64
	for i, x := range []expr{e.start, e.stop, e.step} {
		if x == nil {
			continue
		}
		v, err := r.eval(x, sc)
		if err != nil {
			return nil, err
		}
		if v == nil {
			continue
		}
		n, ok := intOf(v)
		if !ok {
			return nil, rerr(e.p, "slice indices must be integers or None, not %s", typeName(v))
		}
		bounds[i] = &n
	}
	v, err := sliceValue(obj, bounds[0], bounds[1], bounds[2])
	return v, at(e.p, err)
}

// sliceIndices is Python's slice.indices for a sequence of length n.
func sliceIndices(n int, start, stop, step *int64) (idx []int, err error) {
	st := int64(1)
	if step != nil {
		st = *step
	}
	if st == 0 {
		return nil, errors.New("slice step cannot be zero")
	}
	clamp := func(p *int64, def int64, lo, hi int64) int64 {
		if p == nil {
			return def
		}
		v := *p
		if v < 0 {
			v += int64(n)
			if v < lo {
				v = lo
			}
		} else if v > hi {
			v = hi
		}
		return v
	}
	var a, b int64
	if st > 0 {
		a, b = clamp(start, 0, 0, int64(n)), clamp(stop, int64(n), 0, int64(n))
		for i := a; i < b; i += st {
			idx = append(idx, int(i))
		}
	} else {
		a, b = clamp(start, int64(n)-1, -1, int64(n)-1), clamp(stop, -1, -1, int64(n)-1)
		for i := a; i > b; i += st {
			idx = append(idx, int(i))
		}
	}
	return idx, nil
}

func sliceValue(obj value, start, stop, step *int64) (value, error) {
	switch o := obj.(type) {
	case *list:
		if !o.plain() {
			return nil, fmt.Errorf("'%s' object is not subscriptable", o.iter)
		}
		idx, err := sliceIndices(len(o.items), start, stop, step)
		if err != nil {
			return nil, err
		}
		out := &list{items: make([]value, 0, len(idx)), tuple: o.tuple, tag: o.tag}
		for _, i := range idx {
			out.items = append(out.items, o.items[i])
		}
		return out, nil
	case str:
		offs := runeOffsets(o.s)
		n := len(offs) - 1
		idx, err := sliceIndices(n, start, stop, step)
		if err != nil {
			return nil, err
		}
		if step == nil || *step == 1 {
			if len(idx) == 0 {
				return newStr(""), nil
			}
			return o.slice(offs[idx[0]], offs[idx[len(idx)-1]+1]), nil
		}
		var w strBuf
		for _, i := range idx {
			w.add(o.slice(offs[i], offs[i+1]))
		}
		return w.str(), nil
	case *undefined:
		return nil, errors.New(o.hint)
	}
	return nil, fmt.Errorf("'%s' object is not subscriptable", typeName(obj))
}

// runeOffsets returns the byte offset of each rune of s, and len(s) last.
func runeOffsets(s string) []int {
	offs := make([]int, 0, len(s)+1)
	for i := range s {
		offs = append(offs, i)
	}
	return append(offs, len(s))
}

func getattr(obj value, name string) (value, error) {
	switch o := obj.(type) {
	case *undefined:
		return nil, errors.New(o.hint)
	case *dict:
		if dictMethods[name] {
			return &boundMethod{obj, name}, nil
		}
		if v, ok := o.get(name); ok {
			return v, nil
		}
	case *namespace:
		if v, ok := o.d.get(name); ok {
			return v, nil
		}
	case str:
		if strMethods[name] {
			return &boundMethod{obj, name}, nil
		}
	case *list:
		if listMethods[name] {
			return &boundMethod{obj, name}, nil
		}
	case *loopObj:
		return o.attr(name)
	}
	return &undefined{hint: fmt.Sprintf("'%s object' has no attribute '%s'", typeName(obj), name)}, nil
}

func getitem(obj value, key value) (value, error) {
	switch o := obj.(type) {
	case *undefined:
		return nil, errors.New(o.hint)
	case *dict:
		if v, ok := o.lookup(key); ok {
			return v, nil
		}
	case *namespace:
		if k, ok := key.(str); ok {
			if v, ok := o.d.get(k.s); ok {
				return v, nil
			}
		}
	case *list:
		if i, ok := intOf(key); ok && o.plain() {
			if i < 0 {
				i += int64(len(o.items))
			}
			if i >= 0 && i < int64(len(o.items)) {
				return o.items[i], nil
			}
		}
	case str:
		if i, ok := intOf(key); ok {
			offs := runeOffsets(o.s)
			n := int64(len(offs) - 1)
			if i < 0 {
				i += n
			}
			if i >= 0 && i < n {
				return o.slice(offs[i], offs[i+1]), nil
			}
		}
	}
	if k, ok := key.(str); ok {
		return getattr(obj, k.s)
	}
	return &undefined{hint: fmt.Sprintf("'%s object' has no element %s", typeName(obj), repr(key))}, nil
}

func (lo *loopObj) attr(name string) (value, error) {
	n := len(lo.items)
	switch name {
	case "index":
		return int64(lo.i + 1), nil
	case "index0":
		return int64(lo.i), nil
	case "revindex":
		return int64(n - lo.i), nil
	case "revindex0":
		return int64(n - lo.i - 1), nil
	case "first":
		return lo.i == 0, nil
	case "last":
		return lo.i == n-1, nil
	case "length":
		return int64(n), nil
	case "depth":
		return int64(lo.depth), nil
	case "depth0":
		return int64(lo.depth - 1), nil
	case "previtem":
		if lo.i > 0 {
			return lo.items[lo.i-1], nil
		}
		return &undefined{hint: "there is no previous item"}, nil
	case "nextitem":
		if lo.i+1 < n {
			return lo.items[lo.i+1], nil
		}
		return &undefined{hint: "there is no next item"}, nil
	case "cycle":
		return &boundMethod{lo, name}, nil
	}
	return &undefined{hint: fmt.Sprintf("'LoopContext object' has no attribute '%s'", name)}, nil
}

func binop(op string, l, r value) (value, error) {
	if op == "~" {
		return concat(toStr(l), toStr(r)), nil
	}
	if u, ok := l.(*undefined); ok {
		return nil, errors.New(u.hint)
	}
	if u, ok := r.(*undefined); ok {
		return nil, errors.New(u.hint)
	}
	switch op {
	case "+":
		switch a := l.(type) {
		case str:
			if b, ok := r.(str); ok {
				return concat(a, b), nil
			}
		case *list:
			if b, ok := r.(*list); ok && a.tuple == b.tuple && a.plain() && b.plain() {
				items := append(append([]value{}, a.items...), b.items...)
				return &list{items: items, tuple: a.tuple}, nil
			}
		}
	case "*":
		if n, ok := intOf(r); ok {
			switch a := l.(type) {
			case str:
				var w strBuf
				for i := int64(0); i < n; i++ {
					w.add(a)
				}
				return w.str(), nil
			case *list:
				if !a.plain() {
					break
				}
				out := &list{tuple: a.tuple}
				for i := int64(0); i < n; i++ {
					out.items = append(out.items, a.items...)
				}
				return out, nil
			}
		}
		if _, ok := r.(str); ok {
			if _, ok := intOf(l); ok {
				return binop(op, r, l)
			}
		}
	}
	ia, aInt := intOf(l)
	ib, bInt := intOf(r)
	fa, aNum := num(l)
	fb, bNum := num(r)
	if !aNum || !bNum {
		return nil, fmt.Errorf("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(l), typeName(r))
	}
	both := aInt && bInt
	switch op {
	case "+":
		if both {
			return ia + ib, nil
		}
		return fa + fb, nil
	case "-":
		if both {
			return ia - ib, nil
		}
		return fa - fb, nil
	case "*":
		if both {
			return ia * ib, nil
		}
		return fa * fb, nil
	case "/":
		if fb == 0 {
			return nil, errors.New("division by zero")
		}
		return fa / fb, nil
	case "//":
		if fb == 0 {
			return nil, errors.New("integer division or modulo by zero")
		}
		if both {
			q := ia / ib
			if (ia%ib != 0) && ((ia < 0) != (ib < 0)) {
				q--
			}
			return q, nil
		}
		return math.Floor(fa / fb), nil
	case "%":
		if fb == 0 {
			return nil, errors.New("integer division or modulo by zero")
		}
		if both {
			m := ia % ib
			if m != 0 && (m < 0) != (ib < 0) {
				m += ib
			}
			return m, nil
		}
		m := math.Mod(fa, fb)
		if m != 0 && (m < 0) != (fb < 0) {
			m += fb
		}
		return m, nil
	case "**":
		if both && ib >= 0 {
			out := int64(1)
			for i := int64(0); i < ib; i++ {
				out *= ia
			}
			return out, nil
		}
		return math.Pow(fa, fb), nil
	}
	return nil, fmt.Errorf("unsupported operator %s", op)
}

func cmpop(op string, l, r value) (bool, error) {
	switch op {
	case "==":
		return equal(l, r), nil
	case "!=":
		return !equal(l, r), nil
	case "in":
		return contains(r, l)
	case "notin":
		ok, err := contains(r, l)
		return !ok, err
	}
	c, err := compare(l, r)
	if err != nil {
		return false, err
	}
	switch op {
	case "<":
		return c < 0, nil
	case ">":
		return c > 0, nil
	case "<=":
		return c <= 0, nil
	}
	return c >= 0, nil
}

// contains is Python's "x in container".
func contains(container, x value) (bool, error) {
	switch c := container.(type) {
	case str:
		s, ok := x.(str)
		if !ok {
			return false, fmt.Errorf("'in <string>' requires string as left operand, not %s", typeName(x))
		}
		return strings.Contains(c.s, s.s), nil
	case *dict:
		_, found := c.lookup(x)
		return found, nil
	case *namespace:
		return contains(c.d, x)
	}
	items, err := iterate(container)
	if err != nil {
		return false, fmt.Errorf("argument of type '%s' is not iterable", typeName(container))
	}
	for _, it := range items {
		if equal(it, x) {
			return true, nil
		}
	}
	return false, nil
}

func (r *renderer) evalCall(e *callExpr, sc *scope) (value, error) {
	fn, err := r.eval(e.fn, sc)
	if err != nil {
		return nil, err
	}
	args, err := r.evalList(e.args, sc)
	if err != nil {
		return nil, err
	}
	kw, err := r.evalKwargs(e.kwargs, sc)
	if err != nil {
		return nil, err
	}
	switch f := fn.(type) {
	case builtin:
		v, err := f(r, e.p, args, kw)
		return v, at(e.p, err)
	case *boundMethod:
		v, err := callMethod(f.recv, f.name, args, kw)
		return v, at(e.p, err)
	case *macro:
		return r.callMacro(f, args, kw, e.p)
	case *undefined:
		return nil, rerr(e.p, "%s", f.hint)
	}
	return nil, rerr(e.p, "'%s' object is not callable", typeName(fn))
}

func (r *renderer) callMacro(m *macro, args []value, kw map[string]value, p pos) (value, error) {
	if len(args) > len(m.n.params) {
		return nil, rerr(p, "macro '%s' takes not more than %d argument(s)", m.n.name, len(m.n.params))
	}
	if r.depth >= maxDepth {
		return nil, rerr(p, "macro recursion too deep")
	}
	inner := newScope(m.defs)
	for i, name := range m.n.params {
		var v value
		switch {
		case i < len(args):
			v = args[i]
		case hasKey(kw, name):
			v = kw[name]
			delete(kw, name)
		case m.n.defaults[i] != nil:
			var err error
			if v, err = r.eval(m.n.defaults[i], inner); err != nil {
				return nil, err
			}
		default:
			v = &undefined{hint: fmt.Sprintf("parameter '%s' was not provided", name)}
		}
		inner.set(name, v)
	}
	for k := range kw {
		return nil, rerr(p, "macro '%s' has no argument '%s'", m.n.name, k)
	}
	var w strBuf
	r.depth++
	err := r.exec(m.n.body, inner, &w)
	r.depth--
	if err != nil {
		return nil, err
	}
	return w.str(), nil
}

func hasKey(m map[string]value, k string) bool {
	_, ok := m[k]
	return ok
}
