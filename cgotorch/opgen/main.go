// Command opgen writes gotrain's op bindings from one table, cgotorch/ops.tab: the C
// prototypes, the C++ bodies (each inside the exception guard), the cgo wrappers and
// package torch's methods. It runs from `go generate ./cgotorch`; opgen's test fails when
// the committed files differ from what the table generates.
//
//	go run ./cgotorch/opgen [-table cgotorch/ops.tab] [-cgotorch cgotorch] [-torch torch]
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"strings"
	"unicode"
)

// A param is one argument of an op: its name (as written in the C++ expression and the
// Go signature) and its kind.
type param struct {
	name     string
	kind     string // tensor, tensor?, tensors, int64, int64s, double, scalar, bool, dtype, device
	variadic bool   // int64s... : a variadic Go parameter
}

// An op is one row of the table.
type op struct {
	goName string
	name   string // PyTorch's name, for error messages
	self   bool   // first param is the receiver
	params []param
	result string // tensor, tensor2, tensors, void
	expr   string
	doc    string
	line   int
}

// A form is how a parameter kind is written in each generated file: a format whose %[1]s
// is the parameter's name (and, in cxx, %[2]s the function that reads a tensor
// argument); a field of several lines or comma-separated parts gives them all.
type form struct {
	c    string // the C parameters
	cxx  string // the C++ local the expression names; "": the C parameter itself
	rec  string // the trace entry's arguments (cg::Rec)
	read string // replay: the C parameters read back from the entry (cg::Reader)
	goP  string // the cgotorch wrapper's Go parameter
	cArg string // ... and the C arguments it passes
	tP   string // package torch's parameter
	tArg string // ... and what it passes to the wrapper
}

var forms = map[string]form{
	"tensor": {c: "cg_tensor %[1]s_", cxx: "at::Tensor &%[1]s = %[2]s(%[1]s_);",
		rec: "rec_.t(%[1]s_);", read: "cg_tensor %[1]s_ = rd_.t();",
		goP: "%[1]s Tensor", cArg: "C.cg_tensor(%[1]s)", tP: "%[1]s *Tensor", tArg: "%[1]s.handle()"},
	"tensor?": {c: "cg_tensor %[1]s_", cxx: "std::optional<at::Tensor> %[1]s = cg::opt(%[1]s_);",
		rec: "rec_.t(%[1]s_);", read: "cg_tensor %[1]s_ = rd_.t();",
		goP: "%[1]s Tensor", cArg: "C.cg_tensor(%[1]s)", tP: "%[1]s *Tensor", tArg: "opt(%[1]s)"},
	"tensors": {c: "const cg_tensor *%[1]s_, int %[1]s_n", cxx: "std::vector<at::Tensor> %[1]s = cg::tensors(%[1]s_, %[1]s_n);",
		rec: "rec_.list(%[1]s_, %[1]s_n);", read: "int %[1]s_n;\nconst cg_tensor *%[1]s_ = rd_.tensors(&%[1]s_n);",
		goP: "%[1]s []Tensor", cArg: "handles(%[1]s), C.int(len(%[1]s))", tP: "%[1]s []*Tensor", tArg: "handles(%[1]s)"},
	"int64": {c: "int64_t %[1]s",
		rec: "rec_.v(%[1]s);", read: "int64_t %[1]s = rd_.i();",
		goP: "%[1]s int64", cArg: "C.int64_t(%[1]s)", tP: "%[1]s int64", tArg: "%[1]s"},
	"int64s": {c: "const int64_t *%[1]s_, int %[1]s_n", cxx: "at::IntArrayRef %[1]s(%[1]s_, %[1]s_n);",
		rec: "rec_.list(%[1]s_, %[1]s_n);", read: "int %[1]s_n;\nconst int64_t *%[1]s_ = rd_.ints(&%[1]s_n);",
		goP: "%[1]s []int64", cArg: "i64p(%[1]s), C.int(len(%[1]s))", tP: "%[1]s []int64", tArg: "%[1]s"},
	"double": {c: "double %[1]s",
		rec: "rec_.v(%[1]s);", read: "double %[1]s = rd_.d();",
		goP: "%[1]s float64", cArg: "C.double(%[1]s)", tP: "%[1]s float64", tArg: "%[1]s"},
	"scalar": {c: "double %[1]s_", cxx: "at::Scalar %[1]s = cg::scalar(%[1]s_);",
		rec: "rec_.v(%[1]s_);", read: "double %[1]s_ = rd_.d();",
		goP: "%[1]s float64", cArg: "C.double(%[1]s)", tP: "%[1]s float64", tArg: "%[1]s"},
	"bool": {c: "int %[1]s_", cxx: "bool %[1]s = %[1]s_ != 0;",
		rec: "rec_.v(%[1]s_);", read: "int %[1]s_ = static_cast<int>(rd_.i());",
		goP: "%[1]s bool", cArg: "cbool(%[1]s)", tP: "%[1]s bool", tArg: "%[1]s"},
	"dtype": {c: "int %[1]s_", cxx: "at::ScalarType %[1]s = static_cast<at::ScalarType>(%[1]s_);",
		rec: "rec_.v(%[1]s_);", read: "int %[1]s_ = static_cast<int>(rd_.i());",
		goP: "%[1]s int", cArg: "C.int(%[1]s)", tP: "%[1]s DType", tArg: "int(%[1]s)"},
	"device": {c: "int %[1]s_type, int %[1]s_index", cxx: "at::Device %[1]s = cg::device(%[1]s_type, %[1]s_index);",
		rec:  "rec_.v(%[1]s_type);\nrec_.v(%[1]s_index);",
		read: "int %[1]s_type = static_cast<int>(rd_.i());\nint %[1]s_index = static_cast<int>(rd_.i());",
		goP:  "%[1]sType, %[1]sIndex int", cArg: "C.int(%[1]sType), C.int(%[1]sIndex)",
		tP: "%[1]s Device", tArg: "int(%[1]s.Type), %[1]s.Index"},
}

