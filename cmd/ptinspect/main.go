// Command ptinspect prints what a PyTorch checkpoint (.pt/.pth, written by torch.save)
// or a safetensors file holds: the tree of keys and types, each tensor's dtype and
// shape, and scalar values. It reads the file with package checkpoint, so it needs no
// Python or libtorch and never runs code from the file.
//
// Usage:
//
//	ptinspect [--json] [--max-items N] FILE
//
// With --json it prints the tree as JSON for machines instead.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/big"
	"os"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/gotrain/gotrain/checkpoint"
)

func main() {
	asJSON := flag.Bool("json", false, "print the tree as JSON")
	o := options{}
	flag.IntVar(&o.maxItems, "max-items", 50, "list at most this many items of a list, tuple or dict (0: all)")
	flag.IntVar(&o.maxString, "max-string", 200, "print at most this many characters of a string or bytes (0: all)")
	flag.Int64Var(&o.maxOutput, "max-output", 4<<20, "stop printing after about this many bytes (0: no limit)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: ptinspect [--json] [--max-items N] [--max-string N] [--max-output BYTES] FILE")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	o.json = *asJSON
	if err := run(os.Stdout, flag.Arg(0), o); err != nil {
		// Error messages can quote the file (a global's name, a record's), so they are
		// escaped like everything else printed.
		fmt.Fprintln(os.Stderr, "ptinspect:", escape(err.Error()))
		os.Exit(1)
	}
}

// options bound what ptinspect prints, so that a hostile file cannot make it print
// without end: the items of a container, the characters of a string, and the output.
type options struct {
	json      bool
	maxItems  int
	maxString int
	maxOutput int64
}

func run(w io.Writer, path string, o options) error {
	v, err := load(path)
	if err != nil {
		return err
	}
	if o.json {
		j := &jsonConv{options: o, left: o.maxOutput}
		if o.maxOutput <= 0 {
			j.left = math.MaxInt64
		}
		b, err := json.MarshalIndent(j.node(v, 0), "", "  ")
		if err != nil {
			return err
		}
		_, err = w.Write(append(escapeJSON(b), '\n'))
		return err
	}
	p := &printer{w: w, options: o}
	p.value(v, 0)
	if p.cut {
		fmt.Fprintf(w, "# output cut after %d bytes (--max-output)\n", p.written)
	}
	s := stats{seen: map[*checkpoint.Storage]bool{}, tensorSeen: map[*checkpoint.Tensor]bool{}, visited: map[any]bool{}}
	s.walk(v)
	fmt.Fprintf(w, "# %d tensors, %d elements, %d bytes in %d storages\n", s.tensors, s.elements, s.bytes, len(s.seen))
	return nil
}

// load reads a torch.save checkpoint, or a safetensors file (which has no magic number:
// it is tried when the file is not a checkpoint). Values the file shares are not
// limited in their expanded size: ptinspect bounds its own output instead.
func load(path string) (any, error) {
	ro := checkpoint.ReadOptions{MaxExpanded: -1}
	if strings.HasSuffix(path, ".safetensors") {
		return loadSafetensors(ro, path)
	}
	v, err := ro.Read(path)
	if err != nil {
		if sv, serr := loadSafetensors(ro, path); serr == nil {
			return sv, nil
		}
	}
	return v, err
}

