package data

import (
	"fmt"
	"math/rand/v2"
	"sync"
)

// scratchPool holds the copies that transforms which move pixels read from.
var scratchPool = sync.Pool{New: func() any { return new([]float32) }}

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

// Normalize subtracts Mean and divides by Std per channel (the first dimension of a
// [C, H, W] sample), computing (x - mean) / std in float32 as
// torchvision.transforms.Normalize does. One value applies to every channel.
type Normalize struct {
	Mean, Std []float32
}

// Fashion-MNIST's training-set pixel mean and standard deviation, on the [0, 1] scale.
var (
	FashionMNISTMean = []float32{0.2860}
	FashionMNISTStd  = []float32{0.3530}
)

// Apply normalizes s.Input in place.
func (n Normalize) Apply(s *Sample, _ *rand.Rand) error {
	c := 1
	if len(s.Shape) > 0 {
		c = int(s.Shape[0])
	}
	if len(n.Mean) != len(n.Std) || (len(n.Mean) != 1 && len(n.Mean) != c) {
		return fmt.Errorf("data: Normalize: %d means and %d stds for a sample of shape %v", len(n.Mean), len(n.Std), s.Shape)
	}
	plane := len(s.Input) / c
	for ch := range c {
		m, sd := n.Mean[0], n.Std[0]
		if len(n.Mean) > 1 {
			m, sd = n.Mean[ch], n.Std[ch]
		}
		x := s.Input[ch*plane : (ch+1)*plane]
		for i := range x {
			x[i] = (x[i] - m) / sd
		}
	}
	return nil
}

// RandomCrop pads a [C, H, W] sample by Padding zeros on every side and crops a random
// Height x Width window, like torchvision.transforms.RandomCrop(size, padding).
type RandomCrop struct {
	Height, Width int
	Padding       int
}

// Apply crops s in place.
func (c RandomCrop) Apply(s *Sample, r *rand.Rand) error {
	if len(s.Shape) != 3 {
		return fmt.Errorf("data: RandomCrop: sample shape %v is not [C, H, W]", s.Shape)
	}
	ch, h, w := int(s.Shape[0]), int(s.Shape[1]), int(s.Shape[2])
	ph, pw := h+2*c.Padding, w+2*c.Padding
	if c.Height > ph || c.Width > pw || c.Height <= 0 || c.Width <= 0 {
		return fmt.Errorf("data: RandomCrop: crop %dx%d does not fit a %dx%d sample padded by %d", c.Height, c.Width, h, w, c.Padding)
	}
	// Offsets of the window in the padded image, then in the original one.
	top := r.IntN(ph-c.Height+1) - c.Padding
	left := r.IntN(pw-c.Width+1) - c.Padding
	buf := scratchPool.Get().(*[]float32)
	src := append((*buf)[:0], s.Input...)
	out := s.Input[:0]
	if need := ch * c.Height * c.Width; cap(out) < need {
		out = make([]float32, 0, need)
	}
	for k := range ch {
		plane := src[k*h*w : (k+1)*h*w]
		for y := top; y < top+c.Height; y++ {
			if y < 0 || y >= h {
				out = appendZeros(out, c.Width)
				continue
			}
			row := plane[y*w : (y+1)*w]
			x0, x1 := max(left, 0), min(left+c.Width, w)
			if x1 <= x0 {
				out = appendZeros(out, c.Width)
				continue
			}
			out = appendZeros(out, x0-left)
			out = append(out, row[x0:x1]...)
			out = appendZeros(out, left+c.Width-x1)
		}
	}
	*buf = src
	scratchPool.Put(buf)
	s.Input = out
	s.Shape = []int64{int64(ch), int64(c.Height), int64(c.Width)}
	return nil
}

func appendZeros(s []float32, n int) []float32 {
	for range n {
		s = append(s, 0)
	}
	return s
}

// RandomHorizontalFlip mirrors a [..., H, W] sample left to right with probability P,
// like torchvision.transforms.RandomHorizontalFlip(p).
type RandomHorizontalFlip struct {
	P float64
}

// Apply flips s in place with probability P.
func (f RandomHorizontalFlip) Apply(s *Sample, r *rand.Rand) error {
	if len(s.Shape) < 2 {
		return fmt.Errorf("data: RandomHorizontalFlip: sample shape %v has no width", s.Shape)
	}
	if r.Float64() >= f.P {
		return nil
	}
	w := int(s.Shape[len(s.Shape)-1])
	for row := 0; row+w <= len(s.Input); row += w {
		x := s.Input[row : row+w]
		for i, j := 0, w-1; i < j; i, j = i+1, j-1 {
			x[i], x[j] = x[j], x[i]
		}
	}
	return nil
}
