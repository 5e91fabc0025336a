package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ForbiddenGlobalError reports a pickle global that is not on the allowlist. Reading
// stops there: no object of an unknown class is ever constructed.
type ForbiddenGlobalError struct {
	Module, Name string
}

// Error implements error; the message names the global as module.name.
func (e *ForbiddenGlobalError) Error() string {
	return fmt.Sprintf("checkpoint: refusing global %s: not on the allowlist of tensor, storage and container types", printable(e.Module+"."+e.Name))
}

// printable returns s, or s quoted when it holds anything but printable ASCII, so that
// an error message never carries control characters from a file.
func printable(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return strconv.Quote(s)
		}
	}
	return s
}

// errTruncated is returned when the pickle ends before STOP; the legacy reader uses it
// to ask for more input.
var errTruncated = errors.New("pickle data truncated")

// global is an allowlisted global, as it sits on the pickle stack.
type global struct{ module, name string }

// storageType is a legacy storage class (torch.FloatStorage ...), or with dtype 0
// torch.storage.UntypedStorage, only usable inside a persistent id, as in torch's
// weights_only unpickler.
type storageType struct{ dtype DType }

// pyList is a list under construction; APPENDS mutate it after other references
// (through the memo) exist, so it is a pointer until the pickle is done.
type pyList struct{ items []any }

var storageTypes = func() map[string]DType {
	m := map[string]DType{}
	for d := Float32; d <= lastDType; d++ {
		if d.hasStorageClass() {
			m[dtypes[d].storage] = d
		}
	}
	return m
}()

// allowed returns the stack value for an allowlisted global, or an error naming it.
func allowed(module, name string) (any, error) {
	if module == "__builtin__" {
		module = "builtins"
	}
	switch module + "." + name {
	case "collections.OrderedDict",
		"torch._utils._rebuild_tensor",
		"torch._utils._rebuild_tensor_v2",
		"torch._utils._rebuild_tensor_v3",
		"torch._utils._rebuild_parameter",
		"torch._utils._rebuild_parameter_with_state",
		"torch.Size",
		"_codecs.encode":
		return global{module, name}, nil
	}
	if module == "torch.storage" && name == "UntypedStorage" {
		return storageType{}, nil
	}
	if module == "torch" {
		if d, ok := storageTypes[name]; ok {
			return storageType{d}, nil
		}
		if strings.HasSuffix(name, "Storage") {
			return nil, fmt.Errorf("unsupported tensor storage torch.%s", name)
		}
		// A dtype object (torch.float32): _rebuild_tensor_v3's argument, or a value.
		if d, err := ParseDType(name); err == nil && dtypes[d].name == name {
			return d, nil
		}
	}
	return nil, &ForbiddenGlobalError{module, name}
}

// unpickler is a pickle machine (protocols 0-5) that builds only the package's value
// types. Every length is checked against the remaining input before allocating.
type unpickler struct {
	data    []byte
	pos     int
	stack   []any
	marks   []int
	memo    map[uint64]any
	persist func(pid Tuple) (any, error)
	b       *budget
	kn      *keyNorm
}

// newUnpickler returns a machine over data that charges b (nil: no budget).
func newUnpickler(data []byte, persist func(Tuple) (any, error), b *budget) *unpickler {
	return &unpickler{data: data, memo: map[uint64]any{}, persist: persist, b: b,
		kn: &keyNorm{b: b, tuples: map[*any]dictKey{}}}
}

// boxCost is what storing v in an interface allocates.
func boxCost(v any) int64 {
	switch x := v.(type) {
	case int64:
		if x >= 0 && x < 256 {
			return 0
		}
		return 8
	case float64:
		return 8
	case string:
		return 16
	case Tuple, []byte:
		return 24
	case global:
		return 32
	case storageType:
		return 8
	}
	return 0
}

func (u *unpickler) read(n int) ([]byte, error) {
	if n < 0 || n > len(u.data)-u.pos {
		return nil, errTruncated
	}
	b := u.data[u.pos : u.pos+n]
	u.pos += n
	return b, nil
}

func (u *unpickler) readLen(width int) (int, error) {
	b, err := u.read(width)
	if err != nil {
		return 0, err
	}
	var n uint64
	switch width {
	case 1:
		n = uint64(b[0])
	case 4:
		n = uint64(binary.LittleEndian.Uint32(b))
	case 8:
		n = binary.LittleEndian.Uint64(b)
	}
	if n > uint64(len(u.data)-u.pos) {
		return 0, errTruncated
	}
	return int(n), nil
}

