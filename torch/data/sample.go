package data

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"unsafe"

	"github.com/gotrain/gotrain/torch"
)

// Well-known field names, by the schema they belong to.
//
// Classification and regression: a classification dataset yields Input (float32 or
// uint8) and Label (an int64 scalar), a regression dataset Input and Target (float32),
// and the default training step of package trainer reads exactly these.
const (
	Input  = "input"
	Label  = "label"
	Target = "target"
)

// Causal language modelling: a token window (TokenDataset, NewLMDataset) yields
// LMInputIDs and LMLabels, the names Hugging Face's causal language models take. Other
// tasks name their fields freely ("attention_mask", "image", ...).
const (
	LMInputIDs = "input_ids"
	LMLabels   = "labels"
)

// MaskSuffix names the mask of a padded field: a field "x" declared in
// LoaderOptions.Pad gets a bool field "x_mask", true where the batch holds real data.
const MaskSuffix = "_mask"

// MaskName returns the name of the mask field of a padded field.
func MaskName(field string) string { return field + MaskSuffix }

// Field is one named value of a sample (or of a collated host batch) in Go memory: a
// dtype, a shape and the values' bytes in row-major order and native byte order. Any
// dtype of package torch (and so of package checkpoint) may travel: float32/16,
// bfloat16, float64, int64/32/16/8, uint8, bool.
//
// Shape is read-only: datasets may share one shape slice among samples, and code that
// changes a shape assigns a new slice.
type Field struct {
	Name  string
	DType torch.DType
	Shape []int64
	Data  []byte
	// borrowed marks Data as a dataset's own memory (a BatchReader's view), read but
	// never written: the next Set of the field starts from fresh storage.
	borrowed bool
}

// Numel returns the number of elements that Shape describes.
func (f *Field) Numel() int { return numel(f.Shape) }

func (f *Field) check() error {
	if f.DType.Size() == 0 {
		return fmt.Errorf("field %q has unknown dtype %v", f.Name, f.DType)
	}
	if want := f.Numel() * f.DType.Size(); want != len(f.Data) {
		return fmt.Errorf("field %q: shape %v of %v needs %d bytes, has %d", f.Name, f.Shape, f.DType, want, len(f.Data))
	}
	return nil
}

// Sample is one example: a set of named fields in Go memory. Datasets fill a Sample in
// place with Set (or SetValues / SetScalar) and never call libtorch, so that the
// loader's workers stay off libtorch's thread-local state.
//
// A Sample is reused from one Get to the next: Reset forgets its fields but keeps their
// storage, and Set hands a field's old storage back, so a dataset that writes through
// the slice Set returns allocates nothing in steady state. The loader goes further and
// lends a worker's sample storage inside the batch buffer, so that a decoded sample
// lands where the batch tensor is built from.
type Sample struct {
	// fields[:n] are present; fields[n:cap] are absent ones kept for their storage.
	fields []Field
}

// Reset removes every field, keeping the storage for reuse.
func (s *Sample) Reset() { s.fields = s.fields[:0] }

// Len returns the number of fields.
func (s *Sample) Len() int { return len(s.fields) }

// Fields returns the fields in the order they were set. The slice is the sample's own:
// do not keep it past the next Set or Reset.
func (s *Sample) Fields() []Field { return s.fields }

// Names returns the field names, sorted.
func (s *Sample) Names() []string {
	names := make([]string, len(s.fields))
	for i := range s.fields {
		names[i] = s.fields[i].Name
	}
	slices.Sort(names)
	return names
}

// Field returns the field called name, or nil when the sample has none.
func (s *Sample) Field(name string) *Field {
	if i := slices.IndexFunc(s.fields, func(f Field) bool { return f.Name == name }); i >= 0 {
		return &s.fields[i]
	}
	return nil
}

// MustField returns the field called name and panics, naming the fields the sample has,
// when it has none: a transform configured for a field the dataset does not yield is a
// programming error.
func (s *Sample) MustField(name string) *Field {
	if f := s.Field(name); f != nil {
		return f
	}
	panic(fmt.Sprintf("data: sample has no field %q (it has %s)", name, strings.Join(s.Names(), ", ")))
}

// Has reports whether the sample has a field called name.
func (s *Sample) Has(name string) bool { return s.Field(name) != nil }

// Set makes field name a dtype tensor of the given shape and returns it; its Data has
// the right length and holds whatever the reused storage held, for the caller to
// overwrite. The shape slice is kept, not copied.
func (s *Sample) Set(name string, dtype torch.DType, shape []int64) *Field {
	f := s.slot(name)
	f.DType, f.Shape = dtype, shape
	if f.borrowed {
		f.Data, f.borrowed = nil, false
	}
	f.Data = growBytes(f.Data, numel(shape)*dtype.Size())
	return f
}

// borrow makes field name a view of data, memory the caller keeps and that nothing
// writes through the sample: a BatchReader's consecutive rows, copied once, straight into
// the batch tensor.
func (s *Sample) borrow(name string, dtype torch.DType, shape []int64, data []byte) {
	f := s.slot(name)
	f.DType, f.Shape, f.Data, f.borrowed = dtype, shape, data, true
}

// SetBytes makes field name a dtype tensor of the given shape holding a copy of data.
func (s *Sample) SetBytes(name string, dtype torch.DType, shape []int64, data []byte) error {
	f := s.Set(name, dtype, shape)
	if len(data) != len(f.Data) {
		return fmt.Errorf("data: field %q: shape %v of %v needs %d bytes, got %d", name, shape, dtype, len(f.Data), len(data))
	}
	copy(f.Data, data)
	return nil
}

