package chat

import (
	"slices"
	"strconv"
)

// The parser follows jinja2's grammar and operator precedence. Every statement, filter,
// test, global and method a template names is checked here, so an unsupported one is a
// load-time error with its position.

type node interface{}

// Statements.
type (
	body     []node
	textNode struct{ s string }
	outNode  struct {
		e expr
		p pos
	}
	ifNode struct {
		conds  []expr
		bodies []body
		els    body
	}
	forNode struct {
		p       pos
		targets []string
		iter    expr
		cond    expr
		body    body
		els     body
	}
	setNode struct {
		p       pos
		targets []string // one name, or several to unpack
		attr    string   // set ns.attr = ...
		value   expr
		block   body // {% set x %}...{% endset %}
		filters []*filterExpr
	}
	macroNode struct {
		name     string
		params   []string
		defaults []expr // aligned with params; nil where none
		body     body
	}
	genNode  struct{ body body }
	loopCtl  struct{ brk bool }
	withNode struct {
		names  []string
		values []expr
		body   body
	}
	filterBlock struct {
		filters []*filterExpr
		body    body
	}
)

// Expressions.
type (
	expr      interface{}
	constExpr struct{ v value }
	nameExpr  struct {
		name string
		p    pos
	}
	attrExpr struct {
		obj  expr
		name string
		p    pos
	}
	itemExpr struct {
		obj, key expr
		p        pos
	}
	sliceExpr struct {
		obj               expr
		start, stop, step expr
		p                 pos
	}
	callExpr struct {
		fn     expr
		args   []expr
		kwargs []kwarg
		p      pos
	}
	kwarg struct {
		name string
		v    expr
	}
	filterExpr struct {
		arg    expr // nil inside a filter block or set block
		name   string
		args   []expr
		kwargs []kwarg
		p      pos
	}
	testExpr struct {
		arg  expr
		name string
		args []expr
		neg  bool
		p    pos
	}
	binExpr struct {
		op   string
		l, r expr
		p    pos
	}
	unExpr struct {
		op string
		x  expr
		p  pos
	}
	cmpExpr struct {
		first expr
		ops   []string
		rest  []expr
		p     pos
	}
	condExpr struct{ cond, yes, no expr }
	listExpr struct {
		items []expr
		tuple bool
	}
	dictExpr struct{ keys, vals []expr }
)

type parser struct {
	toks       []token
	i          int
	generation bool
}

func parseTemplate(src string) (*body, bool, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, false, err
	}
	p := &parser{toks: toks}
	b, end, err := p.parseBody(nil)
	if err != nil {
		return nil, false, err
	}
	if end != "" {
		return nil, false, errAt(p.cur().pos, "unexpected '%s'", end)
	}
	return &b, p.generation, nil
}

func (p *parser) cur() token  { return p.toks[p.i] }
func (p *parser) peek() token { return p.toks[min(p.i+1, len(p.toks)-1)] }
func (p *parser) next() token {
	t := p.toks[p.i]
	if p.i < len(p.toks)-1 {
		p.i++
	}
	return t
}

func (p *parser) isOp(v string) bool   { t := p.cur(); return t.kind == tOp && t.val == v }
func (p *parser) isName(v string) bool { t := p.cur(); return t.kind == tName && t.val == v }

func (p *parser) expectOp(v string) error {
	if !p.isOp(v) {
		return errAt(p.cur().pos, "expected '%s', found %s", v, p.cur())
	}
	p.next()
	return nil
}

func (p *parser) expectName() (token, error) {
	t := p.cur()
	if t.kind != tName {
		return t, errAt(t.pos, "expected a name, found %s", t)
	}
	p.next()
	return t, nil
}

func (p *parser) expectBlockEnd() error {
	if p.cur().kind != tBlockEnd {
		return errAt(p.cur().pos, "expected '%%}', found %s", p.cur())
	}
	p.next()
	return nil
}

