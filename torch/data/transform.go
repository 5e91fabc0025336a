package data

import (
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/gotrain/gotrain/torch"
)

// scratchPool holds the copies that transforms which move pixels read from.
var scratchPool = sync.Pool{New: func() any { return new([]byte) }}

// Transform changes a sample in place, like a torchvision transform. Random transforms
// draw only from r, which the loader seeds from (seed, epoch, sample index), so an
// augmentation is reproducible and independent of the number of workers. Apply is called
// from several goroutines at once, each with its own r.
type Transform interface {
	Apply(s *Sample, r *rand.Rand) error
}

// TransformFunc adapts a function to Transform.
type TransformFunc func(s *Sample, r *rand.Rand) error

// Apply calls f(s, r).
func (f TransformFunc) Apply(s *Sample, r *rand.Rand) error { return f(s, r) }

// Compose applies transforms in order, like torchvision.transforms.Compose.
func Compose(ts ...Transform) Transform {
	return TransformFunc(func(s *Sample, r *rand.Rand) error {
		for _, t := range ts {
			if err := t.Apply(s, r); err != nil {
				return err
			}
		}
		return nil
	})
}

// fieldOr returns name, or Input when name is empty: transforms act on Input unless told
// otherwise.
func fieldOr(name string) string {
	if name == "" {
		return Input
	}
	return name
}

// imageField returns the [C, H, W] field of s that transform op acts on.
func imageField(s *Sample, name, op string) (*Field, int, int, int, error) {
	f := s.Field(fieldOr(name))
	if f == nil {
		return nil, 0, 0, 0, fmt.Errorf("data: %s: sample has no field %q (it has %v)", op, fieldOr(name), s.Names())
	}
	if len(f.Shape) != 3 {
		return nil, 0, 0, 0, fmt.Errorf("data: %s: field %q has shape %v, not [C, H, W]", op, f.Name, f.Shape)
	}
	return f, int(f.Shape[0]), int(f.Shape[1]), int(f.Shape[2]), nil
}

// Normalize subtracts Mean and divides by Std per channel (the first dimension of a
// [C, H, W] float32 field, Input unless Field names another), computing (x - mean) / std
// in float32 as torchvision.transforms.Normalize does. One value applies to every
// channel.
type Normalize struct {
	Mean, Std []float32
	Field     string
}

// Fashion-MNIST's training-set pixel mean and standard deviation, on the [0, 1] scale.
var (
	FashionMNISTMean = []float32{0.2860}
	FashionMNISTStd  = []float32{0.3530}
)

// ImageNet's per-channel RGB mean and standard deviation, on the [0, 1] scale, which
// torchvision's pretrained models expect.
var (
	ImageNetMean = []float32{0.485, 0.456, 0.406}
	ImageNetStd  = []float32{0.229, 0.224, 0.225}
)

// Apply normalizes the field in place.
func (n Normalize) Apply(s *Sample, _ *rand.Rand) error {
	f := s.Field(fieldOr(n.Field))
	if f == nil {
		return fmt.Errorf("data: Normalize: sample has no field %q (it has %v)", fieldOr(n.Field), s.Names())
	}
	if f.DType != torch.Float32 {
		return fmt.Errorf("data: Normalize: field %q is %v; convert it to float32 first (ToFloat), or normalize on the device (NormalizeImages)", f.Name, f.DType)
	}
	c := 1
	if len(f.Shape) > 0 {
		c = int(f.Shape[0])
	}
	if len(n.Mean) != len(n.Std) || (len(n.Mean) != 1 && len(n.Mean) != c) {
		return fmt.Errorf("data: Normalize: %d means and %d stds for a sample of shape %v", len(n.Mean), len(n.Std), f.Shape)
	}
	in := Values[float32](f)
	plane := len(in) / c
	for ch := range c {
		m, sd := n.Mean[0], n.Std[0]
		if len(n.Mean) > 1 {
			m, sd = n.Mean[ch], n.Std[ch]
		}
		x := in[ch*plane : (ch+1)*plane]
		for i := range x {
			x[i] = (x[i] - m) / sd
		}
	}
	return nil
}