func loadSafetensors(ro checkpoint.ReadOptions, path string) (any, error) {
	d, meta, err := ro.ReadSafetensors(path)
	if err != nil {
		return nil, err
	}
	if len(meta) > 0 {
		keys := make([]string, 0, len(meta))
		for k := range meta {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		m := checkpoint.NewDict()
		for _, k := range keys {
			m.Set(k, meta[k])
		}
		d.Set("__metadata__", m)
	}
	return d, nil
}

type printer struct {
	w io.Writer
	options
	written int64
	cut     bool // the output limit was reached: print nothing more
}

// stats counts the tensors of a whole tree: each tensor and storage once, and each
// shared container once, so that its cost is the file's, not the expanded tree's.
type stats struct {
	tensors, elements, bytes int64
	seen                     map[*checkpoint.Storage]bool
	tensorSeen               map[*checkpoint.Tensor]bool
	visited                  map[any]bool
}

// containerID identifies a shared container: the dict, or the first element of a list
// or tuple (with its length).
func containerID(v any) (any, bool) {
	type seq struct {
		p *any
		n int
	}
	switch x := v.(type) {
	case *checkpoint.Dict:
		return x, true
	case []any:
		if len(x) > 0 {
			return seq{&x[0], len(x)}, true
		}
	case checkpoint.Tuple:
		if len(x) > 0 {
			return seq{&x[0], len(x)}, true
		}
	}
	return nil, false
}

func (s *stats) walk(v any) {
	if id, ok := containerID(v); ok {
		if s.visited[id] {
			return
		}
		s.visited[id] = true
	}
	switch x := v.(type) {
	case *checkpoint.Dict:
		for _, e := range x.All() {
			s.walk(e)
		}
	case []any:
		for _, e := range x {
			s.walk(e)
		}
	case checkpoint.Tuple:
		for _, e := range x {
			s.walk(e)
		}
	case *checkpoint.Tensor:
		if s.tensorSeen[x] {
			return
		}
		s.tensorSeen[x] = true
		s.tensors++
		s.elements += x.Numel()
		if !s.seen[x.Storage] {
			s.seen[x.Storage] = true
			s.bytes += int64(len(x.Storage.Data))
		}
	}
}

func (p *printer) line(depth int, format string, args ...any) {
	if p.cut {
		return
	}
	s := strings.Repeat("  ", depth) + fmt.Sprintf(format, args...) + "\n"
	if p.maxOutput > 0 && p.written+int64(len(s)) > p.maxOutput {
		p.cut = true
		return
	}
	n, _ := io.WriteString(p.w, s)
	p.written += int64(n)
}

// value prints v on the current line's remainder and its children below it.
func (p *printer) value(v any, depth int) {
	p.entry("", v, depth)
}

func (p *printer) entry(prefix string, v any, depth int) {
	if p.cut {
		return
	}
	switch x := v.(type) {
	case *checkpoint.Dict:
		kind := "dict"
		if x.Kind == checkpoint.OrderedDict {
			kind = "OrderedDict"
		}
		p.line(depth, "%s%s (%d items)", prefix, kind, x.Len())
		i := 0
		for k, e := range x.All() {
			if p.cut {
				return
			}
			if p.maxItems > 0 && i == p.maxItems {
				p.line(depth+1, "... %d more", x.Len()-i)
				break
			}
			p.entry(p.repr(k)+": ", e, depth+1)
			i++
		}
		if x.Attrs.Len() > 0 {
			for k, e := range x.Attrs.All() {
				name := p.repr(k)
				if s, ok := k.(string); ok {
					cut, _ := cutString(s, p.maxString)
					name = escape(cut)
				}
				p.entry("."+name+" (attribute): ", e, depth+1)
			}
		}
	case []any, checkpoint.Tuple:
		seq, kind := asSeq(x)
		if scalars(seq) {
			p.line(depth, "%s%s", prefix, p.repr(x))
			return
		}
		p.line(depth, "%s%s (%d items)", prefix, kind, len(seq))
		for i, e := range seq {
			if p.cut {
				return
			}
			if p.maxItems > 0 && i == p.maxItems {
				p.line(depth+1, "... %d more", len(seq)-i)
				break
			}
			p.entry(fmt.Sprintf("[%d]: ", i), e, depth+1)
		}
	case *checkpoint.Tensor:
		p.line(depth, "%s%s", prefix, tensorRepr(x))
	default:
		p.line(depth, "%s%s", prefix, p.repr(v))
	}
}

func asSeq(v any) ([]any, string) {
	if t, ok := v.(checkpoint.Tuple); ok {
		return t, "tuple"
	}
	return v.([]any), "list"
}

// scalars reports whether a sequence is short and flat enough to print on one line.
func scalars(seq []any) bool {
	if len(seq) > 16 {
		return false
	}
	for _, e := range seq {
		switch e.(type) {
		case *checkpoint.Dict, []any, checkpoint.Tuple, *checkpoint.Tensor:
			return false
		}
	}
	return true
}

func tensorRepr(t *checkpoint.Tensor) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "tensor %v %v", t.DType, shapeRepr(t.Shape))
	if t.RequiresGrad {
		sb.WriteString(" requires_grad")
	}
	if !t.IsContiguous() || t.Offset != 0 || int64(len(t.Storage.Data)) != t.Numel()*int64(t.DType.ElemSize()) {
		fmt.Fprintf(&sb, " view(strides=%v, offset=%d)", shapeRepr(t.Strides), t.Offset)
	}
	if n := t.Numel(); n > 0 && n <= 8 {
		var parts []string
		switch t.DType {
		case checkpoint.Int64, checkpoint.Int32, checkpoint.Int16, checkpoint.Int8, checkpoint.Uint8:
			v, err := t.ReadInt64s()
			if err != nil {
				return sb.String() + " (" + escape(err.Error()) + ")"
			}
			for _, x := range v {
				parts = append(parts, strconv.FormatInt(x, 10))
			}
		default:
			v, err := t.ReadFloat64s()
			if err != nil {
				return sb.String() + " (" + escape(err.Error()) + ")"
			}
			for _, f := range v {
				parts = append(parts, elemRepr(t.DType, f))
			}
		}
		if len(t.Shape) == 0 {
			fmt.Fprintf(&sb, " = %s", parts[0])
		} else {
			fmt.Fprintf(&sb, " = [%s]", strings.Join(parts, ", "))
		}
	}
	return sb.String()
}