// each formats one field of the form of each of the op's C parameters (the receiver
// first, as a tensor named self), a line per line of the field; arg is cxx's %[2]s.
func (o op) each(field func(form) string, arg string) []string {
	ps := o.params
	if o.self {
		ps = append([]param{{name: "self", kind: "tensor"}}, ps...)
	}
	var out []string
	for _, p := range ps {
		if f := field(forms[p.kind]); f != "" {
			out = append(out, strings.Split(fmt.Sprintf(f, p.name, arg), "\n")...)
		}
	}
	return out
}

// A result is how a result kind is written: the C result type, its CG_CATCH_INTO
// wrapper, the cgotorch wrapper's Go result and conversion, and package torch's result
// and body (%[1]q the op's name, %[2]s the wrapper's call).
type result struct{ c, catch, goSig, conv, tRet, tBody string }

var results = map[string]result{
	"tensor":  {"cg_result", "res", "Result", "rt", " *Tensor", "return adopt(%[1]q, %[2]s)"},
	"tensor2": {"cg_result2", "res2", "Result2", "rt2", " (values, indices *Tensor)", "return adopt2(%[1]q, %[2]s)"},
	"tensors": {"cg_results", "resn", "Results", "rtn", " []*Tensor", "return adoptN(%[1]q, %[2]s)"},
	"int64":   {"cg_status", "status", "(int64, error)", "", " int64", "n, err := %[2]s\n\tcheck(%[1]q, err)\n\treturn n"},
	"void":    {"cg_status", "status", "error", "st", "", "check(%[1]q, %[2]s)"},
}

// parse reads the table; errors name the line.
func parse(src []byte, file string) ([]op, error) {
	var ops []op
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, " | ")
		if len(f) != 6 {
			return nil, fmt.Errorf("%s:%d: want 6 fields separated by \" | \", got %d", file, n, len(f))
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		o := op{goName: f[0], name: f[1], result: f[3], expr: f[4], doc: f[5], line: n}
		if prev, ok := seen[o.goName]; ok {
			return nil, fmt.Errorf("%s:%d: %s is already declared on line %d", file, n, o.goName, prev)
		}
		seen[o.goName] = n
		if _, ok := results[o.result]; !ok {
			return nil, fmt.Errorf("%s:%d: unknown result %q", file, n, o.result)
		}
		if f[2] != "" {
			for i, p := range strings.Split(f[2], ",") {
				p = strings.TrimSpace(p)
				if i == 0 && p == "self" {
					o.self = true
					continue
				}
				nk := strings.Fields(p)
				if len(nk) != 2 {
					return nil, fmt.Errorf("%s:%d: param %q: want \"name kind\"", file, n, p)
				}
				pr := param{name: nk[0], kind: nk[1]}
				if strings.HasSuffix(pr.kind, "...") {
					pr.kind, pr.variadic = strings.TrimSuffix(pr.kind, "..."), true
				}
				if _, ok := forms[pr.kind]; !ok {
					return nil, fmt.Errorf("%s:%d: param %s: unknown kind %q", file, n, pr.name, pr.kind)
				}
				o.params = append(o.params, pr)
			}
		}
		for i, p := range o.params {
			if p.variadic && (i != len(o.params)-1 || p.kind != "int64s") {
				return nil, fmt.Errorf("%s:%d: only a last int64s param can be variadic", file, n)
			}
		}
		ops = append(ops, o)
	}
	return ops, sc.Err()
}

