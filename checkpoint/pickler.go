package checkpoint

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// Pickle opcodes (protocols 0-5).
const (
	opMark           = '('
	opStop           = '.'
	opPop            = '0'
	opPopMark        = '1'
	opDup            = '2'
	opFloat          = 'F'
	opInt            = 'I'
	opBinInt         = 'J'
	opBinInt1        = 'K'
	opLong           = 'L'
	opBinInt2        = 'M'
	opNone           = 'N'
	opPersID         = 'P'
	opBinPersID      = 'Q'
	opReduce         = 'R'
	opString         = 'S'
	opBinString      = 'T'
	opShortBinString = 'U'
	opUnicode        = 'V'
	opBinUnicode     = 'X'
	opAppend         = 'a'
	opBuild          = 'b'
	opGlobal         = 'c'
	opDict           = 'd'
	opEmptyDict      = '}'
	opAppends        = 'e'
	opGet            = 'g'
	opBinGet         = 'h'
	opInst           = 'i'
	opLongBinGet     = 'j'
	opList           = 'l'
	opEmptyList      = ']'
	opObj            = 'o'
	opPut            = 'p'
	opBinPut         = 'q'
	opLongBinPut     = 'r'
	opSetItem        = 's'
	opTuple          = 't'
	opEmptyTuple     = ')'
	opSetItems       = 'u'
	opBinFloat       = 'G'
	opProto          = 0x80
	opNewObj         = 0x81
	opExt1           = 0x82
	opExt2           = 0x83
	opExt4           = 0x84
	opTuple1         = 0x85
	opTuple2         = 0x86
	opTuple3         = 0x87
	opNewTrue        = 0x88
	opNewFalse       = 0x89
	opLong1          = 0x8a
	opLong4          = 0x8b
	opBinBytes       = 'B'
	opShortBinBytes  = 'C'
	opShortBinUni    = 0x8c
	opBinUnicode8    = 0x8d
	opBinBytes8      = 0x8e
	opEmptySet       = 0x8f
	opAddItems       = 0x90
	opFrozenSet      = 0x91
	opNewObjEx       = 0x92
	opStackGlobal    = 0x93
	opMemoize        = 0x94
	opFrame          = 0x95
	opByteArray8     = 0x96
	opNextBuffer     = 0x97
	opReadonlyBuffer = 0x98
)

// batchSize is how many items CPython puts in one APPENDS/SETITEMS.
const batchSize = 1000

// maxDepth bounds container nesting, in both directions: it stops a cyclic value from
// recursing forever when writing and a hostile pickle from exhausting the stack when read.
const maxDepth = 1000

// pickler writes a protocol-2 pickle using only the opcodes and globals that torch's
// weights_only unpickler accepts, and collects the storages the tensors reference.
type pickler struct {
	buf      []byte
	memo     map[string]uint32 // globals, "module\nname"
	tensors  map[*Tensor]uint32
	nextMemo uint32
	storages map[*Storage]string
	order    []*Storage
	// shared memoizes values that can be referenced more than once (containers, long
	// strings, bytes, big ints) by identity, as Python's pickler does, so that what Read
	// returns (which keeps the file's sharing) is written back at its own size, not
	// expanded; active holds the containers being written, to refuse cycles.
	shared map[ident]uint32
	active map[ident]bool
}

// ident identifies a value by the memory it refers to.
type ident struct {
	p    unsafe.Pointer
	n    int
	kind byte
}

// minSharedString is the length from which strings are memoized: shorter ones cost
// about as much to write as a reference to them.
const minSharedString = 8

func identity(v any) (ident, bool) {
	switch x := v.(type) {
	case string:
		if len(x) >= minSharedString {
			return ident{unsafe.Pointer(unsafe.StringData(x)), len(x), 's'}, true
		}
	case []byte:
		if len(x) > 0 {
			return ident{unsafe.Pointer(&x[0]), len(x), 'b'}, true
		}
	case []any:
		if len(x) > 0 {
			return ident{unsafe.Pointer(&x[0]), len(x), 'l'}, true
		}
	case Tuple:
		if len(x) > 0 {
			return ident{unsafe.Pointer(&x[0]), len(x), 't'}, true
		}
	case *Dict:
		if x != nil {
			return ident{unsafe.Pointer(x), 0, 'd'}, true
		}
	case *big.Int:
		if x != nil && !x.IsInt64() {
			return ident{unsafe.Pointer(x), 0, 'I'}, true
		}
	}
	return ident{}, false
}