func elemRepr(d checkpoint.DType, f float64) string {
	switch d {
	case checkpoint.Bool:
		if f != 0 {
			return "True"
		}
		return "False"
	case checkpoint.Float64:
		return floatRepr(f)
	}
	return floatRepr32(f)
}

func shapeRepr(s []int64) string {
	parts := make([]string, len(s))
	for i, x := range s {
		parts[i] = strconv.FormatInt(x, 10)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func floatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s
}

// floatRepr32 prints a value of a 32-bit-or-narrower float with the digits that
// identify it at float32 precision, as torch does, rather than float64's.
func floatRepr32(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return floatRepr(f)
	}
	s := strconv.FormatFloat(f, 'g', -1, 32)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s
}

// maxIntBits is the size from which an int is printed by its size, not its digits
// (decimal conversion takes quadratic time; Python refuses ints of more than 4300
// digits in text too).
const maxIntBits = 8192

// intRepr formats an int, or describes one too large to print.
func intRepr(x *big.Int) string {
	if x.BitLen() > maxIntBits {
		return fmt.Sprintf("<int of %d bits>", x.BitLen())
	}
	return x.String()
}

// cutString returns s cut to max characters and the number of characters cut.
func cutString(s string, max int) (string, int) {
	if max <= 0 || len(s) <= max {
		return s, 0
	}
	n := 0
	for i := range s {
		if n == max {
			return s[:i], utf8.RuneCountInString(s[i:])
		}
		n++
	}
	return s, 0
}

// repr formats a scalar (or a flat sequence) as Python would print it, with every
// non-printable character escaped and long strings cut.
func (p *printer) repr(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(x, 10)
	case *big.Int:
		return intRepr(x)
	case float64:
		return floatRepr(x)
	case string:
		s, more := cutString(x, p.maxString)
		out := pyQuote(s)
		if more > 0 {
			out += fmt.Sprintf("... (%d more characters)", more)
		}
		return out
	case []byte:
		b, more := x, 0
		if p.maxString > 0 && len(b) > p.maxString {
			b, more = b[:p.maxString], len(b)-p.maxString
		}
		out := "b" + pyBytes(b)
		if more > 0 {
			out += fmt.Sprintf("... (%d more bytes)", more)
		}
		return out
	case checkpoint.Tuple:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = p.repr(e)
		}
		if len(x) == 1 {
			return "(" + parts[0] + ",)"
		}
		return "(" + strings.Join(parts, ", ") + ")"
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = p.repr(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case *checkpoint.Tensor:
		return tensorRepr(x)
	case *checkpoint.Dict:
		return fmt.Sprintf("dict (%d items)", x.Len())
	case checkpoint.DType:
		return "torch." + x.String()
	}
	return escape(fmt.Sprint(v))
}

