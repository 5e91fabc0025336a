package checkpoint

import (
	"encoding/binary"
	"fmt"
	"iter"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// DType is a tensor element type. The names (String) are torch's: "float32", "bfloat16".
type DType uint8

// The element types a checkpoint tensor can have.
const (
	Float32 DType = iota + 1
	Float64
	Float16
	BFloat16
	Int64
	Int32
	Int16
	Int8
	Uint8
	Bool
	// Added in torch 2.1-2.3. torch.save writes the ones without a legacy storage class
	// (all but the complex types) with _rebuild_tensor_v3 over an UntypedStorage.
	Uint16
	Uint32
	Uint64
	Complex64
	Complex128
	Float8E4M3FN
	Float8E5M2

	lastDType = Float8E5M2
)

type dtypeInfo struct {
	name    string // torch dtype name
	storage string // legacy storage class in module torch
	st      string // safetensors dtype name
	size    int
}

var dtypes = [...]dtypeInfo{
	Float32:  {"float32", "FloatStorage", "F32", 4},
	Float64:  {"float64", "DoubleStorage", "F64", 8},
	Float16:  {"float16", "HalfStorage", "F16", 2},
	BFloat16: {"bfloat16", "BFloat16Storage", "BF16", 2},
	Int64:    {"int64", "LongStorage", "I64", 8},
	Int32:    {"int32", "IntStorage", "I32", 4},
	Int16:    {"int16", "ShortStorage", "I16", 2},
	Int8:     {"int8", "CharStorage", "I8", 1},
	Uint8:    {"uint8", "ByteStorage", "U8", 1},
	Bool:     {"bool", "BoolStorage", "BOOL", 1},
	// No legacy storage class: written with _rebuild_tensor_v3 (see hasStorageClass).
	Uint16:       {"uint16", "", "U16", 2},
	Uint32:       {"uint32", "", "U32", 4},
	Uint64:       {"uint64", "", "U64", 8},
	Complex64:    {"complex64", "ComplexFloatStorage", "", 8},
	Complex128:   {"complex128", "ComplexDoubleStorage", "", 16},
	Float8E4M3FN: {"float8_e4m3fn", "", "F8_E4M3", 1},
	Float8E5M2:   {"float8_e5m2", "", "F8_E5M2", 1},
}

func (d DType) valid() bool { return d >= Float32 && d <= lastDType }

// hasStorageClass reports whether torch pickles the dtype's storage as a legacy typed
// storage (torch.FloatStorage ...) rebuilt by _rebuild_tensor_v2.
func (d DType) hasStorageClass() bool { return dtypes[d].storage != "" }

// isComplex reports whether an element is a (real, imaginary) pair.
func (d DType) isComplex() bool { return d == Complex64 || d == Complex128 }

// wordSize is the size of the scalars byte order applies to (a complex number's parts).
func (d DType) wordSize() int {
	if d.isComplex() {
		return d.ElemSize() / 2
	}
	return d.ElemSize()
}

// String returns torch's name for the dtype, without the "torch." prefix.
func (d DType) String() string {
	if !d.valid() {
		return "DType(" + strconv.Itoa(int(d)) + ")"
	}
	return dtypes[d].name
}

// ElemSize returns the size of one element in bytes (0 for an invalid DType).
func (d DType) ElemSize() int {
	if !d.valid() {
		return 0
	}
	return dtypes[d].size
}

// ParseDType returns the DType named name ("float32", "torch.float32", or a torch alias
// such as "float", "half", "long").
func ParseDType(name string) (DType, error) {
	name = strings.TrimPrefix(name, "torch.")
	switch name {
	case "float":
		return Float32, nil
	case "double":
		return Float64, nil
	case "half":
		return Float16, nil
	case "long":
		return Int64, nil
	case "int":
		return Int32, nil
	case "short":
		return Int16, nil
	case "cfloat":
		return Complex64, nil
	case "cdouble":
		return Complex128, nil
	}
	for d := Float32; d <= lastDType; d++ {
		if dtypes[d].name == name {
			return d, nil
		}
	}
	return 0, fmt.Errorf("checkpoint: unknown dtype %q", name)
}

// Storage is a flat buffer of elements, the unit torch.save writes as one data/<key>
// record. Tensors that share a Storage are views of each other.
type Storage struct {
	DType DType
	// Data holds the elements in little-endian byte order. When writing it may be a
	// slice over foreign memory: the writer does not keep it after Write returns.
	Data []byte
	// Key is the record name the storage was read from ("0", "1", ...). Writers assign
	// their own keys and ignore it.
	Key string

	// untyped marks a storage read as torch.storage.UntypedStorage (bytes) whose dtype
	// the first _rebuild_tensor_v3 over it sets.
	untyped bool
}

// Numel returns the number of elements in the storage.
func (s *Storage) Numel() int64 {
	if s.DType.ElemSize() == 0 {
		return 0
	}
	return int64(len(s.Data) / s.DType.ElemSize())
}

// Tensor is a strided view into a Storage, as torch._utils._rebuild_tensor_v2 describes it.
type Tensor struct {
	DType DType
	// Shape and Strides are in elements; both are empty for a 0-dim tensor.
	Shape, Strides []int64
	// Offset is the storage offset in elements.
	Offset       int64
	Storage      *Storage
	RequiresGrad bool
}

// NewTensor returns a contiguous tensor of the given dtype and shape over data (the
// elements in row-major, little-endian order; it is not copied). It panics if
// len(data) does not match the shape, as constructing it wrongly is a programming error.
func NewTensor(dtype DType, shape []int64, data []byte) *Tensor {
	if !dtype.valid() {
		panic("checkpoint.NewTensor: invalid dtype " + dtype.String())
	}
	n := int64(1)
	for _, s := range shape {
		if s < 0 {
			panic(fmt.Sprintf("checkpoint.NewTensor: negative dimension in shape %v", shape))
		}
		n *= s
	}
	if n*int64(dtype.ElemSize()) != int64(len(data)) {
		panic(fmt.Sprintf("checkpoint.NewTensor: %d bytes for a %v tensor of shape %v (want %d)",
			len(data), dtype, shape, n*int64(dtype.ElemSize())))
	}
	shape = append([]int64{}, shape...)
	return &Tensor{
		DType:   dtype,
		Shape:   shape,
		Strides: ContiguousStrides(shape),
		Storage: &Storage{DType: dtype, Data: data},
	}
}

// ContiguousStrides returns the row-major strides of shape.
func ContiguousStrides(shape []int64) []int64 {
	st := make([]int64, len(shape))
	acc := int64(1)
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = acc
		if shape[i] > 1 {
			acc *= shape[i]
		}
	}
	return st
}