func newPickler() *pickler {
	return &pickler{
		buf:      []byte{opProto, 2},
		memo:     map[string]uint32{},
		tensors:  map[*Tensor]uint32{},
		storages: map[*Storage]string{},
		shared:   map[ident]uint32{},
		active:   map[ident]bool{},
	}
}

func (p *pickler) finish() []byte { return append(p.buf, opStop) }

func (p *pickler) put() uint32 {
	i := p.nextMemo
	p.nextMemo++
	if i < 256 {
		p.buf = append(p.buf, opBinPut, byte(i))
	} else {
		p.buf = append(p.buf, opLongBinPut)
		p.buf = binary.LittleEndian.AppendUint32(p.buf, i)
	}
	return i
}

func (p *pickler) get(i uint32) {
	if i < 256 {
		p.buf = append(p.buf, opBinGet, byte(i))
	} else {
		p.buf = append(p.buf, opLongBinGet)
		p.buf = binary.LittleEndian.AppendUint32(p.buf, i)
	}
}

func (p *pickler) global(module, name string) {
	k := module + "\n" + name
	if i, ok := p.memo[k]; ok {
		p.get(i)
		return
	}
	p.buf = append(p.buf, opGlobal)
	p.buf = append(p.buf, k...)
	p.buf = append(p.buf, '\n')
	p.memo[k] = p.put()
}

func (p *pickler) int64(v int64) {
	switch {
	case v >= 0 && v < 1<<8:
		p.buf = append(p.buf, opBinInt1, byte(v))
	case v >= 0 && v < 1<<16:
		p.buf = append(p.buf, opBinInt2)
		p.buf = binary.LittleEndian.AppendUint16(p.buf, uint16(v))
	case v >= math.MinInt32 && v <= math.MaxInt32:
		p.buf = append(p.buf, opBinInt)
		p.buf = binary.LittleEndian.AppendUint32(p.buf, uint32(int32(v)))
	default:
		// libtorch's unpickler accepts LONG1 only with exactly 8 bytes.
		p.buf = append(p.buf, opLong1, 8)
		p.buf = binary.LittleEndian.AppendUint64(p.buf, uint64(v))
	}
}

func (p *pickler) bigInt(v *big.Int) error {
	if v.IsInt64() {
		p.int64(v.Int64())
		return nil
	}
	b := twosComplementLE(v)
	if len(b) > 255 {
		// LONG4 is not in the weights_only opcode set.
		return fmt.Errorf("integer of %d bytes is too large for torch.load(weights_only=True)", len(b))
	}
	p.buf = append(p.buf, opLong1, byte(len(b)))
	p.buf = append(p.buf, b...)
	return nil
}

// twosComplementLE returns the minimal little-endian two's complement encoding of v.
func twosComplementLE(v *big.Int) []byte {
	n := v.BitLen()/8 + 1
	x := new(big.Int).Set(v)
	if v.Sign() < 0 {
		x.Add(x, new(big.Int).Lsh(big.NewInt(1), uint(8*n)))
	}
	be := x.FillBytes(make([]byte, n))
	slices.Reverse(be)
	// Trim redundant sign bytes.
	for len(be) > 1 {
		last, prev := be[len(be)-1], be[len(be)-2]
		if (last == 0 && prev&0x80 == 0) || (last == 0xff && prev&0x80 != 0) {
			be = be[:len(be)-1]
			continue
		}
		break
	}
	return be
}

func (p *pickler) str(s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("string %q is not valid UTF-8", s)
	}
	p.buf = append(p.buf, opBinUnicode)
	p.buf = binary.LittleEndian.AppendUint32(p.buf, uint32(len(s)))
	p.buf = append(p.buf, s...)
	return nil
}

func (p *pickler) float(f float64) {
	p.buf = append(p.buf, opBinFloat)
	p.buf = binary.BigEndian.AppendUint64(p.buf, math.Float64bits(f))
}

func (p *pickler) bool(b bool) {
	if b {
		p.buf = append(p.buf, opNewTrue)
	} else {
		p.buf = append(p.buf, opNewFalse)
	}
}

func (p *pickler) intTuple(v []int64) {
	vals := make(Tuple, len(v))
	for i, x := range v {
		vals[i] = x
	}
	_ = p.tuple(vals, 0)
}