// parseBody parses statements until one of the end tags in ends (e.g. "endif", "elif",
// "else"), which it leaves after consuming its name; it returns that name.
func (p *parser) parseBody(ends []string) (body, string, error) {
	var b body
	for {
		t := p.cur()
		switch t.kind {
		case tEOF:
			if len(ends) > 0 {
				return nil, "", errAt(t.pos, "unexpected end of template: expected '%s'", ends[len(ends)-1])
			}
			return b, "", nil
		case tText:
			p.next()
			b = append(b, &textNode{t.val})
		case tVarBegin:
			p.next()
			e, err := p.parseTuple()
			if err != nil {
				return nil, "", err
			}
			if p.cur().kind != tVarEnd {
				return nil, "", errAt(p.cur().pos, "expected '}}', found %s", p.cur())
			}
			p.next()
			b = append(b, &outNode{e: e, p: t.pos})
		case tBlockBegin:
			p.next()
			kw := p.cur()
			if kw.kind != tName {
				return nil, "", errAt(kw.pos, "expected a statement name, found %s", kw)
			}
			for _, e := range ends {
				if kw.val == e {
					p.next()
					return b, e, nil
				}
			}
			n, err := p.parseStatement()
			if err != nil {
				return nil, "", err
			}
			b = append(b, n)
		default:
			return nil, "", errAt(t.pos, "unexpected %s", t)
		}
	}
}