func (u *unpickler) line() (string, error) {
	i := bytes.IndexByte(u.data[u.pos:], '\n')
	if i < 0 {
		return "", errTruncated
	}
	if err := u.b.step(int64(i)); err != nil {
		return "", err
	}
	if err := u.b.alloc(int64(i)); err != nil {
		return "", err
	}
	s := string(u.data[u.pos : u.pos+i])
	u.pos += i + 1
	return strings.TrimSuffix(s, "\r"), nil
}

func (u *unpickler) push(v any) {
	u.b.growCharge(len(u.stack), cap(u.stack), 1, 16)
	u.b.alloc(boxCost(v))
	u.stack = appendGrow(u.stack, v)
}

func (u *unpickler) pop() (any, error) {
	if len(u.stack) == 0 || (len(u.marks) > 0 && len(u.stack) <= u.marks[len(u.marks)-1]) {
		return nil, errors.New("stack underflow")
	}
	v := u.stack[len(u.stack)-1]
	u.stack = u.stack[:len(u.stack)-1]
	return v, nil
}

func (u *unpickler) top() (any, error) {
	if len(u.stack) == 0 || (len(u.marks) > 0 && len(u.stack) <= u.marks[len(u.marks)-1]) {
		return nil, errors.New("stack underflow")
	}
	return u.stack[len(u.stack)-1], nil
}

// popMarkView is popMark without the copy: the items stay valid until the next push.
func (u *unpickler) popMarkView() ([]any, error) {
	if len(u.marks) == 0 {
		return nil, errors.New("no MARK on the stack")
	}
	m := u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
	items := u.stack[m:]
	u.stack = u.stack[:m]
	return items, nil
}

// popMark returns the items above the topmost mark and removes them and the mark.
func (u *unpickler) popMark() ([]any, error) {
	if len(u.marks) == 0 {
		return nil, errors.New("no MARK on the stack")
	}
	m := u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
	if err := u.b.alloc(16 * int64(len(u.stack)-m)); err != nil {
		return nil, err
	}
	items := slices.Clone(u.stack[m:])
	u.stack = u.stack[:m]
	return items, nil
}

// memoIndex reads the memo index of a PUT or GET in op's encoding: a decimal line
// (PUT, GET), one byte (BINPUT, BINGET) or four little-endian bytes (LONG_BINPUT,
// LONG_BINGET).
func (u *unpickler) memoIndex(op byte) (uint64, error) {
	switch op {
	case opPut, opGet:
		s, err := u.line()
		if err != nil {
			return 0, err
		}
		i, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			name := "PUT"
			if op == opGet {
				name = "GET"
			}
			return 0, fmt.Errorf("bad %s index %q", name, s)
		}
		return i, nil
	case opBinPut, opBinGet:
		b, err := u.read(1)
		if err != nil {
			return 0, err
		}
		return uint64(b[0]), nil
	}
	b, err := u.read(4)
	if err != nil {
		return 0, err
	}
	return uint64(binary.LittleEndian.Uint32(b)), nil
}

func (u *unpickler) memoPut(i uint64) error {
	v, err := u.top()
	if err != nil {
		return err
	}
	if _, ok := u.memo[i]; !ok {
		if err := u.b.alloc(96); err != nil {
			return err
		}
	}
	u.memo[i] = v
	return nil
}

func (u *unpickler) memoGet(i uint64) error {
	v, ok := u.memo[i]
	if !ok {
		return fmt.Errorf("memo key %d not found", i)
	}
	u.push(v)
	return nil
}

// load runs the machine to STOP and returns the finished value.
func (u *unpickler) load() (v any, err error) {
	for {
		if u.pos >= len(u.data) {
			return nil, errTruncated
		}
		op := u.data[u.pos]
		at := u.pos
		u.pos++
		if err := u.b.step(1); err != nil {
			return nil, err
		}
		if op == opStop {
			v, err := u.pop()
			if err != nil {
				return nil, fmt.Errorf("pickle STOP at offset %d: %w", at, err)
			}
			return finish(v, u.b)
		}
		err := u.step(op)
		if u.b != nil && u.b.err != nil {
			return nil, u.b.err
		}
		if err != nil {
			if err == errTruncated {
				return nil, err
			}
			var fg *ForbiddenGlobalError
			if errors.As(err, &fg) {
				return nil, err
			}
			return nil, fmt.Errorf("pickle opcode 0x%02x at offset %d: %w", op, at, err)
		}
	}
}