func (p *pickler) tuple(t Tuple, depth int) error {
	if len(t) == 0 {
		p.buf = append(p.buf, opEmptyTuple)
		return nil
	}
	if len(t) > 3 {
		p.buf = append(p.buf, opMark)
	}
	for _, e := range t {
		if err := p.dump(e, depth+1); err != nil {
			return err
		}
	}
	switch len(t) {
	case 1:
		p.buf = append(p.buf, opTuple1)
	case 2:
		p.buf = append(p.buf, opTuple2)
	case 3:
		p.buf = append(p.buf, opTuple3)
	default:
		p.buf = append(p.buf, opTuple)
	}
	return nil
}

func (p *pickler) list(n int, elem func(i int) any, depth int, id *ident) error {
	p.buf = append(p.buf, opEmptyList)
	p.memoize(id)
	// MARK ... APPENDS even for one item: libtorch 1.13 has no APPEND.
	for start := 0; start < n; start += batchSize {
		p.buf = append(p.buf, opMark)
		for i := start; i < min(n, start+batchSize); i++ {
			if err := p.dump(elem(i), depth+1); err != nil {
				return err
			}
		}
		p.buf = append(p.buf, opAppends)
	}
	return nil
}

// memoize records the value just written (or, for a list or dict, just opened) under id.
func (p *pickler) memoize(id *ident) {
	if id != nil {
		p.shared[*id] = p.put()
	}
}

func (p *pickler) dict(d *Dict, depth int, id *ident) error {
	switch d.Kind {
	case PlainDict:
		if d.Attrs.Len() > 0 {
			return fmt.Errorf("a plain dict cannot carry attributes (Attrs); use an OrderedDict")
		}
		p.buf = append(p.buf, opEmptyDict)
	case OrderedDict:
		p.global("collections", "OrderedDict")
		p.buf = append(p.buf, opEmptyTuple, opReduce)
	default:
		return fmt.Errorf("invalid DictKind %d", d.Kind)
	}
	p.memoize(id)
	if err := p.items(d, depth); err != nil {
		return err
	}
	if d.Kind == OrderedDict && d.Attrs.Len() > 0 {
		// BUILD with a dict state updates the OrderedDict's __dict__ (state_dict's
		// _metadata); weights_only allows BUILD on OrderedDict.
		p.buf = append(p.buf, opEmptyDict)
		if err := p.items(d.Attrs, depth); err != nil {
			return err
		}
		p.buf = append(p.buf, opBuild)
	}
	return nil
}

func (p *pickler) items(d *Dict, depth int) error {
	n := d.Len()
	for start := 0; start < n; start += batchSize {
		p.buf = append(p.buf, opMark)
		for i := start; i < min(n, start+batchSize); i++ {
			if err := p.dump(d.keys[i], depth+1); err != nil {
				return err
			}
			if err := p.dump(d.vals[i], depth+1); err != nil {
				return fmt.Errorf("[%s]: %w", fmtKey(d.keys[i]), err)
			}
		}
		p.buf = append(p.buf, opSetItems)
	}
	return nil
}

func (p *pickler) bytes(b []byte) error {
	// Protocol 2 has no bytes opcode; CPython writes _codecs.encode(latin1 str, 'latin1'),
	// which torch 2.x's weights_only unpickler allows.
	r := make([]rune, len(b))
	for i, c := range b {
		r[i] = rune(c)
	}
	p.global("_codecs", "encode")
	if err := p.str(string(r)); err != nil {
		return err
	}
	if err := p.str("latin1"); err != nil {
		return err
	}
	p.buf = append(p.buf, opTuple2, opReduce)
	return nil
}