// RandomCrop pads a [C, H, W] field (Input unless Field names another; any dtype) by
// Padding zeros on every side and crops a random Height x Width window, like
// torchvision.transforms.RandomCrop(size, padding).
type RandomCrop struct {
	Height, Width int
	Padding       int
	Field         string
}

// Apply crops the field in place.
func (c RandomCrop) Apply(s *Sample, r *rand.Rand) error {
	f, _, h, w, err := imageField(s, c.Field, "RandomCrop")
	if err != nil {
		return err
	}
	ph, pw := h+2*c.Padding, w+2*c.Padding
	if c.Height > ph || c.Width > pw || c.Height <= 0 || c.Width <= 0 {
		return fmt.Errorf("data: RandomCrop: crop %dx%d does not fit a %dx%d sample padded by %d", c.Height, c.Width, h, w, c.Padding)
	}
	// Offsets of the window in the padded image, then in the original one.
	top := r.IntN(ph-c.Height+1) - c.Padding
	left := r.IntN(pw-c.Width+1) - c.Padding
	cropField(f, top, left, c.Height, c.Width)
	return nil
}

// cropField replaces f ([C, H, W]) by its window of height x width at (top, left), which
// may reach outside the image: pixels there are zero.
func cropField(f *Field, top, left, height, width int) {
	ch, h, w := int(f.Shape[0]), int(f.Shape[1]), int(f.Shape[2])
	es := f.DType.Size()
	buf := scratchPool.Get().(*[]byte)
	src := append((*buf)[:0], f.Data...)
	out := growBytes(f.Data[:0], ch*height*width*es)[:0]
	x0, x1 := max(left, 0), min(left+width, w)
	for k := range ch {
		plane := src[k*h*w*es : (k+1)*h*w*es]
		for y := top; y < top+height; y++ {
			if y < 0 || y >= h || x1 <= x0 {
				out = append(out, make([]byte, width*es)...)
				continue
			}
			row := plane[y*w*es : (y+1)*w*es]
			out = append(out, make([]byte, (x0-left)*es)...)
			out = append(out, row[x0*es:x1*es]...)
			out = append(out, make([]byte, (left+width-x1)*es)...)
		}
	}
	*buf = src
	scratchPool.Put(buf)
	f.Data = out
	f.Shape = []int64{int64(ch), int64(height), int64(width)}
}

// RandomHorizontalFlip mirrors a [..., H, W] field (Input unless Field names another; any
// dtype) left to right with probability P, like
// torchvision.transforms.RandomHorizontalFlip(p).
type RandomHorizontalFlip struct {
	P     float64
	Field string
}

// Apply flips the field in place with probability P.
func (fl RandomHorizontalFlip) Apply(s *Sample, r *rand.Rand) error {
	f := s.Field(fieldOr(fl.Field))
	if f == nil {
		return fmt.Errorf("data: RandomHorizontalFlip: sample has no field %q (it has %v)", fieldOr(fl.Field), s.Names())
	}
	if len(f.Shape) < 2 {
		return fmt.Errorf("data: RandomHorizontalFlip: field %q of shape %v has no width", f.Name, f.Shape)
	}
	if r.Float64() >= fl.P {
		return nil
	}
	w := int(f.Shape[len(f.Shape)-1])
	switch f.DType.Size() {
	case 1:
		flipRows(f.Data, w)
	case 2:
		flipRows(viewAs[uint16](f.Data), w)
	case 4:
		flipRows(viewAs[uint32](f.Data), w)
	default:
		flipRows(viewAs[uint64](f.Data), w)
	}
	return nil
}

func flipRows[T any](v []T, w int) {
	for row := 0; row+w <= len(v); row += w {
		x := v[row : row+w]
		for i, j := 0, w-1; i < j; i, j = i+1, j-1 {
			x[i], x[j] = x[j], x[i]
		}
	}
}