func (u *unpickler) step(op byte) error {
	switch op {
	case opProto:
		b, err := u.read(1)
		if err != nil {
			return err
		}
		if b[0] > 5 {
			return fmt.Errorf("unsupported pickle protocol %d", b[0])
		}
	case opFrame:
		_, err := u.read(8)
		return err
	case opMark:
		u.b.growCharge(len(u.marks), cap(u.marks), 1, 8)
		u.marks = appendGrow(u.marks, len(u.stack))
	case opPop:
		if len(u.marks) > 0 && len(u.stack) == u.marks[len(u.marks)-1] {
			u.marks = u.marks[:len(u.marks)-1]
			return nil
		}
		_, err := u.pop()
		return err
	case opPopMark:
		_, err := u.popMark()
		return err
	case opDup:
		v, err := u.top()
		if err != nil {
			return err
		}
		u.push(v)
	case opNone:
		u.push(nil)
	case opNewTrue:
		u.push(true)
	case opNewFalse:
		u.push(false)
	case opBinInt1:
		b, err := u.read(1)
		if err != nil {
			return err
		}
		u.push(int64(b[0]))
	case opBinInt2:
		b, err := u.read(2)
		if err != nil {
			return err
		}
		u.push(int64(binary.LittleEndian.Uint16(b)))
	case opBinInt:
		b, err := u.read(4)
		if err != nil {
			return err
		}
		u.push(int64(int32(binary.LittleEndian.Uint32(b))))
	case opLong1, opLong4:
		w := 1
		if op == opLong4 {
			w = 4
		}
		n, err := u.readLen(w)
		if err != nil {
			return err
		}
		b, _ := u.read(n)
		if n > maxLongBytes {
			return fmt.Errorf("integer of %d bytes (torch's weights_only unpickler reads at most %d, with LONG1)", n, maxLongBytes)
		}
		if err := u.b.alloc(4*int64(n) + 64); err != nil {
			return err
		}
		if err := u.b.step(int64(n)); err != nil {
			return err
		}
		u.push(decodeLong(b))
	case opInt:
		s, err := u.line()
		if err != nil {
			return err
		}
		switch s {
		case "01":
			u.push(true)
		case "00":
			u.push(false)
		default:
			v, err := u.parseInt(s)
			if err != nil {
				return err
			}
			u.push(v)
		}
	case opLong:
		s, err := u.line()
		if err != nil {
			return err
		}
		v, err := u.parseInt(strings.TrimSuffix(s, "L"))
		if err != nil {
			return err
		}
		u.push(v)
	case opFloat:
		s, err := u.line()
		if err != nil {
			return err
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("bad FLOAT %q", s)
		}
		u.push(f)
	case opBinFloat:
		b, err := u.read(8)
		if err != nil {
			return err
		}
		u.push(math.Float64frombits(binary.BigEndian.Uint64(b)))
	case opBinUnicode, opShortBinUni, opBinUnicode8, opBinString, opShortBinString:
		w := map[byte]int{opBinUnicode: 4, opShortBinUni: 1, opBinUnicode8: 8, opBinString: 4, opShortBinString: 1}[op]
		n, err := u.readLen(w)
		if err != nil {
			return err
		}
		b, _ := u.read(n)
		if err := u.b.alloc(int64(n)); err != nil {
			return err
		}
		if err := u.b.step(int64(n)); err != nil {
			return err
		}
		if !utf8.Valid(b) {
			return errors.New("string is not valid UTF-8")
		}
		u.push(string(b))
	case opUnicode:
		s, err := u.line()
		if err != nil {
			return err
		}
		u.push(s)
	case opString:
		s, err := u.line()
		if err != nil {
			return err
		}
		if err := u.b.alloc(3 * int64(len(s))); err != nil {
			return err
		}
		q, err := strconv.Unquote(s)
		if err != nil {
			if len(s) >= 2 && s[0] == '\'' && s[len(s)-1] == '\'' {
				q, err = strconv.Unquote(`"` + strings.ReplaceAll(s[1:len(s)-1], `"`, `\"`) + `"`)
			}
			if err != nil {
				return fmt.Errorf("bad STRING %q", s)
			}
		}
		u.push(q)
	case opBinBytes, opShortBinBytes, opBinBytes8, opByteArray8:
		w := map[byte]int{opBinBytes: 4, opShortBinBytes: 1, opBinBytes8: 8, opByteArray8: 8}[op]
		n, err := u.readLen(w)
		if err != nil {
			return err
		}
		b, _ := u.read(n)
		if err := u.b.alloc(int64(n)); err != nil {
			return err
		}
		if err := u.b.step(int64(n)); err != nil {
			return err
		}
		u.push(slices.Clone(b))
	case opEmptyTuple:
		u.push(Tuple{})
	case opTuple1, opTuple2, opTuple3:
		n := int(op-opTuple1) + 1
		if len(u.stack) < n || (len(u.marks) > 0 && len(u.stack)-n < u.marks[len(u.marks)-1]) {
			return errors.New("stack underflow")
		}
		u.b.alloc(16 * int64(n))
		t := slices.Clone(Tuple(u.stack[len(u.stack)-n:]))
		u.stack = u.stack[:len(u.stack)-n]
		u.push(t)
	case opTuple:
		items, err := u.popMark()
		if err != nil {
			return err
		}
		u.push(Tuple(items))
	case opEmptyList:
		u.b.alloc(32)
		u.push(&pyList{})
	case opList:
		items, err := u.popMark()
		if err != nil {
			return err
		}
		u.b.alloc(32)
		u.push(&pyList{items: items})
	case opAppend, opAppends:
		var items []any
		if op == opAppend {
			v, err := u.pop()
			if err != nil {
				return err
			}
			items = []any{v}
		} else {
			var err error
			if items, err = u.popMarkView(); err != nil {
				return err
			}
		}
		t, err := u.top()
		if err != nil {
			return err
		}
		l, ok := t.(*pyList)
		if !ok {
			return fmt.Errorf("APPEND to a %s, not a list", typeName(t))
		}
		if err := u.b.growCharge(len(l.items), cap(l.items), len(items), 16); err != nil {
			return err
		}
		l.items = appendGrow(l.items, items...)
	case opEmptyDict:
		u.b.alloc(dictCost)
		u.push(NewDict())
	case opDict:
		items, err := u.popMark()
		if err != nil {
			return err
		}
		u.b.alloc(dictCost)
		d := NewDict()
		if err := u.setItems(d, items); err != nil {
			return err
		}
		u.push(d)
	case opSetItem, opSetItems:
		var items []any
		if op == opSetItem {
			if len(u.stack) < 2 || (len(u.marks) > 0 && len(u.stack)-2 < u.marks[len(u.marks)-1]) {
				return errors.New("stack underflow")
			}
			items = slices.Clone(u.stack[len(u.stack)-2:])
			u.stack = u.stack[:len(u.stack)-2]
		} else {
			var err error
			if items, err = u.popMarkView(); err != nil {
				return err
			}
		}
		t, err := u.top()
		if err != nil {
			return err
		}
		d, ok := t.(*Dict)
		if !ok {
			return fmt.Errorf("SETITEM on a %s, not a dict", typeName(t))
		}
		return u.setItems(d, items)
	case opPut, opBinPut, opLongBinPut:
		i, err := u.memoIndex(op)
		if err != nil {
			return err
		}
		return u.memoPut(i)
	case opMemoize:
		return u.memoPut(uint64(len(u.memo)))
	case opGet, opBinGet, opLongBinGet:
		i, err := u.memoIndex(op)
		if err != nil {
			return err
		}
		return u.memoGet(i)
	case opGlobal:
		module, err := u.line()
		if err != nil {
			return err
		}
		name, err := u.line()
		if err != nil {
			return err
		}
		g, err := allowed(module, name)
		if err != nil {
			return err
		}
		u.push(g)
	case opStackGlobal:
		nv, err := u.pop()
		if err != nil {
			return err
		}
		mv, err := u.pop()
		if err != nil {
			return err
		}
		module, ok1 := mv.(string)
		name, ok2 := nv.(string)
		if !ok1 || !ok2 {
			return errors.New("STACK_GLOBAL needs two strings")
		}
		g, err := allowed(module, name)
		if err != nil {
			return err
		}
		u.push(g)
	case opReduce:
		args, err := u.pop()
		if err != nil {
			return err
		}
		fn, err := u.pop()
		if err != nil {
			return err
		}
		t, ok := args.(Tuple)
		if !ok {
			return fmt.Errorf("REDUCE arguments are a %s, not a tuple", typeName(args))
		}
		v, err := u.call(fn, t)
		if err != nil {
			return err
		}
		u.push(v)
	case opBuild:
		state, err := u.pop()
		if err != nil {
			return err
		}
		t, err := u.top()
		if err != nil {
			return err
		}
		return u.build(t, state)
	case opPersID, opBinPersID:
		var pid any
		if op == opPersID {
			s, err := u.line()
			if err != nil {
				return err
			}
			pid = Tuple{s}
		} else {
			v, err := u.pop()
			if err != nil {
				return err
			}
			pid = v
		}
		t, ok := pid.(Tuple)
		if !ok || u.persist == nil {
			return fmt.Errorf("unsupported persistent id %s", typeName(pid))
		}
		v, err := u.persist(t)
		if err != nil {
			return err
		}
		u.push(v)
	case opNewObj, opNewObjEx, opObj, opInst:
		return errors.New("object construction (NEWOBJ/OBJ/INST) is not allowed")
	case opExt1, opExt2, opExt4:
		return errors.New("extension registry opcodes are not allowed")
	case opEmptySet, opAddItems, opFrozenSet:
		return errors.New("sets are not supported")
	case opNextBuffer, opReadonlyBuffer:
		return errors.New("out-of-band buffers are not supported")
	default:
		return fmt.Errorf("unknown opcode")
	}
	return nil
}