// pyQuote quotes s as Python's repr does, escaping quotes, backslashes and every
// character that is not printable (controls, C1 controls, format characters such as
// bidirectional overrides, line separators), so that nothing from the file reaches the
// terminal raw.
func pyQuote(s string) string {
	var sb strings.Builder
	sb.WriteByte('\'')
	for i, w := 0, 0; i < len(s); i += w {
		r, n := utf8.DecodeRuneInString(s[i:])
		w = n
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&sb, "\\x%02x", s[i])
		case r == '\'' || r == '\\':
			sb.WriteByte('\\')
			sb.WriteRune(r)
		default:
			writeRune(&sb, r)
		}
	}
	sb.WriteByte('\'')
	return sb.String()
}

// pyBytes quotes b as Python's repr of bytes does: printable ASCII as is, the rest as
// escapes.
func pyBytes(b []byte) string {
	var sb strings.Builder
	sb.WriteByte('\'')
	for _, c := range b {
		switch {
		case c == '\'' || c == '\\':
			sb.WriteByte('\\')
			sb.WriteByte(c)
		case c == '\n':
			sb.WriteString("\\n")
		case c == '\r':
			sb.WriteString("\\r")
		case c == '\t':
			sb.WriteString("\\t")
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&sb, "\\x%02x", c)
		default:
			sb.WriteByte(c)
		}
	}
	sb.WriteByte('\'')
	return sb.String()
}

// writeRune writes r, or its Python escape when it is not printable.
func writeRune(sb *strings.Builder, r rune) {
	switch {
	case r == '\n':
		sb.WriteString("\\n")
	case r == '\r':
		sb.WriteString("\\r")
	case r == '\t':
		sb.WriteString("\\t")
	case r == ' ' || (unicode.IsPrint(r) && r != utf8.RuneError):
		sb.WriteRune(r)
	case r < 0x100:
		fmt.Fprintf(sb, "\\x%02x", r)
	case r < 0x10000:
		fmt.Fprintf(sb, "\\u%04x", r)
	default:
		fmt.Fprintf(sb, "\\U%08x", r)
	}
}

// escape makes any text (an error message) safe to print: non-printable characters
// and invalid UTF-8 become escapes.
func escape(s string) string {
	var sb strings.Builder
	for i, w := 0, 0; i < len(s); i += w {
		r, n := utf8.DecodeRuneInString(s[i:])
		w = n
		if r == utf8.RuneError && n == 1 {
			fmt.Fprintf(&sb, "\\x%02x", s[i])
			continue
		}
		writeRune(&sb, r)
	}
	return sb.String()
}

// escapeJSON replaces, in encoded JSON, every non-printable character that
// encoding/json leaves as is (C1 controls, format characters) by a \u escape. Such
// characters can only occur inside strings, where the escape means the same.
func escapeJSON(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r < 0x7f || (r > 0x7f && unicode.IsPrint(r) && r != utf8.RuneError):
			out = append(out, b[i:i+n]...)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			out = fmt.Appendf(out, "\\u%04x\\u%04x", r1, r2)
		default:
			out = fmt.Appendf(out, "\\u%04x", r)
		}
		i += n
	}
	return out
}

// jsonConv converts a value to a JSON-friendly tree: every node is an object with a
// "type"; containers carry "items", scalars a "value" (ints outside ±2^53 and
// non-finite floats as strings, so nothing is lost). It applies ptinspect's bounds:
// containers list at most maxItems items ("omitted" counts the rest), strings and
// bytes are cut ("length" gives the full size), and once about maxOutput bytes of
// nodes are made, containers list nothing more.
type jsonConv struct {
	options
	left int64
}