// cParams are the C parameters of an op.
func (o op) cParams() []string {
	out := o.each(func(f form) string { return f.c }, "")
	if o.result == "int64" {
		out = append(out, "int64_t *out")
	}
	// The result comes back through a pointer, not as the return value: cgo's wrapper of
	// a function that returns a value re-reads the goroutine's stack top twice around
	// the call (in case a callback moved the stack), which a void function skips.
	return append(out, o.cResult()+" *ret_")
}

func (o op) cName() string { return "cg_op_" + o.goName }

func (o op) cResult() string { return results[o.result].c }

func (o op) prototype() string {
	return fmt.Sprintf("void %s(%s)", o.cName(), strings.Join(o.cParams(), ", "))
}

// views are the ops that make a view without reading or writing the elements: they
// take a tensor whose memory sharded training freed (sharding code narrows and detaches
// a parameter before refilling it), where every other op refuses one (cg::A).
var views = map[string]bool{
	"detach": true, "view": true, "permute": true, "expand": true, "transpose": true, "t": true, "squeeze": true,
	"unsqueeze": true, "narrow": true, "slice": true, "select": true, "split": true, "chunk": true,
}

// cxxLocals turns the C parameters into the C++ values the expression names.
func (o op) cxxLocals() []string {
	arg := "cg::A" // an argument, checked for freed memory
	if views[o.name] {
		arg = "cg::T"
	}
	return o.each(func(f form) string { return f.cxx }, arg)
}