func decodeLong(b []byte) any {
	if len(b) == 0 {
		return int64(0)
	}
	if len(b) <= 8 {
		var x uint64
		for i := len(b) - 1; i >= 0; i-- {
			x = x<<8 | uint64(b[i])
		}
		shift := 64 - 8*uint(len(b))
		return int64(x<<shift) >> shift
	}
	be := slices.Clone(b)
	slices.Reverse(be)
	v := new(big.Int).SetBytes(be)
	if b[len(b)-1]&0x80 != 0 {
		v.Sub(v, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	return normInt(v)
}

func normInt(v *big.Int) any {
	if v.IsInt64() {
		return v.Int64()
	}
	return v
}

// maxIntDigits is Python's limit on the digits of an int read from text
// (sys.int_info.default_max_str_digits), which also bounds the quadratic conversion.
const maxIntDigits = 4300

// maxLongBytes is the size of the largest integer torch's weights_only unpickler reads
// (LONG1's one-byte length), and so the largest gotrain reads and writes.
const maxLongBytes = 255

func (u *unpickler) parseInt(s string) (any, error) {
	if len(strings.TrimLeft(s, "+-")) > maxIntDigits {
		return nil, fmt.Errorf("integer literal of more than %d digits (Python refuses it too)", maxIntDigits)
	}
	if err := u.b.alloc(4*int64(len(s)) + 256); err != nil {
		return nil, err
	}
	if err := u.b.step(int64(len(s)) * int64(len(s)/256+1)); err != nil { // quadratic conversion
		return nil, err
	}
	v, ok := new(big.Int).SetString(s, 10)
	if !ok {
		return nil, fmt.Errorf("bad integer %q", s)
	}
	if (v.BitLen()+8)/8 > maxLongBytes {
		return nil, fmt.Errorf("integer of more than %d bytes (torch's weights_only unpickler reads at most %d)", maxLongBytes, maxLongBytes)
	}
	return normInt(v), nil
}

// setItems sets key, value pairs, charging the key normalisation (hashing a key costs
// its length, every time) and each new entry.
func (u *unpickler) setItems(d *Dict, items []any) error {
	if len(items)%2 != 0 {
		return errors.New("odd number of items for a dict")
	}
	for i := 0; i < len(items); i += 2 {
		nk, dk, err := u.kn.norm(items[i], 0)
		if err != nil {
			if _, ok := err.(*LimitError); ok {
				return err
			}
			return errors.New(strings.TrimPrefix(err.Error(), "checkpoint: "))
		}
		if err := u.b.step(int64(len(dk.s)) + 1); err != nil {
			return err
		}
		if d.find(dk) < 0 {
			u.b.growCharge(len(d.keys), cap(d.keys), 1, 16)
			u.b.growCharge(len(d.vals), cap(d.vals), 1, 16)
			u.b.growCharge(len(d.nks), cap(d.nks), 1, 40)
			switch {
			case d.Len() == smallDict:
				u.b.alloc((smallDict + 1) * indexCost)
			case d.Len() > smallDict:
				u.b.alloc(indexCost)
			}
			if err := u.b.alloc(0); err != nil {
				return err
			}
		}
		d.setNorm(nk, dk, items[i+1])
	}
	return nil
}

func typeName(v any) string {
	switch v.(type) {
	case *pyList:
		return "list"
	case *Dict:
		return "dict"
	case Tuple:
		return "tuple"
	case global:
		return "global " + v.(global).module + "." + v.(global).name
	case storageType:
		return "storage class"
	case DType:
		return "dtype"
	case nil:
		return "None"
	}
	return fmt.Sprintf("%T", v)
}

// indexCost is what an entry of a Dict's index map costs, growth included.
const indexCost = 160

// tensorCost is what a Tensor costs besides its shape and strides.
const tensorCost = 128

// call applies an allowlisted global to its arguments.
func (u *unpickler) call(fn any, args Tuple) (any, error) {
	g, ok := fn.(global)
	if !ok {
		return nil, fmt.Errorf("cannot call a %s", typeName(fn))
	}
	switch g.name {
	case "OrderedDict":
		if len(args) != 0 {
			return nil, errors.New("OrderedDict with arguments is not supported")
		}
		u.b.alloc(dictCost)
		return NewOrderedDict(), nil
	case "Size":
		if len(args) != 1 {
			return nil, errors.New("torch.Size takes one argument")
		}
		switch s := args[0].(type) {
		case Tuple:
			return s, nil
		case *pyList:
			u.b.alloc(16 * int64(len(s.items)))
			return Tuple(slices.Clone(s.items)), nil
		}
		return nil, errors.New("torch.Size of a non-sequence")
	case "encode":
		if len(args) != 2 {
			return nil, errors.New("_codecs.encode takes two arguments")
		}
		s, ok1 := args[0].(string)
		enc, ok2 := args[1].(string)
		if !ok1 || !ok2 {
			return nil, errors.New("_codecs.encode takes two strings")
		}
		if err := u.b.alloc(int64(len(s))); err != nil {
			return nil, err
		}
		if err := u.b.step(int64(len(s))); err != nil {
			return nil, err
		}
		switch strings.ToLower(strings.ReplaceAll(enc, "-", "")) {
		case "latin1", "iso88591":
			b := make([]byte, 0, len(s))
			for _, r := range s {
				if r > 0xff {
					return nil, errors.New("_codecs.encode: character outside latin-1")
				}
				b = append(b, byte(r))
			}
			return b, nil
		case "utf8":
			return []byte(s), nil
		}
		return nil, fmt.Errorf("_codecs.encode: unsupported encoding %q", enc)
	case "_rebuild_tensor", "_rebuild_tensor_v2":
		want := 4
		if g.name == "_rebuild_tensor_v2" {
			want = 6
		}
		if len(args) != want && !(want == 6 && len(args) == 7) {
			return nil, fmt.Errorf("%s takes %d arguments, got %d", g.name, want, len(args))
		}
		st, ok := args[0].(*Storage)
		if !ok {
			return nil, fmt.Errorf("%s: first argument is a %s, not a storage", g.name, typeName(args[0]))
		}
		off, ok := args[1].(int64)
		if !ok {
			return nil, fmt.Errorf("%s: storage offset is not an int", g.name)
		}
		// The shape and strides are charged before they are copied out of their tuples.
		if err := u.b.alloc(tensorCost + 8*int64(seqLen(args[2])+seqLen(args[3]))); err != nil {
			return nil, err
		}
		shape, err := intTuple(args[2])
		if err != nil {
			return nil, fmt.Errorf("%s: size: %w", g.name, err)
		}
		strides, err := intTuple(args[3])
		if err != nil {
			return nil, fmt.Errorf("%s: stride: %w", g.name, err)
		}
		t := &Tensor{DType: st.DType, Shape: shape, Strides: strides, Offset: off, Storage: st}
		if want == 6 {
			rg, ok := args[4].(bool)
			if !ok {
				return nil, fmt.Errorf("%s: requires_grad is not a bool", g.name)
			}
			t.RequiresGrad = rg
			// torch sets backward hooks and metadata (conj/neg bits) from these; gotrain
			// cannot represent them, so a tensor that has any is refused, not misread.
			if !emptyOrNone(args[5]) {
				return nil, fmt.Errorf("%s: tensors with backward hooks are not supported", g.name)
			}
			if len(args) == 7 && !emptyOrNone(args[6]) {
				return nil, fmt.Errorf("%s: tensor metadata is not supported", g.name)
			}
		}
		if err := t.check(); err != nil {
			return nil, fmt.Errorf("%s: %w", g.name, err)
		}
		return t, nil
	case "_rebuild_tensor_v3":
		// (storage, offset, size, stride, requires_grad, backward_hooks, dtype[, metadata])
		// over an UntypedStorage of bytes, as torch 2.3+ pickles the dtypes without a
		// legacy storage class.
		if len(args) != 7 && len(args) != 8 {
			return nil, fmt.Errorf("%s takes 7 or 8 arguments, got %d", g.name, len(args))
		}
		st, ok := args[0].(*Storage)
		if !ok {
			return nil, fmt.Errorf("%s: first argument is a %s, not a storage", g.name, typeName(args[0]))
		}
		dt, ok := args[6].(DType)
		if !ok {
			return nil, fmt.Errorf("%s: dtype is a %s", g.name, typeName(args[6]))
		}
		if st.DType != dt {
			if !st.untyped || st.DType != Uint8 || len(st.Data)%dt.ElemSize() != 0 {
				return nil, fmt.Errorf("%s: a %s storage of %d bytes cannot hold %s elements", g.name, st.DType, len(st.Data), dt)
			}
			st.DType = dt // the bytes' first reader types them
		}
		v2 := Tuple{st, args[1], args[2], args[3], args[4], args[5]}
		if len(args) == 8 {
			v2 = append(v2, args[7])
		}
		return u.call(global{g.module, "_rebuild_tensor_v2"}, v2)
	case "_rebuild_parameter", "_rebuild_parameter_with_state":
		// (data, requires_grad, backward_hooks[, state]), as torch calls them.
		want := 3
		if g.name == "_rebuild_parameter_with_state" {
			want = 4
		}
		if len(args) != want {
			return nil, fmt.Errorf("%s takes %d arguments, got %d", g.name, want, len(args))
		}
		t, ok := args[0].(*Tensor)
		rg, ok2 := args[1].(bool)
		if !ok || !ok2 {
			return nil, fmt.Errorf("%s: bad arguments", g.name)
		}
		if !emptyOrNone(args[2]) || (want == 4 && !emptyOrNone(args[3])) {
			return nil, fmt.Errorf("%s: parameters with backward hooks or attributes are not supported", g.name)
		}
		if err := u.b.alloc(tensorCost); err != nil {
			return nil, err
		}
		p := *t
		p.RequiresGrad = rg
		return &p, nil
	}
	return nil, fmt.Errorf("cannot call %s.%s", g.module, g.name)
}

// seqLen is the length of a tuple or list (0 for anything else).
func seqLen(v any) int {
	switch t := v.(type) {
	case Tuple:
		return len(t)
	case *pyList:
		return len(t.items)
	}
	return 0
}

func intTuple(v any) ([]int64, error) {
	var items []any
	switch t := v.(type) {
	case Tuple:
		items = t
	case *pyList:
		items = t.items
	default:
		return nil, fmt.Errorf("a %s, not a tuple", typeName(v))
	}
	out := make([]int64, len(items))
	for i, e := range items {
		x, ok := e.(int64)
		if !ok {
			return nil, fmt.Errorf("element %d is a %s, not an int", i, typeName(e))
		}
		out[i] = x
	}
	return out, nil
}

// emptyOrNone reports whether v is None or an empty dict (torch's empty backward
// hooks, metadata and state).
func emptyOrNone(v any) bool {
	d, ok := v.(*Dict)
	return v == nil || (ok && d.Len() == 0 && d.Attrs.Len() == 0)
}

// build applies BUILD to an OrderedDict as torch's weights_only unpickler does:
// inst.__dict__.update(state). Only a dict state is accepted: update would read any
// other iterable (a tuple, as pickle's (state, slotstate)) as key-value pairs.
func (u *unpickler) build(target, state any) error {
	d, ok := target.(*Dict)
	if !ok || d.Kind != OrderedDict {
		return fmt.Errorf("BUILD on a %s (only OrderedDict is allowed)", typeName(target))
	}
	sd, ok := state.(*Dict)
	if !ok {
		return fmt.Errorf("BUILD state is a %s, not a dict", typeName(state))
	}
	if d.Attrs == nil {
		u.b.alloc(dictCost)
		d.Attrs = NewDict()
	}
	// Charged before the copy is made, as every entry count is.
	if err := u.b.alloc(32 * int64(sd.Len())); err != nil {
		return err
	}
	items := make([]any, 0, 2*sd.Len())
	for k, v := range sd.All() {
		items = append(items, k, v)
	}
	return u.setItems(d.Attrs, items)
}

// finish replaces the machine's internal list type by []any throughout the value (in
// place: every reference to a shared list or tuple sees the same converted one) and
// rejects cyclic and over-deep values, so that callers can walk the result recursively.
// It also measures the value's expanded size, what a tree walker (printing, writing as
// JSON) that copies shared parts would produce, and refuses values beyond the budget's
// MaxExpanded: a "billion laughs" built with the memo stays small in the file and in
// memory, but not for such walkers.
func finish(v any, b *budget) (any, error) {
	limit := int64(math.MaxInt64)
	if b != nil {
		limit = b.maxExpanded
	}
	f := &finisher{lists: map[*pyList]int64{}, dicts: map[*Dict]int64{}, tuples: map[*any]int64{},
		b: b, limit: limit}
	out, n, err := f.value(v, 0)
	if err == nil && n > f.limit {
		err = &LimitError{"expanded size", f.limit, "MaxExpanded"}
	}
	return out, err
}

type finisher struct {
	// Expanded sizes of the containers visited; 0 while one is in progress.
	lists  map[*pyList]int64
	dicts  map[*Dict]int64
	tuples map[*any]int64
	b      *budget
	limit  int64
}

var errCycle = errors.New("recursive container (a container that holds itself) is not supported")

// visitCost is what recording a visited container costs.
const visitCost = 96

func (f *finisher) seq(items []any, depth int) (int64, error) {
	if err := f.b.step(int64(len(items)) + 1); err != nil {
		return 0, err
	}
	if err := f.b.alloc(visitCost); err != nil {
		return 0, err
	}
	size := int64(24)
	for i, e := range items {
		ev, n, err := f.value(e, depth+1)
		if err != nil {
			return 0, err
		}
		items[i] = ev
		size = min(satAdd(size, n), f.limit+1)
	}
	return size, nil
}

func (f *finisher) value(v any, depth int) (any, int64, error) {
	if depth > maxDepth {
		return nil, 0, fmt.Errorf("values nested deeper than %d", maxDepth)
	}
	switch x := v.(type) {
	case *pyList:
		if len(x.items) == 0 {
			return []any{}, 24, nil // nothing to convert or to share
		}
		if size, ok := f.lists[x]; ok {
			if size == 0 {
				return nil, 0, errCycle
			}
			return x.items, size, nil
		}
		f.lists[x] = 0
		size, err := f.seq(x.items, depth)
		if err != nil {
			return nil, 0, err
		}
		if x.items == nil {
			x.items = []any{}
		}
		f.lists[x] = size
		return x.items, size, nil
	case Tuple:
		if len(x) == 0 {
			return x, 24, nil
		}
		if size, ok := f.tuples[&x[0]]; ok {
			if size == 0 {
				return nil, 0, errCycle
			}
			return x, size, nil
		}
		f.tuples[&x[0]] = 0
		size, err := f.seq(x, depth)
		if err != nil {
			return nil, 0, err
		}
		f.tuples[&x[0]] = size
		return x, size, nil
	case *Dict:
		if x.Len() == 0 && x.Attrs == nil {
			return x, 64, nil
		}
		if size, ok := f.dicts[x]; ok {
			if size == 0 {
				return nil, 0, errCycle
			}
			return x, size, nil
		}
		f.dicts[x] = 0
		if err := f.b.step(int64(x.Len()) + 1); err != nil {
			return nil, 0, err
		}
		if err := f.b.alloc(visitCost); err != nil {
			return nil, 0, err
		}
		size := int64(64)
		for i, e := range x.vals {
			ev, n, err := f.value(e, depth+1)
			if err != nil {
				return nil, 0, err
			}
			x.vals[i] = ev
			size = min(satAdd(size, satAdd(n, keySize(x.nks[i]))), f.limit+1)
		}
		if x.Attrs != nil {
			_, n, err := f.value(x.Attrs, depth+1)
			if err != nil {
				return nil, 0, err
			}
			size = min(satAdd(size, n), f.limit+1)
		}
		f.dicts[x] = size
		return x, size, nil
	case global, storageType, *Storage:
		return nil, 0, fmt.Errorf("a bare %s cannot be a value", typeName(v))
	case string:
		return v, 16 + int64(len(x)), nil
	case []byte:
		return v, 24 + int64(len(x)), nil
	case *big.Int:
		return v, 16 + int64(len(x.Bits()))*8, nil
	case *Tensor:
		return v, 64 + 16*int64(len(x.Shape)), nil
	}
	return v, 16, nil
}

// keySize is a key's share of its dict's expanded size.
func keySize(k dictKey) int64 { return 16 + int64(len(k.s)) }
