package torch

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

const (
	printThreshold = 1000 // elements above which printing summarizes, as PyTorch's default
	printEdge      = 3
)

// String prints the tensor the way Python prints it: tensor([[1.0000, 2.5000], ...]),
// with dtype, device and requires_grad shown when they differ from the defaults.
func (t *Tensor) String() string {
	if t == nil || t.h == 0 {
		return "tensor(<freed>)"
	}
	shape := t.Shape()
	dt := t.DType()
	vals := t.Float64s()
	f := newFormatter(vals, dt)
	summarize := t.Numel() > printThreshold
	var b strings.Builder
	b.WriteString("tensor(")
	if len(shape) == 0 {
		b.WriteString(f.format(vals[0]))
	} else if t.Numel() == 0 {
		b.WriteString("[]")
	} else {
		writeNested(&b, vals, shape, f, len("tensor("), summarize)
	}
	if dt != Float32 && dt != Int64 && dt != Bool || t.Numel() == 0 && dt != Float32 {
		b.WriteString(", dtype=torch." + dt.String())
	}
	if d := t.Device(); d.IsCUDA() {
		b.WriteString(", device='" + d.String() + "'")
	}
	if t.RequiresGrad() {
		b.WriteString(", requires_grad=True")
	}
	b.WriteString(")")
	return b.String()
}

type formatter struct {
	dt      DType
	intMode bool
	sci     bool
	width   int
}

func newFormatter(vals []float64, dt DType) *formatter {
	f := &formatter{dt: dt, intMode: dt.IsFloatingPoint()}
	lo, hi := math.Inf(1), 0.0
	for _, v := range vals {
		if !dt.IsFloatingPoint() || math.IsInf(v, 0) || math.IsNaN(v) {
			continue
		}
		if v != math.Trunc(v) {
			f.intMode = false
		}
		if a := math.Abs(v); a != 0 {
			lo, hi = min(lo, a), max(hi, a)
		}
	}
	f.sci = hi > 0 && (hi/lo > 1000 || hi > 1e8 || (!f.intMode && lo < 1e-4))
	f.intMode = f.intMode && hi <= 1e8
	for _, v := range vals {
		f.width = max(f.width, len(f.format(v)))
	}
	return f
}

func (f *formatter) format(v float64) string {
	switch {
	case f.dt == Bool:
		if v != 0 {
			return "True"
		}
		return "False"
	case !f.dt.IsFloatingPoint():
		return strconv.FormatInt(int64(v), 10)
	case math.IsNaN(v):
		return "nan"
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	case f.sci:
		return fmt.Sprintf("%.4e", v)
	case f.intMode:
		return strconv.FormatFloat(v, 'f', 0, 64) + "."
	}
	return fmt.Sprintf("%.4f", v)
}

func (f *formatter) pad(v float64) string {
	s := f.format(v)
	return strings.Repeat(" ", f.width-len(s)) + s
}

func writeNested(b *strings.Builder, vals []float64, shape []int64, f *formatter, indent int, summarize bool) {
	b.WriteString("[")
	n := shape[0]
	stride := len(vals) / int(n)
	idx := make([]int64, 0, n)
	for i := int64(0); i < n; i++ {
		if summarize && n > 2*printEdge && i == printEdge {
			idx = append(idx, -1) // the elided middle
			i = n - printEdge
		}
		idx = append(idx, i)
	}
	for k, i := range idx {
		if k > 0 {
			if len(shape) == 1 {
				b.WriteString(", ")
			} else {
				b.WriteString("," + strings.Repeat("\n", len(shape)-1) + strings.Repeat(" ", indent+1))
			}
		}
		if i < 0 {
			b.WriteString("...")
			continue
		}
		if len(shape) == 1 {
			b.WriteString(f.pad(vals[i]))
		} else {
			writeNested(b, vals[int(i)*stride:int(i+1)*stride], shape[1:], f, indent+1, summarize)
		}
	}
	b.WriteString("]")
}