// cxxBody is the op's C function: the locals, the expression, and, while the calling
// thread records a trace (replay.cc), the call's entry in it.
func (o op) cxxBody(num int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s {\n  CG_TRY\n", o.prototype())
	for _, l := range o.cxxLocals() {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	switch o.result {
	case "tensor":
		fmt.Fprintf(&b, "  *ret_ = cg::res(%s);\n", o.expr)
	case "tensor2":
		fmt.Fprintf(&b, "  auto r = %s;\n  *ret_ = cg::res2(std::get<0>(r), std::get<1>(r));\n", o.expr)
	case "tensors":
		fmt.Fprintf(&b, "  *ret_ = cg::resn(%s);\n", o.expr)
	case "int64":
		fmt.Fprintf(&b, "  *out = %s;\n  *ret_ = cg::ok();\n", o.expr)
	default:
		fmt.Fprintf(&b, "  %s;\n  *ret_ = cg::ok();\n", o.expr)
	}
	if o.result == "int64" {
		fmt.Fprintf(&b, "  if (cg::recording()) cg::refuse(\"%s reads a value on the host\");\n", o.name)
	} else {
		fmt.Fprintf(&b, "  if (cg::recording()) {\n    cg::Rec rec_(%d);\n", num)
		for _, l := range o.recArgs() {
			fmt.Fprintf(&b, "    %s\n", l)
		}
		b.WriteString("  }\n")
	}
	fmt.Fprintf(&b, "  CG_CATCH_INTO(%s)\n}\n", results[o.result].catch)
	return b.String()
}

// recArgs append the call's arguments and results to its trace entry (cg::Rec), in the
// order replayCase reads them back.
func (o op) recArgs() []string {
	out := o.each(func(f form) string { return f.rec }, "")
	switch o.result {
	case "tensor":
		out = append(out, "rec_.out(ret_->t);")
	case "tensor2":
		out = append(out, "rec_.out(ret_->t0);", "rec_.out(ret_->t1);")
	case "tensors":
		out = append(out, "rec_.outs(ret_->ts, ret_->n);")
	}
	return out
}

// replayCase is the op's case in cg::replay_op: the C parameters read back from the
// entry (cg::Reader), the same locals and expression as the C function, and the results
// stored in their slots.
func (o op) replayCase(num int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "    case %d: {  // %s\n", num, o.goName)
	for _, l := range append(o.each(func(f form) string { return f.read }, ""), o.cxxLocals()...) {
		fmt.Fprintf(&b, "      %s\n", l)
	}
	switch o.result {
	case "tensor":
		fmt.Fprintf(&b, "      rd_.out(%s);\n", o.expr)
	case "tensor2":
		fmt.Fprintf(&b, "      auto r = %s;\n      rd_.out(std::get<0>(r));\n      rd_.out(std::get<1>(r));\n", o.expr)
	case "tensors":
		fmt.Fprintf(&b, "      rd_.outs(%s);\n", o.expr)
	default:
		fmt.Fprintf(&b, "      %s;\n", o.expr)
	}
	b.WriteString("      return;\n    }\n")
	return b.String()
}

// goParams are the cgotorch wrapper's Go parameters; cArgs the matching C arguments.
func (o op) goParams() (params, cargs []string) {
	return o.each(func(f form) string { return f.goP }, ""), o.each(func(f form) string { return f.cArg }, "")
}

func (o op) cgoWrapper() string {
	params, cargs := o.goParams()
	sig, conv := results[o.result].goSig, results[o.result].conv
	ret := "C." + o.cResult()
	if o.result == "int64" {
		return fmt.Sprintf("// Op%s is %s (ops.tab line %d).\nfunc Op%s(%s) %s {\n\tvar out C.int64_t\n\tvar r %s\n\tC.%s(%s)\n\treturn int64(out), st(r)\n}\n",
			o.goName, o.name, o.line, o.goName, strings.Join(params, ", "), sig, ret, o.cName(), strings.Join(append(cargs, "&out", "&r"), ", "))
	}
	return fmt.Sprintf("// Op%s is %s (ops.tab line %d).\nfunc Op%s(%s) %s {\n\tvar r %s\n\tC.%s(%s)\n\treturn %s(r)\n}\n",
		o.goName, o.name, o.line, o.goName, strings.Join(params, ", "), sig, ret, o.cName(), strings.Join(append(cargs, "&r"), ", "), conv)
}

// cgoDirectives tell cgo that no op keeps a pointer it is passed (so that the result
// and the slices passed stay on the Go stack) and that none calls back into Go.
func cgoDirectives(ops []op) string {
	var b strings.Builder
	for _, o := range ops {
		fmt.Fprintf(&b, "#cgo noescape %s\n#cgo nocallback %s\n", o.cName(), o.cName())
	}
	return b.String()
}

// torchFunc is package torch's method or function for the op.
func (o op) torchFunc() string {
	var params, args []string
	if o.self {
		args = append(args, "t.handle()")
	}
	for _, p := range o.params {
		f := forms[p.kind]
		if p.variadic {
			f.tP = "%[1]s ...int64"
		}
		params = append(params, fmt.Sprintf(f.tP, p.name))
		args = append(args, fmt.Sprintf(f.tArg, p.name))
	}
	recv := ""
	if o.self {
		recv = "(t *Tensor) "
	}
	call := fmt.Sprintf("cgotorch.Op%s(%s)", o.goName, strings.Join(args, ", "))
	r := results[o.result]
	body := fmt.Sprintf(r.tBody, o.name, call)
	doc := o.goName + " " + o.doc
	return fmt.Sprintf("%s\nfunc %s%s(%s)%s {\n\t%s\n}\n", comment(doc), recv, o.goName, strings.Join(params, ", "), r.tRet, body)
}

// comment wraps text as a Go comment of lines up to 90 columns.
func comment(text string) string {
	var b strings.Builder
	line := "//"
	for _, w := range strings.Fields(text) {
		if len(line)+1+len(w) > 90 && line != "//" {
			b.WriteString(line + "\n")
			line = "//"
		}
		line += " " + w
	}
	b.WriteString(line)
	return b.String()
}

const header = "// Code generated by cgotorch/opgen from cgotorch/ops.tab; DO NOT EDIT.\n"

func genH(ops []op) []byte {
	var b bytes.Buffer
	b.WriteString(header)
	b.WriteString("// The table's ops: each writes its tensors into the result its last parameter points\n// to (adopted by the calling thread's innermost scope, if any), or an error status; see\n// cgotorch.h.\n")
	b.WriteString("#ifndef GOTRAIN_CGOTORCH_OPS_GEN_H\n#define GOTRAIN_CGOTORCH_OPS_GEN_H\n#include \"cgotorch.h\"\n#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n")
	for _, o := range ops {
		fmt.Fprintf(&b, "%s;\n", o.prototype())
	}
	b.WriteString("\n#ifdef __cplusplus\n}\n#endif\n#endif\n")
	return b.Bytes()
}

func genCC(ops []op) []byte {
	var b bytes.Buffer
	b.WriteString(header)
	b.WriteString("#include <ATen/core/grad_mode.h>\n#include \"internal.h\"\n#include \"ops_gen.h\"\n\nextern \"C\" {\n\n")
	for i, o := range ops {
		b.WriteString(o.cxxBody(i))
		b.WriteString("\n")
	}
	b.WriteString("}  // extern \"C\"\n\n")
	// An op's number in a trace is its row's index: the entry and its case below come
	// from the same row, so no number is kept anywhere else.
	b.WriteString("const char *cg::op_name(int op) {\n  static const char *const names[] = {\n")
	for _, o := range ops {
		fmt.Fprintf(&b, "      %q,\n", o.name)
	}
	b.WriteString("  };\n  return op >= 0 && op < static_cast<int>(std::size(names)) ? names[op] : nullptr;\n}\n\n")
	b.WriteString("void cg::replay_op(int op, cg::Reader &rd_) {\n  switch (op) {\n")
	for i, o := range ops {
		if o.result != "int64" { // a host read: never in a trace
			b.WriteString(o.replayCase(i))
		}
	}
	b.WriteString("  }\n  TORCH_CHECK(false, \"replay: op \", op, \" is not in ops.tab\");\n}\n")
	return b.Bytes()
}

// genGo writes a gofmt'ed Go file: the header, preamble, then each op's code.
func genGo(ops []op, preamble string, code func(op) string) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(header)
	b.WriteString(preamble)
	for _, o := range ops {
		b.WriteString(code(o))
		b.WriteString("\n")
	}
	return format.Source(b.Bytes())
}