// spend charges n bytes of output; it reports whether any budget was left.
func (j *jsonConv) spend(n int64) bool {
	if j.left <= 0 {
		return false
	}
	j.left -= n
	return true
}

func (j *jsonConv) str(typ, s string) map[string]any {
	out := map[string]any{"type": typ}
	if cut, more := cutString(s, j.maxString); more > 0 {
		out["value"], out["length"] = cut, utf8.RuneCountInString(s)
	} else {
		out["value"] = s
	}
	j.spend(int64(len(out["value"].(string))) + 32)
	return out
}

func (j *jsonConv) node(v any, depth int) any {
	j.spend(32)
	switch x := v.(type) {
	case nil:
		return map[string]any{"type": "None"}
	case checkpoint.DType:
		return map[string]any{"type": "dtype", "value": x.String()}
	case bool:
		return map[string]any{"type": "bool", "value": x}
	case int64:
		if x > 1<<53 || x < -(1<<53) {
			return map[string]any{"type": "int", "value": strconv.FormatInt(x, 10)}
		}
		return map[string]any{"type": "int", "value": x}
	case *big.Int:
		return j.str("int", intRepr(x))
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return map[string]any{"type": "float", "value": floatRepr(x)}
		}
		return map[string]any{"type": "float", "value": x}
	case string:
		return j.str("str", x)
	case []byte:
		out := map[string]any{"type": "bytes", "value": x}
		if j.maxString > 0 && len(x) > j.maxString {
			out["value"], out["length"] = x[:j.maxString], len(x)
		}
		j.spend(int64(len(out["value"].([]byte)))*4/3 + 32)
		return out
	case checkpoint.Tuple, []any:
		seq, kind := asSeq(x)
		items := []any{}
		for i, e := range seq {
			if (j.maxItems > 0 && i == j.maxItems) || !j.spend(0) {
				break
			}
			items = append(items, j.node(e, depth+1))
		}
		out := map[string]any{"type": kind, "items": items}
		if len(items) < len(seq) {
			out["omitted"] = len(seq) - len(items)
		}
		return out
	case *checkpoint.Dict:
		kind := "dict"
		if x.Kind == checkpoint.OrderedDict {
			kind = "OrderedDict"
		}
		items := []any{}
		for k, e := range x.All() {
			if (j.maxItems > 0 && len(items) == j.maxItems) || !j.spend(0) {
				break
			}
			items = append(items, map[string]any{"key": j.node(k, depth+1), "value": j.node(e, depth+1)})
		}
		out := map[string]any{"type": kind, "items": items}
		if len(items) < x.Len() {
			out["omitted"] = x.Len() - len(items)
		}
		if x.Attrs.Len() > 0 && j.spend(0) {
			out["attributes"] = j.node(x.Attrs, depth+1)
		}
		return out
	case *checkpoint.Tensor:
		j.spend(256)
		out := map[string]any{
			"type": "tensor", "dtype": x.DType.String(), "shape": nonNil(x.Shape),
			"strides": nonNil(x.Strides), "offset": x.Offset, "requires_grad": x.RequiresGrad,
			"storage": x.Storage.Key, "numel": x.Numel(),
		}
		if len(x.Shape) == 0 && x.DType == checkpoint.Int64 {
			if v, err := x.ReadInt64s(); err == nil {
				out["value"] = v[0]
			}
		} else if len(x.Shape) == 0 {
			if v, err := x.ReadFloat64s(); err == nil {
				f := v[0]
				if math.IsNaN(f) || math.IsInf(f, 0) {
					out["value"] = floatRepr(f)
				} else {
					out["value"] = f
				}
			}
		}
		return out
	}
	return map[string]any{"type": fmt.Sprintf("%T", v)}
}

func nonNil(s []int64) []int64 {
	if s == nil {
		return []int64{}
	}
	return s
}
