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
	return fmt.Sprintf("checkpoint: refusing global %s.%s: not on the allowlist of tensor, storage and container types", e.Module, e.Name)
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
}

func newUnpickler(data []byte, persist func(Tuple) (any, error)) *unpickler {
	return &unpickler{data: data, memo: map[uint64]any{}, persist: persist}
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
	s := string(u.data[u.pos : u.pos+i])
	u.pos += i + 1
	return strings.TrimSuffix(s, "\r"), nil
}

func (u *unpickler) push(v any) { u.stack = append(u.stack, v) }

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

// popMark returns the items above the topmost mark and removes them and the mark.
func (u *unpickler) popMark() ([]any, error) {
	if len(u.marks) == 0 {
		return nil, errors.New("no MARK on the stack")
	}
	m := u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
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
		if op == opStop {
			v, err := u.pop()
			if err != nil {
				return nil, fmt.Errorf("pickle STOP at offset %d: %w", at, err)
			}
			return finish(v, len(u.data))
		}
		if err := u.step(op); err != nil {
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
		u.marks = append(u.marks, len(u.stack))
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
			v, err := parseInt(s)
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
		v, err := parseInt(strings.TrimSuffix(s, "L"))
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
		u.push(slices.Clone(b))
	case opEmptyTuple:
		u.push(Tuple{})
	case opTuple1, opTuple2, opTuple3:
		n := int(op-opTuple1) + 1
		if len(u.stack) < n || (len(u.marks) > 0 && len(u.stack)-n < u.marks[len(u.marks)-1]) {
			return errors.New("stack underflow")
		}
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
		u.push(&pyList{})
	case opList:
		items, err := u.popMark()
		if err != nil {
			return err
		}
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
			if items, err = u.popMark(); err != nil {
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
		l.items = append(l.items, items...)
	case opEmptyDict:
		u.push(NewDict())
	case opDict:
		items, err := u.popMark()
		if err != nil {
			return err
		}
		d := NewDict()
		if err := setItems(d, items); err != nil {
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
			if items, err = u.popMark(); err != nil {
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
		return setItems(d, items)
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
		v, err := call(fn, t)
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
		return build(t, state)
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

func parseInt(s string) (any, error) {
	if len(s) > 10000 {
		return nil, errors.New("integer literal too long")
	}
	v, ok := new(big.Int).SetString(s, 10)
	if !ok {
		return nil, fmt.Errorf("bad integer %q", s)
	}
	return normInt(v), nil
}

func setItems(d *Dict, items []any) error {
	if len(items)%2 != 0 {
		return errors.New("odd number of items for a dict")
	}
	for i := 0; i < len(items); i += 2 {
		if err := d.set(items[i], items[i+1]); err != nil {
			return errors.New(strings.TrimPrefix(err.Error(), "checkpoint: "))
		}
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

// call applies an allowlisted global to its arguments.
func call(fn any, args Tuple) (any, error) {
	g, ok := fn.(global)
	if !ok {
		return nil, fmt.Errorf("cannot call a %s", typeName(fn))
	}
	switch g.name {
	case "OrderedDict":
		if len(args) != 0 {
			return nil, errors.New("OrderedDict with arguments is not supported")
		}
		return NewOrderedDict(), nil
	case "Size":
		if len(args) != 1 {
			return nil, errors.New("torch.Size takes one argument")
		}
		switch s := args[0].(type) {
		case Tuple:
			return s, nil
		case *pyList:
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
		return call(global{g.module, "_rebuild_tensor_v2"}, v2)
	case "_rebuild_parameter", "_rebuild_parameter_with_state":
		if len(args) < 3 {
			return nil, fmt.Errorf("%s: too few arguments", g.name)
		}
		t, ok := args[0].(*Tensor)
		rg, ok2 := args[1].(bool)
		if !ok || !ok2 {
			return nil, fmt.Errorf("%s: bad arguments", g.name)
		}
		p := *t
		p.RequiresGrad = rg
		return &p, nil
	}
	return nil, fmt.Errorf("cannot call %s.%s", g.module, g.name)
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

func build(target, state any) error {
	d, ok := target.(*Dict)
	if !ok || d.Kind != OrderedDict {
		return fmt.Errorf("BUILD on a %s (only OrderedDict is allowed)", typeName(target))
	}
	if state == nil {
		return nil
	}
	// (state, slotstate) as object.__reduce_ex__ produces; slots are not expected.
	if t, ok := state.(Tuple); ok && len(t) == 2 {
		if t[1] != nil {
			return errors.New("BUILD with slot state is not supported")
		}
		state = t[0]
	}
	sd, ok := state.(*Dict)
	if !ok {
		return fmt.Errorf("BUILD state is a %s, not a dict", typeName(state))
	}
	if d.Attrs == nil {
		d.Attrs = NewDict()
	}
	for k, v := range sd.All() {
		if err := d.Attrs.set(k, v); err != nil {
			return err
		}
	}
	return nil
}

// finish replaces the machine's internal list type by []any throughout the value and
// rejects cyclic and over-deep values, so that callers can walk the result recursively.
// It also rejects values whose shared containers expand, as a tree, to far more values
// than the pickle holds (a "billion laughs" built with the memo), since every tree
// walker (printing, writing) would take exponential time on them.
func finish(v any, pickleLen int) (any, error) {
	f := &finisher{lists: map[*pyList]done{}, dicts: map[*Dict]int64{}, tuples: map[*any]done{},
		limit: 1<<20 + 16*int64(pickleLen)}
	out, n, err := f.value(v, 0)
	if err == nil && n > f.limit {
		err = fmt.Errorf("shared containers expand to more than %d values", f.limit)
	}
	return out, err
}

type done struct {
	v    []any
	size int64 // 0: in progress
}

type finisher struct {
	lists  map[*pyList]done
	dicts  map[*Dict]int64 // 0: in progress
	tuples map[*any]done
	limit  int64
}

var errCycle = errors.New("recursive container (a container that holds itself) is not supported")

func (f *finisher) seq(items []any, depth int) ([]any, int64, error) {
	out := make([]any, len(items))
	size := int64(1)
	for i, e := range items {
		ev, n, err := f.value(e, depth+1)
		if err != nil {
			return nil, 0, err
		}
		out[i] = ev
		size = min(size+n, f.limit+1)
	}
	return out, size, nil
}

func (f *finisher) value(v any, depth int) (any, int64, error) {
	if depth > maxDepth {
		return nil, 0, fmt.Errorf("values nested deeper than %d", maxDepth)
	}
	switch x := v.(type) {
	case *pyList:
		if d, ok := f.lists[x]; ok {
			if d.size == 0 {
				return nil, 0, errCycle
			}
			return d.v, d.size, nil
		}
		f.lists[x] = done{}
		out, size, err := f.seq(x.items, depth)
		if err != nil {
			return nil, 0, err
		}
		f.lists[x] = done{out, size}
		return out, size, nil
	case Tuple:
		if len(x) == 0 {
			return x, 1, nil
		}
		if d, ok := f.tuples[&x[0]]; ok {
			if d.size == 0 {
				return nil, 0, errCycle
			}
			return Tuple(d.v), d.size, nil
		}
		f.tuples[&x[0]] = done{}
		out, size, err := f.seq(x, depth)
		if err != nil {
			return nil, 0, err
		}
		f.tuples[&x[0]] = done{out, size}
		return Tuple(out), size, nil
	case *Dict:
		if size, ok := f.dicts[x]; ok {
			if size == 0 {
				return nil, 0, errCycle
			}
			return x, size, nil
		}
		f.dicts[x] = 0
		size := int64(1 + x.Len())
		for i, e := range x.vals {
			ev, n, err := f.value(e, depth+1)
			if err != nil {
				return nil, 0, err
			}
			x.vals[i] = ev
			size = min(size+n, f.limit+1)
		}
		if x.Attrs != nil {
			_, n, err := f.value(x.Attrs, depth+1)
			if err != nil {
				return nil, 0, err
			}
			size = min(size+n, f.limit+1)
		}
		f.dicts[x] = size
		return x, size, nil
	case global, storageType, *Storage:
		return nil, 0, fmt.Errorf("a bare %s cannot be a value", typeName(v))
	}
	return v, 1, nil
}
