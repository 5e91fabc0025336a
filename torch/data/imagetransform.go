package data

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/gotrain/gotrain/torch"
)

// Image transforms with torchvision's semantics, on a [C, H, W] field (Input unless
// Field names another). uint8 fields are resampled as PIL does (torchvision's transforms
// on the PIL images its ImageFolder yields), bit for bit; float32 fields as torch's
// antialiased interpolate does (torchvision's transforms on tensors), to float32
// rounding.

// Resize resizes an image with antialiased bilinear interpolation, like
// torchvision.transforms.Resize: with Size set, the shorter edge becomes Size and the
// longer keeps the aspect ratio (truncated, as torchvision computes it), capped at
// MaxSize when that is set; otherwise the image becomes Height x Width.
type Resize struct {
	Size          int
	Height, Width int
	MaxSize       int
	Field         string
}

// outputSize is torchvision's _compute_resized_output_size, refusing an output of more
// pixels than a decoded image may have by default (twice DefaultMaxImagePixels).
func (r Resize) outputSize(h, w int) (int, int, error) {
	oh, ow, err := r.torchvisionSize(h, w)
	if err == nil && satMul(int64(oh), int64(ow)) > 2*DefaultMaxImagePixels {
		return 0, 0, fmt.Errorf("data: Resize: an output of %dx%d pixels is more than the %d an image may have (twice DefaultMaxImagePixels)", oh, ow, 2*DefaultMaxImagePixels)
	}
	return oh, ow, err
}

func (r Resize) torchvisionSize(h, w int) (int, int, error) {
	if r.Size <= 0 {
		if r.Height <= 0 || r.Width <= 0 {
			return 0, 0, fmt.Errorf("data: Resize: set Size, or Height and Width, to positive values (got %+v)", r)
		}
		return r.Height, r.Width, nil
	}
	short, long := w, h
	if w > h {
		short, long = h, w
	}
	ns, nl := r.Size, int(float64(r.Size)*float64(long)/float64(short))
	if r.MaxSize > 0 {
		if r.MaxSize <= r.Size {
			return 0, 0, fmt.Errorf("data: Resize: MaxSize %d must be greater than Size %d", r.MaxSize, r.Size)
		}
		if nl > r.MaxSize {
			ns, nl = int(float64(r.MaxSize)*float64(ns)/float64(nl)), r.MaxSize
		}
	}
	if w <= h {
		return nl, ns, nil
	}
	return ns, nl, nil
}

// Apply resizes the field in place.
func (r Resize) Apply(s *Sample, _ *rand.Rand) error {
	f, _, h, w, err := imageField(s, r.Field, "Resize")
	if err != nil {
		return err
	}
	oh, ow, err := r.outputSize(h, w)
	if err != nil {
		return err
	}
	return resizeField(f, oh, ow)
}

// resizeField resamples f ([C, H, W], uint8 or float32) to oh x ow in place.
func resizeField(f *Field, oh, ow int) error {
	c, h, w := int(f.Shape[0]), int(f.Shape[1]), int(f.Shape[2])
	if oh == h && ow == w {
		return nil
	}
	buf := scratchPool.Get().(*[]byte)
	defer scratchPool.Put(buf)
	src := append((*buf)[:0], f.Data...)
	*buf = src
	switch f.DType {
	case torch.Uint8:
		f.Data = growBytes(f.Data[:0], c*oh*ow)
		resizeUint8(src, c, h, w, oh, ow, f.Data)
	case torch.Float32:
		f.Data = growBytes(f.Data[:0], 4*c*oh*ow)
		resizeFloat32(viewAs[float32](src), c, h, w, oh, ow, viewAs[float32](f.Data))
	default:
		return fmt.Errorf("data: resize: field %q is %v; images are resized as uint8 or float32", f.Name, f.DType)
	}
	f.Shape = []int64{int64(c), int64(oh), int64(ow)}
	return nil
}

// CenterCrop crops the central Height x Width window, like
// torchvision.transforms.CenterCrop: the offsets are round((H - Height) / 2) (Python's
// round, half to even), and an image smaller than the window is padded with zeros
// first, (Height - H) // 2 rows on top.
type CenterCrop struct {
	Height, Width int
	Field         string
}

// Apply crops the field in place.
func (c CenterCrop) Apply(s *Sample, _ *rand.Rand) error {
	f, _, h, w, err := imageField(s, c.Field, "CenterCrop")
	if err != nil {
		return err
	}
	if c.Height <= 0 || c.Width <= 0 {
		return fmt.Errorf("data: CenterCrop: size %dx%d is not positive", c.Height, c.Width)
	}
	cropField(f, centerOffset(h, c.Height), centerOffset(w, c.Width), c.Height, c.Width)
	return nil
}

// centerOffset is where a crop of size out starts in an axis of size in: torchvision's
// int(round((in - out) / 2)), or minus the padding (out - in) // 2 when out > in.
func centerOffset(in, out int) int {
	if out > in {
		return -((out - in) / 2)
	}
	return int(math.RoundToEven(float64(in-out) / 2))
}

