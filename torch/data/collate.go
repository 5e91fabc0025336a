package data

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/gotrain/gotrain/torch"
)

// CollateFunc builds a batch from samples, like DataLoader's collate_fn, in Go memory:
// it sets the fields of batch (each with the batch dimension first) from the samples,
// with batch.Set reusing the storage of the previous batch it built. It runs in the
// loader's workers and must not call libtorch. The samples are the loader's and are
// reused after it returns. DefaultCollate is the loader's own, for functions that add
// or change a field and collate the rest as usual.
type CollateFunc func(samples []*Sample, batch *Sample) error

// DefaultCollate stacks every field of samples along a new first dimension, as
// PyTorch's default_collate does for tensors. All samples must have the same fields, and
// a field the same dtype and shape in every sample, except the fields named in pad:
// those are padded along their first dimension to the longest in the batch with the
// given value, and a bool field MaskName(name) of shape [batch, longest] marks the real
// entries (Hugging Face's padding collators with their attention mask).
//
// The loader's default path collates the same way without this function, decoding each
// sample straight into the batch buffer; DefaultCollate is for CollateFuncs to call.
func DefaultCollate(samples []*Sample, batch *Sample, pad map[string]float64) error {
	var hb hostBatch
	for _, s := range samples {
		if err := hb.add(s, len(samples), pad); err != nil {
			return err
		}
	}
	hb.finish()
	batch.Reset()
	for _, f := range hb.out.fields {
		if err := batch.SetBytes(f.Name, f.DType, f.Shape, f.Data); err != nil {
			return err
		}
	}
	return nil
}

// hostField is one field of a batch being collated.
type hostField struct {
	name  string
	dtype torch.DType
	shape []int64 // of one sample; for a padded field, of the first sample
	count int     // samples added in this batch
	data  []byte  // [count, shape...] when not padded; 8-byte aligned storage
	// padded fields: samples are appended to data unpadded, their first dimensions kept
	// in lens; finish pads them into padded and builds the mask.
	padded   bool
	padValue float64
	lens     []int64
	out      []byte
	mask     []bool
	fullDims []int64
}

// hostBatch is a collated batch in Go memory. Buffers are pooled by the Loader: a
// worker fills one, the consumer builds tensors from it and hands it back. Its fields
// are kept from one use to the next, so their storage is reused and lent to samples.
type hostBatch struct {
	index   int
	indices []int // a window of the epoch's order; never written
	n       int   // samples added
	fields  []hostField
	out     Sample // the collated fields, each [n, ...]
	err     error
}

func (hb *hostBatch) reset() {
	hb.n = 0
	for i := range hb.fields {
		hb.fields[i].count = 0
		hb.fields[i].data = hb.fields[i].data[:0]
		hb.fields[i].lens = hb.fields[i].lens[:0]
	}
	hb.out.Reset()
}

// lendTo lends s the unused tail of every field's buffer that the batch (or its previous
// use) has, so that a dataset writing into the slice Sample.Set returns decodes straight
// into the batch.
func (hb *hostBatch) lendTo(s *Sample) {
	for i := range hb.fields {
		f := &hb.fields[i]
		if f.count == hb.n {
			n := len(f.data)
			s.lend(f.name, f.data[n:n:cap(f.data)])
		}
	}
}

func (hb *hostBatch) field(name string) *hostField {
	for i := range hb.fields {
		if hb.fields[i].name == name {
			return &hb.fields[i]
		}
	}
	hb.fields = append(hb.fields, hostField{name: name})
	return &hb.fields[len(hb.fields)-1]
}

// add appends sample s to the batch (of batchSize samples in all), unless the dataset
// already wrote a field in place.
func (hb *hostBatch) add(s *Sample, batchSize int, pad map[string]float64) error {
	if s.Len() == 0 {
		return errors.New("sample has no fields")
	}
	if hb.n == 0 {
		hb.reset()
	}
	for k := range s.fields {
		f := &s.fields[k]
		if err := f.check(); err != nil {
			return err
		}
		hf := hb.field(f.Name)
		if hf.count != hb.n {
			return fmt.Errorf("field %q is missing from %d earlier samples of the batch; collating needs samples with the same fields", f.Name, hb.n-hf.count)
		}
		if err := hf.add(f, batchSize, pad); err != nil {
			return err
		}
	}
	hb.n++
	for i := range hb.fields {
		if hf := &hb.fields[i]; hf.count > 0 && hf.count != hb.n {
			return fmt.Errorf("sample lacks field %q that earlier samples of the batch have (it has %v)", hf.name, s.Names())
		}
	}
	return nil
}