func (p *pickler) tensor(t *Tensor) error {
	if i, ok := p.tensors[t]; ok {
		p.get(i)
		return nil
	}
	strides := t.Strides
	if strides == nil && len(t.Shape) > 0 {
		strides = ContiguousStrides(t.Shape)
	}
	tt := *t
	tt.Strides = strides
	if err := tt.check(); err != nil {
		return err
	}
	key, ok := p.storages[t.Storage]
	if !ok {
		key = strconv.Itoa(len(p.order))
		p.storages[t.Storage] = key
		p.order = append(p.order, t.Storage)
	}
	// torch's own choice: a legacy typed storage and _rebuild_tensor_v2 where the dtype
	// has a storage class, else an UntypedStorage of bytes and _rebuild_tensor_v3.
	v3 := !t.DType.hasStorageClass()
	if v3 {
		p.global("torch._utils", "_rebuild_tensor_v3")
	} else {
		p.global("torch._utils", "_rebuild_tensor_v2")
	}
	p.buf = append(p.buf, opMark, opMark)
	_ = p.str("storage")
	if v3 {
		p.global("torch.storage", "UntypedStorage")
	} else {
		p.global("torch", dtypes[t.DType].storage)
	}
	_ = p.str(key)
	_ = p.str("cpu")
	if v3 {
		p.int64(int64(len(t.Storage.Data)))
	} else {
		p.int64(t.Storage.Numel())
	}
	p.buf = append(p.buf, opTuple, opBinPersID)
	p.int64(t.Offset)
	p.intTuple(t.Shape)
	p.intTuple(strides)
	p.bool(t.RequiresGrad)
	p.global("collections", "OrderedDict")
	p.buf = append(p.buf, opEmptyTuple, opReduce)
	if v3 {
		p.global("torch", t.DType.String())
	}
	p.buf = append(p.buf, opTuple, opReduce)
	p.tensors[t] = p.put()
	return nil
}

// dump writes v. See the package documentation for the Go types it accepts; it also
// takes Go ints and floats of every size, Dict values, other slices (as lists) and maps
// with string keys (as dicts, in sorted key order).
func (p *pickler) dump(v any, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("values nested deeper than %d (a cycle?)", maxDepth)
	}
	id, ok := identity(v)
	if !ok {
		return p.value(v, depth, nil)
	}
	if p.active[id] {
		return fmt.Errorf("a %s that contains itself (a cycle) cannot be written", describe(v))
	}
	if i, ok := p.shared[id]; ok {
		p.get(i)
		return nil
	}
	p.active[id] = true
	err := p.value(v, depth, &id)
	delete(p.active, id)
	if err != nil {
		return err
	}
	if _, ok := p.shared[id]; !ok {
		p.memoize(&id) // values memoized once written: strings, bytes, tuples, big ints
	}
	return nil
}

// value writes v; id is its identity when it has one, for lists and dicts to memoize
// themselves before their items, as Python's pickler does.
func (p *pickler) value(v any, depth int, id *ident) error {
	switch x := v.(type) {
	case nil:
		p.buf = append(p.buf, opNone)
	case bool:
		p.bool(x)
	case int:
		p.int64(int64(x))
	case int8:
		p.int64(int64(x))
	case int16:
		p.int64(int64(x))
	case int32:
		p.int64(int64(x))
	case int64:
		p.int64(x)
	case uint8:
		p.int64(int64(x))
	case uint16:
		p.int64(int64(x))
	case uint32:
		p.int64(int64(x))
	case uint:
		return p.bigInt(new(big.Int).SetUint64(uint64(x)))
	case uint64:
		return p.bigInt(new(big.Int).SetUint64(x))
	case *big.Int:
		if x == nil {
			return fmt.Errorf("nil *big.Int")
		}
		return p.bigInt(x)
	case float64:
		p.float(x)
	case float32:
		p.float(float64(x))
	case string:
		return p.str(x)
	case []byte:
		return p.bytes(x)
	case Tuple:
		return p.tuple(x, depth)
	case []any:
		return p.list(len(x), func(i int) any { return x[i] }, depth, id)
	case *Dict:
		if x == nil {
			return fmt.Errorf("nil *Dict")
		}
		return p.dict(x, depth, id)
	case Dict:
		return p.dict(&x, depth, nil)
	case *Tensor:
		if x == nil {
			return fmt.Errorf("nil *Tensor")
		}
		return p.tensor(x)
	case DType:
		if !x.valid() {
			return fmt.Errorf("invalid %v", x)
		}
		p.global("torch", x.String()) // a torch dtype object, as torch pickles torch.float32
	default:
		return p.reflectValue(v, depth)
	}
	return nil
}

func (p *pickler) reflectValue(v any, depth int) error {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		return p.list(rv.Len(), func(i int) any { return rv.Index(i).Interface() }, depth, nil)
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			break
		}
		d := NewDict()
		keys := rv.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int {
			if a.String() < b.String() {
				return -1
			}
			if a.String() > b.String() {
				return 1
			}
			return 0
		})
		for _, k := range keys {
			d.Set(k.String(), rv.MapIndex(k).Interface())
		}
		return p.dict(d, depth, nil)
	}
	return fmt.Errorf("cannot write a value of type %T", v)
}

// fmtKey formats a dict key for error paths.
func fmtKey(k any) string {
	if s, ok := k.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(k)
}