// Numel returns the number of elements of the tensor (1 for a 0-dim tensor).
func (t *Tensor) Numel() int64 {
	n := int64(1)
	for _, s := range t.Shape {
		n *= s
	}
	return n
}

// IsContiguous reports whether the tensor's elements lie in row-major order without
// gaps, so that Bytes can return a slice of the storage without copying.
func (t *Tensor) IsContiguous() bool {
	if t.Numel() == 0 {
		return true
	}
	want := int64(1)
	for i := len(t.Shape) - 1; i >= 0; i-- {
		if t.Shape[i] != 1 && t.Strides[i] != want {
			return false
		}
		want *= t.Shape[i]
	}
	return true
}

// check verifies that the tensor's view lies within its storage.
func (t *Tensor) check() error {
	if !t.DType.valid() {
		return fmt.Errorf("invalid dtype %v", t.DType)
	}
	if t.Storage == nil {
		return fmt.Errorf("tensor has no storage")
	}
	if t.Storage.DType != t.DType {
		return fmt.Errorf("tensor dtype %v differs from its storage's %v", t.DType, t.Storage.DType)
	}
	if len(t.Storage.Data)%t.DType.ElemSize() != 0 {
		return fmt.Errorf("storage of %d bytes is not a whole number of %v elements", len(t.Storage.Data), t.DType)
	}
	if len(t.Strides) != len(t.Shape) {
		return fmt.Errorf("shape %v and strides %v differ in length", t.Shape, t.Strides)
	}
	if t.Offset < 0 {
		return fmt.Errorf("negative storage offset %d", t.Offset)
	}
	const limit = math.MaxInt64 / 2
	numel, last := int64(1), t.Offset
	for i, s := range t.Shape {
		st := t.Strides[i]
		if s < 0 || st < 0 || s > limit || st > limit {
			return fmt.Errorf("invalid shape %v or strides %v", t.Shape, t.Strides)
		}
		if s == 0 {
			numel = 0
			continue
		}
		if numel != 0 && s > limit/numel {
			return fmt.Errorf("shape %v is too large", t.Shape)
		}
		numel *= s
		if st != 0 && (s-1) > (limit-last)/st {
			return fmt.Errorf("strides %v reach past any storage", t.Strides)
		}
		last += (s - 1) * st
	}
	if numel > 0 && last >= t.Storage.Numel() {
		return fmt.Errorf("tensor of shape %v, strides %v, offset %d needs %d elements; storage has %d",
			t.Shape, t.Strides, t.Offset, last+1, t.Storage.Numel())
	}
	return nil
}