// generate returns every output file by its path relative to the module root.
func generate(table []byte, tablePath, cgoDir, torchDir string) (map[string][]byte, error) {
	ops, err := parse(table, tablePath)
	if err != nil {
		return nil, err
	}
	for _, o := range ops {
		if o.goName == "" || !(unicode.IsLetter(rune(o.goName[0]))) {
			return nil, fmt.Errorf("%s:%d: bad Go name %q", tablePath, o.line, o.goName)
		}
	}
	cgo, err := genGo(ops, "\npackage cgotorch\n\n/*\n"+cgoDirectives(ops)+"#include \"ops_gen.h\"\n*/\nimport \"C\"\n\n", op.cgoWrapper)
	if err != nil {
		return nil, fmt.Errorf("cgo wrappers: %w", err)
	}
	tg, err := genGo(ops, "\npackage torch\n\nimport \"github.com/gotrain/gotrain/cgotorch\"\n\n", op.torchFunc)
	if err != nil {
		return nil, fmt.Errorf("torch methods: %w", err)
	}
	return map[string][]byte{
		filepath.Join(cgoDir, "ops_gen.h"):    genH(ops),
		filepath.Join(cgoDir, "ops_gen.cc"):   genCC(ops),
		filepath.Join(cgoDir, "ops_gen.go"):   cgo,
		filepath.Join(torchDir, "ops_gen.go"): tg,
	}, nil
}

func main() {
	table := flag.String("table", "cgotorch/ops.tab", "the op table")
	cgoDir := flag.String("cgotorch", "cgotorch", "package cgotorch's directory")
	torchDir := flag.String("torch", "torch", "package torch's directory")
	flag.Parse()
	src, err := os.ReadFile(*table)
	if err != nil {
		fmt.Fprintln(os.Stderr, "opgen:", err)
		os.Exit(1)
	}
	files, err := generate(src, *table, *cgoDir, *torchDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "opgen:", err)
		os.Exit(1)
	}
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "opgen:", err)
			os.Exit(1)
		}
	}
}