func (hf *hostField) add(f *Field, batchSize int, pad map[string]float64) error {
	if hf.count == 0 {
		hf.dtype, hf.shape = f.DType, f.Shape
		hf.padValue, hf.padded = pad[f.Name]
		if hf.padded && len(f.Shape) == 0 {
			return fmt.Errorf("field %q is declared padded but is a scalar; padding runs along a field's first dimension", f.Name)
		}
	} else {
		if f.DType != hf.dtype {
			return fmt.Errorf("field %q is %v, but %v in an earlier sample of the batch", f.Name, f.DType, hf.dtype)
		}
		if hf.padded {
			if len(f.Shape) != len(hf.shape) || !slices.Equal(f.Shape[1:], hf.shape[1:]) {
				return fmt.Errorf("field %q has shape %v, earlier samples %v; padding runs along the first dimension only", f.Name, f.Shape, hf.shape)
			}
		} else if !slices.Equal(f.Shape, hf.shape) {
			return fmt.Errorf("field %q has shape %v, but %v in an earlier sample of the batch; declare it in LoaderOptions.Pad to pad it, or collate with LoaderOptions.Collate", f.Name, f.Shape, hf.shape)
		}
	}
	if hf.padded {
		hf.lens = append(hf.lens, f.Shape[0])
	}
	n := len(hf.data)
	inPlace := len(f.Data) > 0 && n+len(f.Data) <= cap(hf.data) && &hf.data[:n+1][n] == &f.Data[0]
	switch {
	case inPlace:
		hf.data = hf.data[:n+len(f.Data)]
	case cap(hf.data) < n+len(f.Data):
		want := max(batchSize*len(f.Data), 2*cap(hf.data), n+len(f.Data))
		grown := growBytes(nil, want)[:n]
		copy(grown, hf.data)
		hf.data = append(grown, f.Data...)
	default:
		hf.data = append(hf.data, f.Data...)
	}
	hf.count++
	return nil
}

// finish sets hb.out to the collated fields, padding the padded ones.
func (hb *hostBatch) finish() {
	hb.out.Reset()
	n := int64(hb.n)
	for i := range hb.fields {
		hf := &hb.fields[i]
		if hf.count == 0 {
			continue
		}
		f := hb.out.slot(hf.name)
		f.DType = hf.dtype
		if !hf.padded {
			f.Shape = append(append(hf.fullDims[:0], n), hf.shape...)
			hf.fullDims = f.Shape
			f.Data = hf.data
			continue
		}
		longest := slices.Max(hf.lens)
		f.Shape = append(append(hf.fullDims[:0], n, longest), hf.shape[1:]...)
		hf.fullDims = f.Shape
		row := numel(hf.shape[1:]) * hf.dtype.Size() // bytes per step of the first dimension
		hf.out = growBytes(hf.out, int(n*longest)*row)
		fillValue(hf.out, hf.dtype, hf.padValue)
		hf.mask = slices.Grow(hf.mask[:0], int(n*longest))[:n*longest]
		clear(hf.mask)
		src := hf.data
		for j, l := range hf.lens {
			k := int(l) * row
			copy(hf.out[j*int(longest)*row:], src[:k])
			src = src[k:]
			for t := range l {
				hf.mask[int64(j)*longest+t] = true
			}
		}
		f.Data = hf.out
		m := hb.out.slot(MaskName(hf.name))
		m.DType, m.Shape, m.Data = torch.Bool, []int64{n, longest}, bytesOf(hf.mask)
	}
}

// fillValue writes v, converted to dtype dt, into every element of dst.
func fillValue(dst []byte, dt torch.DType, v float64) {
	size := dt.Size()
	if len(dst) == 0 {
		return
	}
	var one [8]byte
	switch dt {
	case torch.Float32:
		viewAs[float32](one[:4])[0] = float32(v)
	case torch.Float64:
		viewAs[float64](one[:8])[0] = v
	case torch.Float16:
		viewAs[uint16](one[:2])[0] = float16Bits(float32(v))
	case torch.BFloat16:
		viewAs[uint16](one[:2])[0] = bfloat16Bits(float32(v))
	case torch.Int64:
		viewAs[int64](one[:8])[0] = int64(v)
	case torch.Int32:
		viewAs[int32](one[:4])[0] = int32(v)
	case torch.Int16:
		viewAs[int16](one[:2])[0] = int16(v)
	case torch.Int8:
		one[0] = byte(int8(v))
	case torch.Uint8:
		one[0] = byte(v)
	case torch.Bool:
		if v != 0 {
			one[0] = 1
		}
	}
	copy(dst, one[:size])
	for k := size; k < len(dst); k *= 2 {
		copy(dst[k:], dst[:k])
	}
}

// bfloat16Bits rounds f to the nearest bfloat16 (ties to even), as torch's conversion does.
func bfloat16Bits(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f {
		return 0x7fc0
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// float16Bits rounds f to the nearest IEEE half (ties to even).
func float16Bits(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23&0xff) - 127 + 15
	mant := b & 0x7fffff
	switch {
	case f != f:
		return sign | 0x7e00
	case exp >= 31:
		return sign | 0x7c00
	case exp <= 0:
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint(14 - exp)
		half := uint32(1) << (shift - 1)
		r := mant >> shift
		if rem := mant & (1<<shift - 1); rem > half || rem == half && r&1 == 1 {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(exp)<<10 | mant>>13
	if rem := mant & 0x1fff; rem > 0x1000 || rem == 0x1000 && r&1 == 1 {
		r++
	}
	return sign | uint16(r)
}

// float16ToFloat32 widens an IEEE half exactly.
func float16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch exp {
	case 0:
		// Zero or subnormal: mant * 2^-24.
		v := float32(mant) / (1 << 24)
		return math.Float32frombits(math.Float32bits(v) | sign)
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}