// Bytes returns the tensor's elements in row-major, little-endian order. For a
// contiguous tensor it is a slice of the storage (not a copy); otherwise a new buffer.
func (t *Tensor) Bytes() []byte {
	es := int64(t.DType.ElemSize())
	n := t.Numel()
	if n == 0 {
		return []byte{}
	}
	if t.IsContiguous() {
		return t.Storage.Data[t.Offset*es : (t.Offset+n)*es]
	}
	out := make([]byte, 0, n*es)
	idx := make([]int64, len(t.Shape))
	for {
		off := t.Offset
		for i, v := range idx {
			off += v * t.Strides[i]
		}
		out = append(out, t.Storage.Data[off*es:(off+1)*es]...)
		i := len(idx) - 1
		for ; i >= 0; i-- {
			idx[i]++
			if idx[i] < t.Shape[i] {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			return out
		}
	}
}

// Float64s returns the tensor's elements in row-major order converted to float64
// (bool as 0 or 1, complex as the real part; see Complex128s). Conversion is exact for
// every dtype except int64 and uint64 beyond 2^53.
func (t *Tensor) Float64s() []float64 {
	b := t.Bytes()
	es := t.DType.ElemSize()
	out := make([]float64, len(b)/es)
	for i := range out {
		out[i] = decodeElem(t.DType, b[i*es:])
	}
	return out
}

// Int64s returns the tensor's elements in row-major order converted to int64 (floats
// truncated toward zero, bool as 0 or 1). It is exact for every integer dtype.
func (t *Tensor) Int64s() []int64 {
	b := t.Bytes()
	es := t.DType.ElemSize()
	out := make([]int64, len(b)/es)
	for i := range out {
		if t.DType == Int64 {
			out[i] = int64(binary.LittleEndian.Uint64(b[i*es:]))
		} else {
			out[i] = int64(decodeElem(t.DType, b[i*es:]))
		}
	}
	return out
}

func decodeElem(d DType, b []byte) float64 {
	switch d {
	case Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	case Float64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	case Float16:
		return float64(halfToFloat32(binary.LittleEndian.Uint16(b)))
	case BFloat16:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
	case Int64:
		return float64(int64(binary.LittleEndian.Uint64(b)))
	case Int32:
		return float64(int32(binary.LittleEndian.Uint32(b)))
	case Int16:
		return float64(int16(binary.LittleEndian.Uint16(b)))
	case Int8:
		return float64(int8(b[0]))
	case Uint8:
		return float64(b[0])
	case Bool:
		if b[0] != 0 {
			return 1
		}
	case Uint16:
		return float64(binary.LittleEndian.Uint16(b))
	case Uint32:
		return float64(binary.LittleEndian.Uint32(b))
	case Uint64:
		return float64(binary.LittleEndian.Uint64(b))
	case Complex64: // the real part
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	case Complex128:
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	case Float8E4M3FN:
		return float8ToFloat64(b[0], 3, 7, true)
	case Float8E5M2:
		return float8ToFloat64(b[0], 2, 15, false)
	}
	return 0
}

// float8ToFloat64 decodes an 8-bit float with mbits mantissa bits and exponent bias
// bias. fn is the "finite" variant (e4m3fn): no infinities, and NaN only at S.1111.111;
// otherwise (e5m2) the IEEE rules apply: an all-ones exponent is Inf or NaN.
func float8ToFloat64(v byte, mbits, bias int, fn bool) float64 {
	ebits := 7 - mbits
	sign := 1.0
	if v&0x80 != 0 {
		sign = -1
	}
	exp := int(v>>mbits) & (1<<ebits - 1)
	mant := int(v) & (1<<mbits - 1)
	emax := 1<<ebits - 1
	switch {
	case fn && exp == emax && mant == 1<<mbits-1:
		return math.NaN()
	case !fn && exp == emax && mant == 0:
		return sign * math.Inf(1)
	case !fn && exp == emax:
		return math.NaN()
	case exp == 0: // subnormal
		return sign * math.Ldexp(float64(mant), 1-bias-mbits)
	}
	return sign * math.Ldexp(float64(1<<mbits+mant), exp-bias-mbits)
}

// Complex128s returns a complex tensor's elements in row-major order (real tensors'
// as complex numbers with a zero imaginary part).
func (t *Tensor) Complex128s() []complex128 {
	if !t.DType.isComplex() {
		re := t.Float64s()
		out := make([]complex128, len(re))
		for i, x := range re {
			out[i] = complex(x, 0)
		}
		return out
	}
	b := t.Bytes()
	es := t.DType.ElemSize()
	out := make([]complex128, len(b)/es)
	for i := range out {
		e := b[i*es:]
		if t.DType == Complex64 {
			out[i] = complex(float64(math.Float32frombits(binary.LittleEndian.Uint32(e))), float64(math.Float32frombits(binary.LittleEndian.Uint32(e[4:]))))
		} else {
			out[i] = complex(math.Float64frombits(binary.LittleEndian.Uint64(e)), math.Float64frombits(binary.LittleEndian.Uint64(e[8:])))
		}
	}
	return out
}

func halfToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal half: normalise.
	e := uint32(113)
	for mant&0x400 == 0 {
		mant <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
}

// String describes the tensor like ptinspect prints it: "tensor(float32, [2 3])".
func (t *Tensor) String() string {
	return fmt.Sprintf("tensor(%v, %v)", t.DType, t.Shape)
}

// Tuple is a Python tuple.
type Tuple []any

// DictKind says which Python dict type a Dict is.
type DictKind uint8

const (
	// PlainDict is a Python dict.
	PlainDict DictKind = iota
	// OrderedDict is a collections.OrderedDict, as model.state_dict() returns; Python's
	// load_state_dict expects one.
	OrderedDict
)

// Dict is an insertion-ordered Python dict (or OrderedDict, see Kind). Keys are string,
// int64 (Go ints of any size are stored as int64), *big.Int, bool, float64, nil, or a
// Tuple of those. The zero value is an empty plain dict ready to use.
type Dict struct {
	Kind DictKind
	// Attrs holds the instance attributes pickled with an OrderedDict (the BUILD
	// state), such as state_dict()'s "_metadata". Nil when there are none.
	Attrs *Dict

	keys  []any
	vals  []any
	index map[string]int
}

// NewDict returns an empty plain dict.
func NewDict() *Dict { return &Dict{} }

// NewOrderedDict returns an empty collections.OrderedDict.
func NewOrderedDict() *Dict { return &Dict{Kind: OrderedDict} }

// normKey converts a Go key to its canonical form and a string that identifies it.
func normKey(k any) (any, string, error) {
	switch v := k.(type) {
	case string:
		return v, "s" + v, nil
	case int:
		return int64(v), "i" + strconv.FormatInt(int64(v), 10), nil
	case int64:
		return v, "i" + strconv.FormatInt(v, 10), nil
	case int32:
		return int64(v), "i" + strconv.FormatInt(int64(v), 10), nil
	case *big.Int:
		if v.IsInt64() {
			return v.Int64(), "i" + v.String(), nil
		}
		return v, "i" + v.String(), nil
	case bool:
		if v {
			return v, "b1", nil
		}
		return v, "b0", nil
	case float64:
		return v, "f" + strconv.FormatUint(math.Float64bits(v), 16), nil
	case nil:
		return nil, "n", nil
	case Tuple:
		var sb strings.Builder
		out := make(Tuple, len(v))
		sb.WriteString("t(")
		for i, e := range v {
			ne, ks, err := normKey(e)
			if err != nil {
				return nil, "", err
			}
			out[i] = ne
			sb.WriteString(strconv.Itoa(len(ks)))
			sb.WriteByte(':')
			sb.WriteString(ks)
		}
		sb.WriteByte(')')
		return out, sb.String(), nil
	}
	return nil, "", fmt.Errorf("checkpoint: unhashable dict key of type %T", k)
}

// Set sets d[key] = v, keeping the key's first insertion position. It panics if key is
// not one of the key types listed on Dict.
func (d *Dict) Set(key, v any) {
	if err := d.set(key, v); err != nil {
		panic(err)
	}
}

func (d *Dict) set(key, v any) error {
	nk, ks, err := normKey(key)
	if err != nil {
		return err
	}
	if d.index == nil {
		d.index = make(map[string]int)
	}
	if i, ok := d.index[ks]; ok {
		d.vals[i] = v
		return nil
	}
	d.index[ks] = len(d.keys)
	d.keys = append(d.keys, nk)
	d.vals = append(d.vals, v)
	return nil
}

// Get returns d[key] and whether the key is present.
func (d *Dict) Get(key any) (any, bool) {
	if d == nil || d.index == nil {
		return nil, false
	}
	_, ks, err := normKey(key)
	if err != nil {
		return nil, false
	}
	i, ok := d.index[ks]
	if !ok {
		return nil, false
	}
	return d.vals[i], true
}

// Delete removes key from d, if present.
func (d *Dict) Delete(key any) {
	if d == nil || d.index == nil {
		return
	}
	_, ks, err := normKey(key)
	if err != nil {
		return
	}
	i, ok := d.index[ks]
	if !ok {
		return
	}
	d.keys = append(d.keys[:i], d.keys[i+1:]...)
	d.vals = append(d.vals[:i], d.vals[i+1:]...)
	delete(d.index, ks)
	for k, j := range d.index {
		if j > i {
			d.index[k] = j - 1
		}
	}
}

// Len returns the number of entries.
func (d *Dict) Len() int {
	if d == nil {
		return 0
	}
	return len(d.keys)
}

// Keys returns the keys in insertion order.
func (d *Dict) Keys() []any {
	if d == nil {
		return nil
	}
	return append([]any{}, d.keys...)
}

// All iterates over the entries in insertion order.
func (d *Dict) All() iter.Seq2[any, any] {
	return func(yield func(any, any) bool) {
		if d == nil {
			return
		}
		for i, k := range d.keys {
			if !yield(k, d.vals[i]) {
				return
			}
		}
	}
}
