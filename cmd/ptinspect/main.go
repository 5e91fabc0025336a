// Command ptinspect prints what a PyTorch checkpoint (.pt/.pth, written by torch.save)
// or a safetensors file holds: the tree of keys and types, each tensor's dtype and
// shape, and scalar values. It reads the file with package checkpoint, so it needs no
// Python or libtorch and never runs code from the file.
//
// Usage:
//
//	ptinspect [--json] [--max-items N] [--max-string N] [--max-output BYTES] FILE
//
// With --json it prints the tree as JSON for machines instead.
//
// What it prints is bounded, and costs time and memory linear in what it prints: a
// value the file stores once and references many times (through the pickle memo) is
// printed at each reference, so the output stops after --max-output bytes, and never
// goes past the budget a reader gives a file's shared values
// (checkpoint.DefaultMemoryFixed + DefaultMemoryPerByte × the file's size); strings and
// bytes are cut to --max-string characters, saying how many bytes were elided.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"iter"
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
	flag.Int64Var(&o.maxOutput, "max-output", 4<<20, "stop printing after about this many bytes (0: the file's budget for shared values)")
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
	limit, why, err := outputLimit(path, o.maxOutput)
	if err != nil {
		return err
	}
	v, err := load(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	if o.json {
		j := &jsonWriter{options: o, w: bw, left: limit}
		j.node(v, 0)
		bw.WriteByte('\n')
		return bw.Flush()
	}
	p := &printer{w: bw, options: o, limit: limit}
	p.value(v, 0)
	if p.cut {
		fmt.Fprintf(bw, "# output cut after %d bytes (%s)\n", p.written, why)
	}
	s := stats{seen: map[*checkpoint.Storage]bool{}, tensorSeen: map[*checkpoint.Tensor]bool{}, visited: map[any]bool{}}
	s.walk(v)
	fmt.Fprintf(bw, "# %d tensors, %d elements, %d bytes in %d storages\n", s.tensors, s.elements, s.bytes, len(s.seen))
	return bw.Flush()
}

// outputLimit returns how many bytes ptinspect prints for the file at path, and why:
// --max-output, but never more than the budget checkpoint's readers give the file's
// shared values (its expanded size), since printing a shared value at every reference
// expands it just as a tree walk does.
func outputLimit(path string, maxOutput int64) (int64, string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, "", err
	}
	budget := int64(math.MaxInt64)
	if size := fi.Size(); size < (math.MaxInt64-checkpoint.DefaultMemoryFixed)/checkpoint.DefaultMemoryPerByte {
		budget = checkpoint.DefaultMemoryFixed + checkpoint.DefaultMemoryPerByte*size
	}
	if maxOutput > 0 && maxOutput <= budget {
		return maxOutput, "--max-output", nil
	}
	return budget, fmt.Sprintf("the file's budget for shared values, %d bytes", budget), nil
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
		sv, serr := loadSafetensors(ro, path)
		if serr == nil {
			return sv, nil
		}
		if looksLikeSafetensors(path) {
			return nil, serr
		}
	}
	return v, err
}

// looksLikeSafetensors reports whether a file starts as a safetensors file does: a
// header length that fits the file, then '{'. When neither reader accepts such a file,
// the safetensors reader's error is the one that says what is wrong with it.
func looksLikeSafetensors(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [9]byte
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	if _, err := io.ReadFull(f, b[:]); err != nil {
		return false
	}
	n := binary.LittleEndian.Uint64(b[:8])
	return n <= uint64(fi.Size()-8) && b[8] == '{'
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
	w *bufio.Writer
	options
	limit   int64 // bytes the output may take
	written int64
	cut     bool // the output limit was reached: print nothing more
}

// room is how many more bytes the output may take, less some for the indentation and
// the key that precede a value on its line: what a value is cut to.
func (p *printer) room() int {
	return int(min(max(p.limit-p.written-256, 0), math.MaxInt32))
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
	if p.written+int64(len(s)) > p.limit {
		p.cut = true
		return
	}
	n, _ := p.w.WriteString(s)
	p.written += int64(n)
}

