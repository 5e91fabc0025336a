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
	// pending is the size of a legacy storage whose data is read after the pickles.
	pending int64
}

func (s *Storage) byteLen() int64 {
	if s.Data == nil {
		return s.pending
	}
	return int64(len(s.Data))
}

// Numel returns the number of elements in the storage.
func (s *Storage) Numel() int64 {
	if s.DType.ElemSize() == 0 {
		return 0
	}
	return s.byteLen() / int64(s.DType.ElemSize())
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
	if len(t.Strides) != len(t.Shape) {
		return false
	}
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
	if t.Storage.byteLen()%int64(t.DType.ElemSize()) != 0 {
		return fmt.Errorf("storage of %d bytes is not a whole number of %v elements", t.Storage.byteLen(), t.DType)
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

// materialLimit is how many bytes the accessors may materialise for a tensor over a
// storage of n bytes: the read budget of a file holding that storage. A view with zero
// or overlapping strides (torch's expand) can address far more elements than its
// storage holds; beyond this it is refused rather than copied.
func materialLimit(n int64) int64 {
	return satAdd(DefaultMemoryFixed, satMul(DefaultMemoryPerByte, n))
}

// viewSize checks the view and returns its element count, refusing views that would
// materialise more than materialLimit bytes at outElem bytes per element.
func (t *Tensor) viewSize(outElem int64) (int64, error) {
	if err := t.check(); err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	n := t.Numel()
	limit := materialLimit(t.Storage.byteLen())
	if n > limit/outElem {
		return 0, fmt.Errorf("checkpoint: tensor of shape %v, strides %v addresses %d elements of a %d-byte storage: "+
			"materialising them needs more than %d bytes (use Storage.Data)", t.Shape, t.Strides, n, t.Storage.byteLen(), limit)
	}
	return n, nil
}

// ReadBytes returns the tensor's elements in row-major, little-endian order. For a
// contiguous tensor it is a slice of the storage (not a copy); otherwise a new buffer.
// It returns an error for a view that lies outside its storage or that would
// materialise far more elements than the storage holds (see Float64s).
func (t *Tensor) ReadBytes() ([]byte, error) {
	n, err := t.viewSize(int64(t.DType.ElemSize()))
	if err != nil {
		return nil, err
	}
	es := int64(t.DType.ElemSize())
	if n == 0 {
		return []byte{}, nil
	}
	if t.IsContiguous() {
		return t.Storage.Data[t.Offset*es : (t.Offset+n)*es], nil
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
			return out, nil
		}
	}
}

// Bytes is ReadBytes without the error: it returns nil where ReadBytes fails.
func (t *Tensor) Bytes() []byte {
	b, _ := t.ReadBytes()
	return b
}

// elements decodes the tensor's elements, outElem bytes each once converted, with f.
func elements[T any](t *Tensor, outElem int64, f func(b []byte) T) ([]T, error) {
	if _, err := t.viewSize(outElem); err != nil {
		return nil, err
	}
	b, err := t.ReadBytes()
	if err != nil {
		return nil, err
	}
	es := t.DType.ElemSize()
	out := make([]T, len(b)/es)
	for i := range out {
		out[i] = f(b[i*es:])
	}
	return out, nil
}

// ReadFloat64s returns the tensor's elements in row-major order converted to float64
// (bool as 0 or 1, complex as the real part; see ReadComplex128s). Conversion is exact
// for every dtype except int64 and uint64 beyond 2^53. A view with zero or overlapping
// strides is materialised up to the read budget of its storage's size (16 MiB plus 32
// bytes per storage byte); beyond that, and for a view outside its storage, it returns
// an error.
func (t *Tensor) ReadFloat64s() ([]float64, error) {
	return elements(t, 8, func(b []byte) float64 { return decodeElem(t.DType, b) })
}

// Float64s is ReadFloat64s without the error: it returns nil where ReadFloat64s fails.
func (t *Tensor) Float64s() []float64 {
	v, _ := t.ReadFloat64s()
	return v
}

// ReadInt64s returns the tensor's elements in row-major order converted to int64
// (floats truncated toward zero, bool as 0 or 1). It is exact for every integer dtype.
// It fails where ReadFloat64s does.
func (t *Tensor) ReadInt64s() ([]int64, error) {
	return elements(t, 8, func(b []byte) int64 {
		if t.DType == Int64 {
			return int64(binary.LittleEndian.Uint64(b))
		}
		return int64(decodeElem(t.DType, b))
	})
}

// Int64s is ReadInt64s without the error: it returns nil where ReadInt64s fails.
func (t *Tensor) Int64s() []int64 {
	v, _ := t.ReadInt64s()
	return v
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

// ReadComplex128s returns a complex tensor's elements in row-major order (real
// tensors' as complex numbers with a zero imaginary part). It fails where ReadFloat64s
// does.
func (t *Tensor) ReadComplex128s() ([]complex128, error) {
	return elements(t, 16, func(e []byte) complex128 {
		switch t.DType {
		case Complex64:
			return complex(float64(math.Float32frombits(binary.LittleEndian.Uint32(e))), float64(math.Float32frombits(binary.LittleEndian.Uint32(e[4:]))))
		case Complex128:
			return complex(math.Float64frombits(binary.LittleEndian.Uint64(e)), math.Float64frombits(binary.LittleEndian.Uint64(e[8:])))
		}
		return complex(decodeElem(t.DType, e), 0)
	})
}

// Complex128s is ReadComplex128s without the error: it returns nil where
// ReadComplex128s fails.
func (t *Tensor) Complex128s() []complex128 {
	v, _ := t.ReadComplex128s()
	return v
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
// Tuple of those. Keys compare as in Python: 1, 1.0 and True are one key (the first one
// set is kept, with the last value), as are tuples of equal elements; NaN is refused as
// a key, since Python tells NaN keys apart by object identity, which Go values lack.
// The zero value is an empty plain dict ready to use.
type Dict struct {
	Kind DictKind
	// Attrs holds the instance attributes pickled with an OrderedDict (the BUILD
	// state), such as state_dict()'s "_metadata". Nil when there are none.
	Attrs *Dict

	keys    []any
	vals    []any
	nks     []dictKey
	index   map[dictKey]int // built once a dict outgrows a linear search
	version uint64          // counts Set and Delete calls (Version)
}

// Version counts the changes made to d through Set and Delete (also those that store an
// equal value): while it stays the same, so do d's keys and values, so a reader may keep
// what it derived from them. A value changed in place (an element of a Tuple) is not a
// change d sees.
func (d *Dict) Version() uint64 {
	if d == nil {
		return 0
	}
	return d.version
}

// smallDict is the size up to which a Dict finds keys by a linear search: most dicts
// of a checkpoint are small, and a map would cost far more than their entries.
const smallDict = 8

// dictKey is a key's identity: its kind and, for strings, the string itself (not a
// copy); for ints and floats the value; for big ints and tuples an encoding.
type dictKey struct {
	s    string
	i    int64
	kind byte
}

// dictCost is what one Dict costs before its entries, and entryCost what each entry
// adds (its key, value and identity, with slice growth and the index map).
const (
	dictCost  = 128
	entryCost = 3 * (16 + 16 + 40 + 64)
)

// NewDict returns an empty plain dict.
func NewDict() *Dict { return &Dict{} }

// NewOrderedDict returns an empty collections.OrderedDict.
func NewOrderedDict() *Dict { return &Dict{Kind: OrderedDict} }

// keyNorm normalises dict keys; a reader gives it a budget and a cache of tuple keys
// (which the pickle memo can share), a Dict method neither.
type keyNorm struct {
	b      *budget
	tuples map[*any]dictKey
}

// normKey converts a Go key to its canonical form and identity.
func normKey(k any) (any, dictKey, error) {
	return (*keyNorm)(nil).norm(k, 0)
}

// keyIdentity is a key's identity alone. Strings and ints, the keys of state dicts and
// option dicts, skip normKey's re-boxing of the canonical key: an optimizer reads its
// options by name every step, and lookups should not allocate.
func keyIdentity(k any) (dictKey, error) {
	switch v := k.(type) {
	case string:
		return dictKey{kind: 's', s: v}, nil
	case int:
		return dictKey{kind: 'i', i: int64(v)}, nil
	}
	_, dk, err := normKey(k)
	return dk, err
}

func (kn *keyNorm) norm(k any, depth int) (any, dictKey, error) {
	if depth > maxDepth {
		return nil, dictKey{}, fmt.Errorf("dict key nested deeper than %d", maxDepth)
	}
	switch v := k.(type) {
	case string:
		return v, dictKey{kind: 's', s: v}, nil
	case int:
		return int64(v), dictKey{kind: 'i', i: int64(v)}, nil
	case int64:
		return v, dictKey{kind: 'i', i: v}, nil
	case int32:
		return int64(v), dictKey{kind: 'i', i: int64(v)}, nil
	case *big.Int:
		if v == nil {
			return nil, dictKey{}, fmt.Errorf("checkpoint: nil *big.Int dict key")
		}
		if v.IsInt64() {
			return v.Int64(), dictKey{kind: 'i', i: v.Int64()}, nil
		}
		return v, bigKey(v), nil
	case bool:
		if v {
			return v, dictKey{kind: 'i', i: 1}, nil
		}
		return v, dictKey{kind: 'i', i: 0}, nil
	case float64:
		switch {
		case math.IsNaN(v):
			return nil, dictKey{}, fmt.Errorf("checkpoint: NaN dict key (Python tells NaN keys apart by identity)")
		case math.IsInf(v, 0) || v != math.Trunc(v):
			return v, dictKey{kind: 'f', i: int64(math.Float64bits(v))}, nil
		case v >= -(1<<63) && v < 1<<63:
			return v, dictKey{kind: 'i', i: int64(v)}, nil
		}
		bi, _ := new(big.Float).SetFloat64(v).Int(nil)
		return v, bigKey(bi), nil
	case nil:
		return nil, dictKey{kind: 'n'}, nil
	case Tuple:
		var cached *any
		if len(v) > 0 && kn != nil {
			cached = &v[0]
			if dk, ok := kn.tuples[cached]; ok {
				return v, dk, nil
			}
		}
		out := make(Tuple, len(v))
		dks := make([]dictKey, len(v))
		size := int64(1)
		for i, e := range v {
			ne, dk, err := kn.norm(e, depth+1)
			if err != nil {
				return nil, dictKey{}, err
			}
			out[i], dks[i] = ne, dk
			size = satAdd(size, int64(len(dk.s))+21)
		}
		if kn != nil {
			// A nested tuple's encoding is copied into its parent's (and then into a
			// string): charge it, as sharing could otherwise double it at every level.
			if err := kn.b.alloc(2*heapSize(size) + 64*int64(len(v)) + 128); err != nil {
				return nil, dictKey{}, err
			}
			if err := kn.b.step(size); err != nil {
				return nil, dictKey{}, err
			}
		}
		enc := make([]byte, 0, size)
		enc = append(enc, '(')
		for _, dk := range dks {
			enc = append(enc, dk.kind)
			enc = binary.AppendVarint(enc, dk.i)
			enc = binary.AppendUvarint(enc, uint64(len(dk.s)))
			enc = append(enc, dk.s...)
		}
		dk := dictKey{kind: 't', s: string(enc)}
		if cached != nil {
			kn.tuples[cached] = dk
		}
		return out, dk, nil
	}
	return nil, dictKey{}, fmt.Errorf("checkpoint: unhashable dict key of type %T", k)
}

// bigKey is the identity of an integer outside the int64 range: its sign and magnitude
// in hex (linear time, unlike decimal).
func bigKey(v *big.Int) dictKey {
	return dictKey{kind: 'I', s: v.Text(16)}
}

// Set sets d[key] = v, keeping the key's first insertion position. It panics if key is
// not one of the key types listed on Dict.
func (d *Dict) Set(key, v any) {
	if err := d.set(key, v); err != nil {
		panic(err)
	}
}

func (d *Dict) set(key, v any) error {
	nk, dk, err := normKey(key)
	if err != nil {
		return err
	}
	d.setNorm(nk, dk, v)
	return nil
}

// find returns the position of the key with identity dk, or -1.
func (d *Dict) find(dk dictKey) int {
	if d.index != nil {
		if i, ok := d.index[dk]; ok {
			return i
		}
		return -1
	}
	for i, k := range d.nks {
		if k == dk {
			return i
		}
	}
	return -1
}

func (d *Dict) setNorm(nk any, dk dictKey, v any) {
	d.version++
	if i := d.find(dk); i >= 0 {
		d.vals[i] = v
		return
	}
	d.keys = appendGrow(d.keys, nk)
	d.vals = appendGrow(d.vals, v)
	d.nks = appendGrow(d.nks, dk)
	if d.index != nil {
		d.index[dk] = len(d.keys) - 1
	} else if len(d.keys) > smallDict {
		d.index = make(map[dictKey]int, len(d.keys))
		for i, k := range d.nks {
			d.index[k] = i
		}
	}
}

// Get returns d[key] and whether the key is present.
func (d *Dict) Get(key any) (any, bool) {
	if d == nil {
		return nil, false
	}
	dk, err := keyIdentity(key)
	if err != nil {
		return nil, false
	}
	return d.value(dk)
}

// Lookup is Get for a string key. Unlike Get(key) with a string variable, which boxes
// the key into an interface, it never allocates: an optimizer reads its group options by
// name every step.
func (d *Dict) Lookup(key string) (any, bool) {
	if d == nil {
		return nil, false
	}
	return d.value(dictKey{kind: 's', s: key})
}

// value returns the value of the key with identity dk, and whether there is one.
func (d *Dict) value(dk dictKey) (any, bool) {
	i := d.find(dk)
	if i < 0 {
		return nil, false
	}
	return d.vals[i], true
}

// Delete removes key from d, if present.
func (d *Dict) Delete(key any) {
	if d == nil {
		return
	}
	dk, err := keyIdentity(key)
	if err != nil {
		return
	}
	i := d.find(dk)
	if i < 0 {
		return
	}
	d.version++
	d.keys = append(d.keys[:i], d.keys[i+1:]...)
	d.vals = append(d.vals[:i], d.vals[i+1:]...)
	d.nks = append(d.nks[:i], d.nks[i+1:]...)
	if d.index != nil {
		delete(d.index, dk)
		for k, j := range d.index {
			if j > i {
				d.index[k] = j - 1
			}
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