func (p *parser) parseStatement() (node, error) {
	kw := p.next()
	switch kw.val {
	case "if":
		return p.parseIf()
	case "for":
		return p.parseFor(kw.pos)
	case "set":
		return p.parseSet(kw.pos)
	case "macro":
		return p.parseMacro()
	case "generation":
		p.generation = true
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		b, _, err := p.parseBody([]string{"endgeneration"})
		if err != nil {
			return nil, err
		}
		return &genNode{b}, p.expectBlockEnd()
	case "break", "continue":
		return &loopCtl{brk: kw.val == "break"}, p.expectBlockEnd()
	case "with":
		return p.parseWith()
	case "filter":
		fs, err := p.parseFilterChain(nil)
		if err != nil {
			return nil, err
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		b, _, err := p.parseBody([]string{"endfilter"})
		if err != nil {
			return nil, err
		}
		return &filterBlock{fs, b}, p.expectBlockEnd()
	}
	return nil, errAt(kw.pos, "unsupported statement '{%% %s %%}'", kw.val)
}

func (p *parser) parseIf() (node, error) {
	n := &ifNode{}
	for {
		c, err := p.parseTuple()
		if err != nil {
			return nil, err
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		b, end, err := p.parseBody([]string{"elif", "else", "endif"})
		if err != nil {
			return nil, err
		}
		n.conds, n.bodies = append(n.conds, c), append(n.bodies, b)
		switch end {
		case "elif":
			continue
		case "else":
			if err := p.expectBlockEnd(); err != nil {
				return nil, err
			}
			n.els, _, err = p.parseBody([]string{"endif"})
			if err != nil {
				return nil, err
			}
		}
		return n, p.expectBlockEnd()
	}
}

func (p *parser) parseFor(at pos) (node, error) {
	n := &forNode{p: at}
	for {
		t, err := p.expectName()
		if err != nil {
			return nil, err
		}
		n.targets = append(n.targets, t.val)
		if !p.isOp(",") {
			break
		}
		p.next()
	}
	if !p.isName("in") {
		return nil, errAt(p.cur().pos, "expected 'in', found %s", p.cur())
	}
	p.next()
	var err error
	if n.iter, err = p.parseTupleNoCond(); err != nil {
		return nil, err
	}
	if p.isName("if") {
		p.next()
		if n.cond, err = p.parseTuple(); err != nil {
			return nil, err
		}
	}
	if p.isName("recursive") {
		return nil, errAt(p.cur().pos, "unsupported: recursive for loops")
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	b, end, err := p.parseBody([]string{"else", "endfor"})
	if err != nil {
		return nil, err
	}
	n.body = b
	if end == "else" {
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		if n.els, _, err = p.parseBody([]string{"endfor"}); err != nil {
			return nil, err
		}
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseSet(at pos) (node, error) {
	n := &setNode{p: at}
	t, err := p.expectName()
	if err != nil {
		return nil, err
	}
	n.targets = []string{t.val}
	if p.isOp(".") {
		p.next()
		a, err := p.expectName()
		if err != nil {
			return nil, err
		}
		n.attr = a.val
	} else {
		for p.isOp(",") {
			p.next()
			t, err := p.expectName()
			if err != nil {
				return nil, err
			}
			n.targets = append(n.targets, t.val)
		}
	}
	if p.isOp("=") {
		p.next()
		if n.value, err = p.parseTuple(); err != nil {
			return nil, err
		}
		return n, p.expectBlockEnd()
	}
	if n.attr != "" || len(n.targets) > 1 {
		return nil, errAt(p.cur().pos, "expected '=', found %s", p.cur())
	}
	if p.isOp("|") {
		if n.filters, err = p.parseFilterChain(nil); err != nil {
			return nil, err
		}
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	if n.block, _, err = p.parseBody([]string{"endset"}); err != nil {
		return nil, err
	}
	if n.block == nil {
		n.block = body{}
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseMacro() (node, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	n := &macroNode{name: name.val}
	if err := p.expectOp("("); err != nil {
		return nil, err
	}
	for !p.isOp(")") {
		if len(n.params) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		a, err := p.expectName()
		if err != nil {
			return nil, err
		}
		var d expr
		if p.isOp("=") {
			p.next()
			if d, err = p.parseExpr(); err != nil {
				return nil, err
			}
		}
		n.params, n.defaults = append(n.params, a.val), append(n.defaults, d)
	}
	p.next()
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	if n.body, _, err = p.parseBody([]string{"endmacro"}); err != nil {
		return nil, err
	}
	if p.cur().kind == tName {
		p.next() // {% endmacro name %}
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseWith() (node, error) {
	n := &withNode{}
	for p.cur().kind != tBlockEnd {
		if len(n.names) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		t, err := p.expectName()
		if err != nil {
			return nil, err
		}
		if err := p.expectOp("="); err != nil {
			return nil, err
		}
		v, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		n.names, n.values = append(n.names, t.val), append(n.values, v)
	}
	p.next()
	b, _, err := p.parseBody([]string{"endwith"})
	if err != nil {
		return nil, err
	}
	n.body = b
	return n, p.expectBlockEnd()
}

// parseTuple parses an expression, or a tuple of them separated by commas.
func (p *parser) parseTuple() (expr, error) { return p.tuple(true) }

func (p *parser) parseTupleNoCond() (expr, error) { return p.tuple(false) }

func (p *parser) tuple(withCond bool) (expr, error) {
	parse := p.parseExpr
	if !withCond {
		parse = p.parseOr
	}
	first, err := parse()
	if err != nil {
		return nil, err
	}
	if !p.isOp(",") {
		return first, nil
	}
	items := []expr{first}
	for p.isOp(",") {
		p.next()
		if p.cur().kind == tBlockEnd || p.cur().kind == tVarEnd || p.isOp(")") || p.isName("in") || p.isName("if") {
			break
		}
		e, err := parse()
		if err != nil {
			return nil, err
		}
		items = append(items, e)
	}
	return &listExpr{items: items, tuple: true}, nil
}

func (p *parser) parseExpr() (expr, error) {
	e, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.isName("if") {
		p.next()
		c, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		var no expr
		if p.isName("else") {
			p.next()
			if no, err = p.parseExpr(); err != nil {
				return nil, err
			}
		}
		e = &condExpr{cond: c, yes: e, no: no}
	}
	return e, nil
}

func (p *parser) parseOr() (expr, error)  { return p.binLevel(p.parseAnd, "or") }
func (p *parser) parseAnd() (expr, error) { return p.binLevel(p.parseNot, "and") }

func (p *parser) parseNot() (expr, error) {
	if p.isName("not") {
		t := p.next()
		x, err := p.parseNot()
		return &unExpr{op: "not", x: x, p: t.pos}, err
	}
	return p.parseCompare()
}

var cmpOps = map[string]bool{"==": true, "!=": true, "<": true, ">": true, "<=": true, ">=": true}

func (p *parser) parseCompare() (expr, error) {
	at := p.cur().pos
	first, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	c := &cmpExpr{first: first, p: at}
	for {
		t := p.cur()
		op := ""
		switch {
		case t.kind == tOp && cmpOps[t.val]:
			op = t.val
			p.next()
		case p.isName("in"):
			op = "in"
			p.next()
		case p.isName("not") && p.peek().kind == tName && p.peek().val == "in":
			op = "notin"
			p.next()
			p.next()
		}
		if op == "" {
			break
		}
		r, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		c.ops, c.rest = append(c.ops, op), append(c.rest, r)
	}
	if len(c.ops) == 0 {
		return first, nil
	}
	return c, nil
}

// binLevel parses a left-associative level of binary operators ops (symbols, or the
// keywords or and and) between operands that next parses.
func (p *parser) binLevel(next func() (expr, error), ops ...string) (expr, error) {
	l, err := next()
	for err == nil {
		t := p.cur()
		if !slices.ContainsFunc(ops, func(o string) bool { return p.isOp(o) || p.isName(o) }) {
			break
		}
		p.next()
		var r expr
		if r, err = next(); err == nil {
			l = &binExpr{op: t.val, l: l, r: r, p: t.pos}
		}
	}
	return l, err
}

func (p *parser) parseMath1() (expr, error)  { return p.binLevel(p.parseConcat, "+", "-") }
func (p *parser) parseConcat() (expr, error) { return p.binLevel(p.parseMath2, "~") }
func (p *parser) parseMath2() (expr, error) {
	return p.binLevel(p.parsePow, "*", "/", "//", "%")
}
func (p *parser) parsePow() (expr, error) {
	return p.binLevel(func() (expr, error) { return p.parseUnary(true) }, "**")
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	var e expr
	var err error
	if p.isOp("-") || p.isOp("+") {
		t := p.next()
		x, err := p.parseUnary(false)
		if err != nil {
			return nil, err
		}
		e = &unExpr{op: t.val, x: x, p: t.pos}
	} else {
		if e, err = p.parsePrimary(); err != nil {
			return nil, err
		}
	}
	if e, err = p.parsePostfix(e); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(e)
	}
	return e, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.cur()
	switch t.kind {
	case tName:
		p.next()
		switch t.val {
		case "true", "True":
			return &constExpr{true}, nil
		case "false", "False":
			return &constExpr{false}, nil
		case "none", "None":
			return &constExpr{nil}, nil
		}
		return &nameExpr{name: t.val, p: t.pos}, nil
	case tString:
		p.next()
		s := t.val
		for p.cur().kind == tString {
			s += p.next().val
		}
		return &constExpr{newStr(s)}, nil
	case tInt:
		p.next()
		v, err := strconv.ParseInt(t.val, 10, 64)
		if err != nil {
			return nil, errAt(t.pos, "integer literal %s out of range", t.val)
		}
		return &constExpr{v}, nil
	case tFloat:
		p.next()
		v, err := strconv.ParseFloat(t.val, 64)
		if err != nil {
			return nil, errAt(t.pos, "bad number %s", t.val)
		}
		return &constExpr{v}, nil
	case tOp:
		switch t.val {
		case "(":
			p.next()
			if p.isOp(")") {
				p.next()
				return &listExpr{tuple: true}, nil
			}
			e, err := p.parseTuple()
			if err != nil {
				return nil, err
			}
			return e, p.expectOp(")")
		case "[":
			p.next()
			l := &listExpr{}
			if err := p.parseSeq("]", func() error {
				e, err := p.parseExpr()
				l.items = append(l.items, e)
				return err
			}); err != nil {
				return nil, err
			}
			return l, nil
		case "{":
			p.next()
			d := &dictExpr{}
			if err := p.parseSeq("}", func() error {
				k, err := p.parseExpr()
				if err != nil {
					return err
				}
				if err := p.expectOp(":"); err != nil {
					return err
				}
				v, err := p.parseExpr()
				d.keys, d.vals = append(d.keys, k), append(d.vals, v)
				return err
			}); err != nil {
				return nil, err
			}
			return d, nil
		}
	}
	return nil, errAt(t.pos, "unexpected %s", t)
}

func (p *parser) parsePostfix(e expr) (expr, error) {
	for {
		t := p.cur()
		switch {
		case p.isOp("."):
			p.next()
			n := p.next()
			switch n.kind {
			case tName:
				e = &attrExpr{obj: e, name: n.val, p: n.pos}
			case tInt:
				v, _ := strconv.ParseInt(n.val, 10, 64)
				e = &itemExpr{obj: e, key: &constExpr{v}, p: n.pos}
			default:
				return nil, errAt(n.pos, "expected an attribute name, found %s", n)
			}
		case p.isOp("["):
			p.next()
			var err error
			if e, err = p.parseSubscript(e, t.pos); err != nil {
				return nil, err
			}
		case p.isOp("("):
			var err error
			if e, err = p.parseCall(e); err != nil {
				return nil, err
			}
		default:
			return e, nil
		}
	}
}

func (p *parser) parseSubscript(obj expr, at pos) (expr, error) {
	var parts [3]expr
	n, isSlice := 0, false
	for {
		if p.isOp(":") {
			isSlice = true
			p.next()
			n++
			if n > 2 {
				return nil, errAt(p.cur().pos, "bad slice")
			}
			continue
		}
		if p.isOp("]") {
			p.next()
			break
		}
		if parts[n] != nil {
			return nil, errAt(p.cur().pos, "expected ']', found %s", p.cur())
		}
		e, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		parts[n] = e
	}
	if !isSlice {
		if parts[0] == nil {
			return nil, errAt(at, "empty subscript")
		}
		return &itemExpr{obj: obj, key: parts[0], p: at}, nil
	}
	return &sliceExpr{obj: obj, start: parts[0], stop: parts[1], step: parts[2], p: at}, nil
}

func (p *parser) parseArgs() ([]expr, []kwarg, error) {
	if err := p.expectOp("("); err != nil {
		return nil, nil, err
	}
	var args []expr
	var kwargs []kwarg
	err := p.parseSeq(")", func() error {
		if p.isOp("*") || p.isOp("**") {
			return errAt(p.cur().pos, "unsupported: *args and **kwargs in calls")
		}
		if p.cur().kind == tName && p.peek().kind == tOp && p.peek().val == "=" {
			name := p.next().val
			p.next()
			v, err := p.parseExpr()
			kwargs = append(kwargs, kwarg{name, v})
			return err
		}
		if len(kwargs) > 0 {
			return errAt(p.cur().pos, "positional argument after keyword argument")
		}
		v, err := p.parseExpr()
		args = append(args, v)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return args, kwargs, nil
}

// parseSeq parses items up to the operator end, which it consumes: comma-separated,
// with a trailing comma allowed, as Python's lists, dicts and calls are.
func (p *parser) parseSeq(end string, item func() error) error {
	for n := 0; !p.isOp(end); n++ {
		if n > 0 {
			if err := p.expectOp(","); err != nil {
				return err
			}
			if p.isOp(end) {
				break
			}
		}
		if err := item(); err != nil {
			return err
		}
	}
	p.next()
	return nil
}

func (p *parser) parseCall(fn expr) (expr, error) {
	at := p.cur().pos
	args, kwargs, err := p.parseArgs()
	if err != nil {
		return nil, err
	}
	if a, ok := fn.(*attrExpr); ok && !knownMethods[a.name] {
		return nil, errAt(a.p, "unsupported method '.%s()'", a.name)
	}
	return &callExpr{fn: fn, args: args, kwargs: kwargs, p: at}, nil
}

func (p *parser) parseFilterExpr(e expr) (expr, error) {
	for {
		switch {
		case p.isOp("|"):
			fs, err := p.parseFilterChain(e)
			if err != nil {
				return nil, err
			}
			e = fs[len(fs)-1]
		case p.isName("is"):
			t := p.next()
			neg := false
			if p.isName("not") {
				p.next()
				neg = true
			}
			name, err := p.expectName()
			if err != nil {
				return nil, err
			}
			if !knownTests[name.val] {
				return nil, errAt(name.pos, "unsupported test 'is %s'", name.val)
			}
			te := &testExpr{arg: e, name: name.val, neg: neg, p: t.pos}
			c := p.cur()
			switch {
			case p.isOp("("):
				args, kwargs, err := p.parseArgs()
				if err != nil {
					return nil, err
				}
				if len(kwargs) > 0 {
					return nil, errAt(c.pos, "unsupported: keyword arguments to a test")
				}
				te.args = args
			case (c.kind == tName || c.kind == tString || c.kind == tInt || c.kind == tFloat || p.isOp("[") || p.isOp("{")) &&
				!p.isName("else") && !p.isName("or") && !p.isName("and"):
				if p.isName("is") {
					return nil, errAt(c.pos, "cannot chain tests with 'is'")
				}
				a, err := p.parsePrimary()
				if err != nil {
					return nil, err
				}
				if a, err = p.parsePostfix(a); err != nil {
					return nil, err
				}
				te.args = []expr{a}
			}
			e = te
		case p.isOp("("):
			var err error
			if e, err = p.parseCall(e); err != nil {
				return nil, err
			}
		default:
			return e, nil
		}
	}
}

// parseFilterChain parses "| f(args) | g ..." applied to arg (nil for a filter block).
func (p *parser) parseFilterChain(arg expr) ([]*filterExpr, error) {
	var fs []*filterExpr
	first := true
	for p.isOp("|") || (first && arg == nil) {
		if p.isOp("|") {
			p.next()
		}
		first = false
		name, err := p.expectName()
		if err != nil {
			return nil, err
		}
		if !knownFilters[name.val] {
			return nil, errAt(name.pos, "unsupported filter '%s'", name.val)
		}
		f := &filterExpr{arg: arg, name: name.val, p: name.pos}
		if p.isOp("(") {
			if f.args, f.kwargs, err = p.parseArgs(); err != nil {
				return nil, err
			}
		}
		fs = append(fs, f)
		if arg != nil {
			arg = f
		}
	}
	return fs, nil
}