// valueLine prints prefix and v's repr on one line, built in place: a line of
// megabytes (--max-string 0) is made once, not copied.
func (p *printer) valueLine(depth int, prefix string, v any) {
	if p.cut {
		return
	}
	l := &lim{max: p.room()}
	for range depth {
		l.WriteString("  ")
	}
	l.WriteString(prefix)
	p.reprTo(l, v)
	l.WriteByte('\n')
	if p.written+int64(l.Len()) > p.limit {
		p.cut = true
		return
	}
	n, _ := p.w.WriteString(l.String())
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
					cut, _ := cutString(s, p.maxString, p.room())
					name = escape(cut)
				}
				p.entry("."+name+" (attribute): ", e, depth+1)
			}
		}
	case []any, checkpoint.Tuple:
		seq, kind := asSeq(x)
		if scalars(seq) {
			p.valueLine(depth, prefix, x)
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
		p.valueLine(depth, prefix, v)
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

// cutString returns s cut to at most maxChars characters (0: no limit) and about
// maxBytes bytes, on a character boundary, and how many bytes it cut. It reads no more
// of s than it keeps, so printing the start of a long string costs the start, however
// often the string is printed.
func cutString(s string, maxChars, maxBytes int) (string, int) {
	n := 0
	for i := range s {
		if (maxChars > 0 && n == maxChars) || i >= maxBytes {
			return s[:i], len(s) - i
		}
		n++
	}
	return s, 0
}

// elided is what follows a string or bytes value cut by n bytes.
func elided(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("... (%d more bytes elided)", n)
}

// lim is a strings.Builder that values stop writing to once it holds max bytes.
type lim struct {
	strings.Builder
	max int
}

func (l *lim) full() bool { return l.Len() >= l.max }

// repr formats a scalar (or a flat sequence) as Python would print it, with every
// non-printable character escaped, long strings cut, and no more than the output has
// room for.
func (p *printer) repr(v any) string {
	l := &lim{max: p.room()}
	p.reprTo(l, v)
	return l.String()
}

func (p *printer) reprTo(l *lim, v any) {
	switch x := v.(type) {
	case nil:
		l.WriteString("None")
	case bool:
		if x {
			l.WriteString("True")
		} else {
			l.WriteString("False")
		}
	case int64:
		l.WriteString(strconv.FormatInt(x, 10))
	case *big.Int:
		l.WriteString(intRepr(x))
	case float64:
		l.WriteString(floatRepr(x))
	case string:
		s, more := cutString(x, p.maxString, l.max-l.Len())
		pyQuoteTo(&l.Builder, s)
		l.WriteString(elided(more))
	case []byte:
		n := min(len(x), max(l.max-l.Len(), 0))
		if p.maxString > 0 {
			n = min(n, p.maxString)
		}
		l.WriteString("b" + pyBytes(x[:n]))
		l.WriteString(elided(len(x) - n))
	case checkpoint.Tuple, []any:
		seq, _ := asSeq(x)
		open, close := "[", "]"
		if _, ok := x.(checkpoint.Tuple); ok {
			open, close = "(", ")"
		}
		l.WriteString(open)
		for i, e := range seq {
			if i > 0 {
				l.WriteString(", ")
			}
			if l.full() {
				l.WriteString("...")
				break
			}
			p.reprTo(l, e)
		}
		if len(seq) == 1 && open == "(" {
			l.WriteString(",")
		}
		l.WriteString(close)
	case *checkpoint.Tensor:
		l.WriteString(tensorRepr(x))
	case *checkpoint.Dict:
		fmt.Fprintf(l, "dict (%d items)", x.Len())
	case checkpoint.DType:
		l.WriteString("torch." + x.String())
	default:
		l.WriteString(escape(fmt.Sprint(v)))
	}
}

// pyQuote quotes s as Python's repr does, escaping quotes, backslashes and every
// character that is not printable (controls, C1 controls, format characters such as
// bidirectional overrides, line separators), so that nothing from the file reaches the
// terminal raw.
func pyQuote(s string) string {
	var sb strings.Builder
	pyQuoteTo(&sb, s)
	return sb.String()
}

// pyQuoteTo writes pyQuote(s) to sb.
func pyQuoteTo(sb *strings.Builder, s string) {
	sb.Grow(len(s) + 2)
	sb.WriteByte('\'')
	for i, w := 0, 0; i < len(s); i += w {
		r, n := utf8.DecodeRuneInString(s[i:])
		w = n
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(sb, "\\x%02x", s[i])
		case r == '\'' || r == '\\':
			sb.WriteByte('\\')
			sb.WriteRune(r)
		default:
			writeRune(sb, r)
		}
	}
	sb.WriteByte('\'')
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

// jsonWriter writes a value as a JSON tree as it walks it, so that memory does not
// grow with the output: every node is an object with a "type"; containers carry
// "items", scalars a "value" (ints outside ±2^53 and non-finite floats as strings, so
// nothing is lost). It applies ptinspect's bounds: containers list at most maxItems
// items ("omitted" counts the rest), strings and bytes are cut ("length" gives the
// full size in bytes), and once left bytes are written, containers list nothing more.
// The text is indented as json.MarshalIndent indents it.
type jsonWriter struct {
	options
	w    *bufio.Writer
	left int64
}

func (j *jsonWriter) raw(s string) {
	n, _ := j.w.WriteString(s)
	j.left -= int64(n)
}

// room is what is left of the output, for a string about to be written.
func (j *jsonWriter) room() int { return int(min(max(j.left, 0), math.MaxInt32)) }

// value writes v as JSON (through encoding/json, then with every non-printable
// character escaped).
func (j *jsonWriter) value(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(err.Error())
	}
	n, _ := j.w.Write(escapeJSON(b))
	j.left -= int64(n)
}

// object writes an object's opening and its "type" member; members follow with
// member, and end closes it.
func (j *jsonWriter) object(typ string, depth int) {
	j.raw("{\n")
	j.indent(depth + 1)
	j.raw(`"type": `)
	j.value(typ)
}