// Delete removes field name, if present.
func (s *Sample) Delete(name string) {
	for i := range s.fields {
		if s.fields[i].Name == name {
			last := len(s.fields) - 1
			s.fields[i], s.fields[last] = s.fields[last], s.fields[i]
			s.fields = s.fields[:last]
			return
		}
	}
}

// slot returns the present field called name, or makes one present, reusing the storage
// of an absent field of that name (or of any absent field) when there is one.
func (s *Sample) slot(name string) *Field {
	if f := s.Field(name); f != nil {
		return f
	}
	n := len(s.fields)
	spare := s.fields[n:cap(s.fields)]
	pick := slices.IndexFunc(spare, func(f Field) bool { return f.Name == name })
	if pick < 0 && len(spare) > 0 {
		// Prefer a nameless spare: named ones carry storage the loader lent for a field.
		pick = max(slices.IndexFunc(spare, func(f Field) bool { return f.Name == "" }), 0)
	}
	if pick < 0 {
		s.fields = append(s.fields, Field{Name: name})
		return &s.fields[n]
	}
	full := s.fields[:cap(s.fields)]
	full[n], full[n+pick] = full[n+pick], full[n]
	s.fields = full[:n+1]
	s.fields[n].Name = name
	return &s.fields[n]
}

// lend gives the absent field name the storage buf (length 0, spare capacity to write
// into), so that the next Set(name) writes into buf. The loader lends windows of its
// batch buffers this way.
func (s *Sample) lend(name string, buf []byte) {
	full := s.fields[:cap(s.fields)]
	for i := len(s.fields); i < len(full); i++ {
		if full[i].Name == name {
			full[i].Data = buf
			return
		}
	}
	s.fields = append(full, Field{Name: name, Data: buf})[:len(s.fields)]
}

// unlendAll drops the storage of every absent field, so that storage lent inside a batch
// buffer that has gone to the consumer is never written again.
func (s *Sample) unlendAll() {
	full := s.fields[:cap(s.fields)]
	for i := len(s.fields); i < len(full); i++ {
		full[i].Data = nil
	}
}

// growBytes returns b resized to n bytes, reusing its storage when it is large enough.
// New storage is 8-byte aligned (allocated as uint64s), so that typed views of any
// element type are aligned.
func growBytes(b []byte, n int) []byte {
	if n <= cap(b) {
		return b[:n]
	}
	words := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), len(words)*8)[:n]
}

// Elem is the Go element types a field's values can be viewed as: torch's element
// types, plus uint16 for the bits of float16 and bfloat16 fields.
type Elem interface {
	torch.Elem | ~uint16
}

// dtypeFits reports whether Go type T views values of dtype dt.
func dtypeFits[T Elem](dt torch.DType) bool {
	t := reflect.TypeFor[T]()
	if t == reflect.TypeFor[uint16]() {
		return dt == torch.Float16 || dt == torch.BFloat16
	}
	return t == elemTypes[dt]
}

// elemTypes are the Go element types of the dtypes that have one.
var elemTypes = map[torch.DType]reflect.Type{
	torch.Float32: reflect.TypeFor[float32](), torch.Float64: reflect.TypeFor[float64](),
	torch.Int64: reflect.TypeFor[int64](), torch.Int32: reflect.TypeFor[int32](),
	torch.Int16: reflect.TypeFor[int16](), torch.Int8: reflect.TypeFor[int8](),
	torch.Uint8: reflect.TypeFor[uint8](), torch.Bool: reflect.TypeFor[bool](),
}

// Values returns f's values as a []T sharing f's storage. It panics when T does not
// match f's dtype (uint16 views float16 and bfloat16).
func Values[T Elem](f *Field) []T {
	if !dtypeFits[T](f.DType) {
		var zero T
		panic(fmt.Sprintf("data: field %q is %v, not viewable as %T", f.Name, f.DType, zero))
	}
	return viewAs[T](f.Data)
}

// viewAs reinterprets b as a []T. b's storage is 8-byte aligned (growBytes) or comes from
// a slice of T.
func viewAs[T any](b []byte) []T {
	var zero T
	size := int(unsafe.Sizeof(zero))
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/size)
}

// bytesOf reinterprets x as its bytes.
func bytesOf[T any](x []T) []byte {
	var zero T
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), len(x)*int(unsafe.Sizeof(zero)))
}

// SetValues makes field name of s a tensor of T's dtype and the given shape and returns
// its values to fill (storage reused; contents undefined). For float16 and bfloat16 use
// s.Set and Values[uint16].
func SetValues[T torch.Elem](s *Sample, name string, shape ...int64) []T {
	return Values[T](s.Set(name, torch.DTypeOf[T](), shape))
}

// SetScalar makes field name of s a 0-dimensional tensor holding v; a batch of it has
// shape [batch size]. A class label is SetScalar(s, data.Label, int64(class)).
func SetScalar[T torch.Elem](s *Sample, name string, v T) {
	SetValues[T](s, name)[0] = v
}

// Scalar returns the value of a 0-dimensional (or one-element) field of s as T.
func Scalar[T torch.Elem](s *Sample, name string) T {
	v := Values[T](s.MustField(name))
	if len(v) != 1 {
		panic(fmt.Sprintf("data: field %q has shape %v, not one value", name, s.MustField(name).Shape))
	}
	return v[0]
}