// RandomResizedCrop crops a random window and resizes it to Height x Width with
// antialiased bilinear interpolation, like torchvision.transforms.RandomResizedCrop:
// the window's area is a uniform fraction in Scale of the image's (default 0.08 to 1)
// and its aspect ratio log-uniform in Ratio (default 3/4 to 4/3); after ten draws that
// do not fit, the whole image is cropped to the nearest ratio in range, centered. The
// draws come from the loader's (seed, epoch, index) generator, not torch's.
type RandomResizedCrop struct {
	Height, Width int
	Scale, Ratio  [2]float64
	Field         string
}

// Apply crops and resizes the field in place.
func (c RandomResizedCrop) Apply(s *Sample, r *rand.Rand) error {
	f, _, h, w, err := imageField(s, c.Field, "RandomResizedCrop")
	if err != nil {
		return err
	}
	if c.Height <= 0 || c.Width <= 0 {
		return fmt.Errorf("data: RandomResizedCrop: size %dx%d is not positive", c.Height, c.Width)
	}
	top, left, ch, cw := c.params(h, w, r)
	cropField(f, top, left, ch, cw)
	return resizeField(f, c.Height, c.Width)
}

// params is torchvision's RandomResizedCrop.get_params: the window (top, left, height,
// width).
func (c RandomResizedCrop) params(h, w int, r *rand.Rand) (int, int, int, int) {
	scale, ratio := c.Scale, c.Ratio
	if scale == [2]float64{} {
		scale = [2]float64{0.08, 1}
	}
	if ratio == [2]float64{} {
		ratio = [2]float64{3.0 / 4, 4.0 / 3}
	}
	area := float64(h * w)
	logLo, logHi := math.Log(ratio[0]), math.Log(ratio[1])
	for range 10 {
		target := area * (scale[0] + (scale[1]-scale[0])*r.Float64())
		aspect := math.Exp(logLo + (logHi-logLo)*r.Float64())
		cw := int(math.RoundToEven(math.Sqrt(target * aspect)))
		ch := int(math.RoundToEven(math.Sqrt(target / aspect)))
		if 0 < cw && cw <= w && 0 < ch && ch <= h {
			return r.IntN(h - ch + 1), r.IntN(w - cw + 1), ch, cw
		}
	}
	inRatio := float64(w) / float64(h)
	cw, ch := w, h
	switch {
	case inRatio < min(ratio[0], ratio[1]):
		ch = int(math.RoundToEven(float64(cw) / min(ratio[0], ratio[1])))
	case inRatio > max(ratio[0], ratio[1]):
		cw = int(math.RoundToEven(float64(ch) * max(ratio[0], ratio[1])))
	}
	return (h - ch) / 2, (w - cw) / 2, ch, cw
}

// ConvertImageDtype converts an image field between uint8 and float32 as
// torchvision.transforms.ConvertImageDtype does: uint8 to float32 is x / 255, float32 to
// uint8 is trunc(x * (256 - 1e-3)).
type ConvertImageDtype struct {
	DType torch.DType
	Field string
}

// unitLevels[v] is float32(v) / 255, as torchvision's ToTensor computes it, looked up
// instead of divided.
var unitLevels = func() (t [256]float32) {
	for v := range t {
		t[v] = float32(v) / 255
	}
	return t
}()

// ToTensor is torchvision's ToTensor for the uint8 [C, H, W] images of ImageFolder:
// float32 values x / 255.
func ToTensor() ConvertImageDtype { return ConvertImageDtype{DType: torch.Float32} }

// Apply converts the field in place.
func (c ConvertImageDtype) Apply(s *Sample, _ *rand.Rand) error {
	f := s.Field(fieldOr(c.Field))
	if f == nil {
		return fmt.Errorf("data: ConvertImageDtype: sample has no field %q (it has %v)", fieldOr(c.Field), s.Names())
	}
	switch {
	case f.DType == c.DType:
		return nil
	case f.DType == torch.Uint8 && c.DType == torch.Float32:
		n := len(f.Data)
		src := f.Data
		f.DType = torch.Float32
		f.Data = growBytes(f.Data[:0], 4*n)
		out := viewAs[float32](f.Data)
		// From the end when the values stay in the same storage: value i is written
		// over bytes 4i..4i+3, which hold only values already converted.
		for i := n - 1; i >= 0; i-- {
			out[i] = unitLevels[src[i]]
		}
	case f.DType == torch.Float32 && c.DType == torch.Uint8:
		in := Values[float32](f)
		for i, v := range in {
			f.Data[i] = uint8(v * (255 + 1 - 1e-3))
		}
		f.Data = f.Data[:len(in)]
		f.DType = torch.Uint8
	default:
		return fmt.Errorf("data: ConvertImageDtype: %v to %v is not supported (uint8 <-> float32)", f.DType, c.DType)
	}
	return nil
}