func (j *jsonWriter) member(name string, depth int) {
	j.raw(",\n")
	j.indent(depth + 1)
	j.value(name)
	j.raw(": ")
}

func (j *jsonWriter) end(depth int) {
	j.raw("\n")
	j.indent(depth)
	j.raw("}")
}

func (j *jsonWriter) indent(depth int) { j.raw(strings.Repeat("  ", depth)) }

// scalar writes a node holding a value.
func (j *jsonWriter) scalar(typ string, v any, depth int) {
	j.object(typ, depth)
	j.member("value", depth)
	j.value(v)
	j.end(depth)
}

// items writes a container's items, each by item, up to the item and output bounds,
// and returns how many it wrote.
func (j *jsonWriter) items(n int, depth int, item func(i int)) int {
	j.member("items", depth)
	written := 0
	for i := range n {
		if (j.maxItems > 0 && i == j.maxItems) || j.left <= 0 {
			break
		}
		if i == 0 {
			j.raw("[\n")
		} else {
			j.raw(",\n")
		}
		j.indent(depth + 2)
		item(i)
		written++
	}
	if written == 0 {
		j.raw("[]")
	} else {
		j.raw("\n")
		j.indent(depth + 1)
		j.raw("]")
	}
	if written < n {
		j.member("omitted", depth)
		j.value(n - written)
	}
	return written
}

func (j *jsonWriter) node(v any, depth int) {
	switch x := v.(type) {
	case nil:
		j.object("None", depth)
		j.end(depth)
	case checkpoint.DType:
		j.scalar("dtype", x.String(), depth)
	case bool:
		j.scalar("bool", x, depth)
	case int64:
		if x > 1<<53 || x < -(1<<53) {
			j.scalar("int", strconv.FormatInt(x, 10), depth)
		} else {
			j.scalar("int", x, depth)
		}
	case *big.Int:
		j.scalar("int", intRepr(x), depth)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			j.scalar("float", floatRepr(x), depth)
		} else {
			j.scalar("float", x, depth)
		}
	case string:
		cut, more := cutString(x, j.maxString, j.room())
		j.object("str", depth)
		j.member("value", depth)
		j.value(cut)
		if more > 0 {
			j.member("length", depth)
			j.value(len(x))
		}
		j.end(depth)
	case []byte:
		n := min(len(x), j.room()*3/4)
		if j.maxString > 0 {
			n = min(n, j.maxString)
		}
		j.object("bytes", depth)
		j.member("value", depth)
		j.value(x[:n])
		if n < len(x) {
			j.member("length", depth)
			j.value(len(x))
		}
		j.end(depth)
	case checkpoint.Tuple, []any:
		seq, kind := asSeq(x)
		j.object(kind, depth)
		j.items(len(seq), depth, func(i int) { j.node(seq[i], depth+2) })
		j.end(depth)
	case *checkpoint.Dict:
		kind := "dict"
		if x.Kind == checkpoint.OrderedDict {
			kind = "OrderedDict"
		}
		j.object(kind, depth)
		next, stop := iter.Pull2(x.All())
		defer stop()
		j.items(x.Len(), depth, func(int) {
			k, e, _ := next()
			j.raw("{\n")
			j.indent(depth + 3)
			j.raw(`"key": `)
			j.node(k, depth+3)
			j.raw(",\n")
			j.indent(depth + 3)
			j.raw(`"value": `)
			j.node(e, depth+3)
			j.raw("\n")
			j.indent(depth + 2)
			j.raw("}")
		})
		if x.Attrs.Len() > 0 && j.left > 0 {
			j.member("attributes", depth)
			j.node(x.Attrs, depth+1)
		}
		j.end(depth)
	case *checkpoint.Tensor:
		j.object("tensor", depth)
		for _, m := range []struct {
			name string
			v    any
		}{
			{"dtype", x.DType.String()}, {"shape", nonNil(x.Shape)}, {"strides", nonNil(x.Strides)},
			{"offset", x.Offset}, {"requires_grad", x.RequiresGrad}, {"storage", x.Storage.Key}, {"numel", x.Numel()},
		} {
			j.member(m.name, depth)
			j.value(m.v)
		}
		if len(x.Shape) == 0 {
			if v, ok := scalarValue(x); ok {
				j.member("value", depth)
				j.value(v)
			}
		}
		j.end(depth)
	default:
		j.object(fmt.Sprintf("%T", v), depth)
		j.end(depth)
	}
}

// scalarValue is a 0-dim tensor's element as JSON holds it.
func scalarValue(t *checkpoint.Tensor) (any, bool) {
	if t.DType == checkpoint.Int64 {
		v, err := t.ReadInt64s()
		if err != nil {
			return nil, false
		}
		return v[0], true
	}
	v, err := t.ReadFloat64s()
	if err != nil {
		return nil, false
	}
	if math.IsNaN(v[0]) || math.IsInf(v[0], 0) {
		return floatRepr(v[0]), true
	}
	return v[0], true
}

func nonNil(s []int64) []int64 {
	if s == nil {
		return []int64{}
	}
	return s
}
