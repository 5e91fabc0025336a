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
	"strconv"
	"strings"

	"github.com/gotrain/gotrain/checkpoint"
)

func main() {
	asJSON := flag.Bool("json", false, "print the tree as JSON")
	maxItems := flag.Int("max-items", 50, "list at most this many items of a list, tuple or dict (0: all)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: ptinspect [--json] [--max-items N] FILE")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(os.Stdout, flag.Arg(0), *asJSON, *maxItems); err != nil {
		fmt.Fprintln(os.Stderr, "ptinspect:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, path string, asJSON bool, maxItems int) error {
	v, err := load(path)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(toJSON(v))
	}
	p := &printer{w: w, max: maxItems}
	p.value(v, 0)
	var s stats
	s.walk(v)
	fmt.Fprintf(w, "# %d tensors, %d elements, %d bytes in %d storages\n", s.tensors, s.elements, s.bytes, len(s.seen))
	return nil
}

// load reads a torch.save checkpoint, or a safetensors file (which has no magic number:
// it is tried when the file is not a checkpoint).
func load(path string) (any, error) {
	if strings.HasSuffix(path, ".safetensors") {
		return loadSafetensors(path)
	}
	v, err := checkpoint.Read(path)
	if err != nil {
		if sv, serr := loadSafetensors(path); serr == nil {
			return sv, nil
		}
	}
	return v, err
}

func loadSafetensors(path string) (any, error) {
	d, meta, err := checkpoint.ReadSafetensors(path)
	if err != nil {
		return nil, err
	}
	if len(meta) > 0 {
		m := checkpoint.NewDict()
		for k, v := range meta {
			m.Set(k, v)
		}
		d.Set("__metadata__", m)
	}
	return d, nil
}

type printer struct {
	w   io.Writer
	max int
}

// stats counts the tensors of a whole tree, storages shared by views once.
type stats struct {
	tensors, elements, bytes int64
	seen                     map[*checkpoint.Storage]bool
}

func (s *stats) walk(v any) {
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
		s.tensors++
		s.elements += x.Numel()
		if s.seen == nil {
			s.seen = map[*checkpoint.Storage]bool{}
		}
		if !s.seen[x.Storage] {
			s.seen[x.Storage] = true
			s.bytes += int64(len(x.Storage.Data))
		}
	}
}

func (p *printer) line(depth int, format string, args ...any) {
	fmt.Fprintf(p.w, "%s%s\n", strings.Repeat("  ", depth), fmt.Sprintf(format, args...))
}

// value prints v on the current line's remainder and its children below it.
func (p *printer) value(v any, depth int) {
	p.entry("", v, depth)
}

func (p *printer) entry(prefix string, v any, depth int) {
	switch x := v.(type) {
	case *checkpoint.Dict:
		kind := "dict"
		if x.Kind == checkpoint.OrderedDict {
			kind = "OrderedDict"
		}
		p.line(depth, "%s%s (%d items)", prefix, kind, x.Len())
		i := 0
		for k, e := range x.All() {
			if p.max > 0 && i == p.max {
				p.line(depth+1, "... %d more", x.Len()-i)
				break
			}
			p.entry(repr(k)+": ", e, depth+1)
			i++
		}
		if x.Attrs.Len() > 0 {
			for k, e := range x.Attrs.All() {
				p.entry("."+fmt.Sprint(k)+" (attribute): ", e, depth+1)
			}
		}
	case []any, checkpoint.Tuple:
		seq, kind := asSeq(x)
		if scalars(seq) {
			p.line(depth, "%s%s", prefix, repr(x))
			return
		}
		p.line(depth, "%s%s (%d items)", prefix, kind, len(seq))
		for i, e := range seq {
			if p.max > 0 && i == p.max {
				p.line(depth+1, "... %d more", len(seq)-i)
				break
			}
			p.entry(fmt.Sprintf("[%d]: ", i), e, depth+1)
		}
	case *checkpoint.Tensor:
		p.line(depth, "%s%s", prefix, tensorRepr(x))
	default:
		p.line(depth, "%s%s", prefix, repr(v))
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
			for _, x := range t.Int64s() {
				parts = append(parts, strconv.FormatInt(x, 10))
			}
		default:
			for _, f := range t.Float64s() {
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

// repr formats a scalar (or a flat sequence) as Python would print it.
func repr(v any) string {
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
		return x.String()
	case float64:
		return floatRepr(x)
	case string:
		return "'" + strings.ReplaceAll(strings.ReplaceAll(x, `\`, `\\`), "'", `\'`) + "'"
	case []byte:
		return fmt.Sprintf("b%q", x)
	case checkpoint.Tuple:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = repr(e)
		}
		if len(x) == 1 {
			return "(" + parts[0] + ",)"
		}
		return "(" + strings.Join(parts, ", ") + ")"
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = repr(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case *checkpoint.Tensor:
		return tensorRepr(x)
	case *checkpoint.Dict:
		return fmt.Sprintf("dict (%d items)", x.Len())
	case checkpoint.DType:
		return "torch." + x.String()
	}
	return fmt.Sprint(v)
}

// toJSON converts a value to a JSON-friendly tree: every node is an object with a
// "type"; containers carry "items", scalars a "value" (ints outside ±2^53 and
// non-finite floats as strings, so nothing is lost).
func toJSON(v any) any {
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
		return map[string]any{"type": "int", "value": x.String()}
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return map[string]any{"type": "float", "value": floatRepr(x)}
		}
		return map[string]any{"type": "float", "value": x}
	case string:
		return map[string]any{"type": "str", "value": x}
	case []byte:
		return map[string]any{"type": "bytes", "value": x}
	case checkpoint.Tuple, []any:
		seq, kind := asSeq(x)
		items := make([]any, len(seq))
		for i, e := range seq {
			items[i] = toJSON(e)
		}
		return map[string]any{"type": kind, "items": items}
	case *checkpoint.Dict:
		kind := "dict"
		if x.Kind == checkpoint.OrderedDict {
			kind = "OrderedDict"
		}
		items := []any{}
		for k, e := range x.All() {
			items = append(items, map[string]any{"key": toJSON(k), "value": toJSON(e)})
		}
		out := map[string]any{"type": kind, "items": items}
		if x.Attrs.Len() > 0 {
			out["attributes"] = toJSON(x.Attrs)
		}
		return out
	case *checkpoint.Tensor:
		out := map[string]any{
			"type": "tensor", "dtype": x.DType.String(), "shape": nonNil(x.Shape),
			"strides": nonNil(x.Strides), "offset": x.Offset, "requires_grad": x.RequiresGrad,
			"storage": x.Storage.Key, "numel": x.Numel(),
		}
		if len(x.Shape) == 0 && x.DType == checkpoint.Int64 {
			out["value"] = x.Int64s()[0]
		} else if len(x.Shape) == 0 {
			f := x.Float64s()[0]
			if math.IsNaN(f) || math.IsInf(f, 0) {
				out["value"] = floatRepr(f)
			} else {
				out["value"] = f
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
