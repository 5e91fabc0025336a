package torch

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gotrain/gotrain/cgotorch"
)

// Tensor is a libtorch tensor. The zero value is not usable; tensors come from the
// constructors and operations in this package.
type Tensor struct {
	h     cgotorch.Tensor
	scope *Scope // the scope that owns the handle, nil when the Tensor owns it
	// guard is the runtime cleanup that frees an owned handle the program dropped; nil
	// while a scope owns the handle. It is a pointer so that the Tensors of a scope, made
	// by the hundred in every step, stay three words: every byte of them is new memory
	// the step writes (the collector, not the step, recycles it).
	guard *runtime.Cleanup
}

// LiveTensors returns the number of tensor handles created and not yet freed.
func LiveTensors() int64 { return cgotorch.LiveHandles() }

var hostReads atomic.Int64

// HostReads returns how many times a tensor's values have been read back to Go (Item,
// ItemInt, Data and the slice accessors, checkpoint copies). On a CUDA device each read is
// a host synchronisation, so a training loop counts them to prove it has none per step.
func HostReads() int64 { return hostReads.Load() }

// Scope owns the tensors created while it is the innermost open scope of its goroutine.
//
// The handles themselves live in a frame of the C side's per-thread scope stack: every
// op's result names the frame that adopted its handles, so creating a tensor takes no lock
// and no extra call, and Close frees the whole frame in one call.
type Scope struct {
	slot   int32
	closed bool
	// cells holds the Tensors of the scope's results, allocated a block at a time: a step
	// makes hundreds of tensors, and one Go allocation per block instead of per tensor
	// took 4% of a tiny op's instructions. A Tensor kept past Close keeps its block.
	cells []Tensor
	done  int // Tensors in the blocks before cells
	hint  int // Tensors the scope this one renewed made: the size of the first block
}

// cellBlock bounds the Tensors allocated at once for a scope; blocks double from 4.
const cellBlock = 64

// cell returns a new Tensor of s for h.
func (s *Scope) cell(h cgotorch.Tensor) *Tensor {
	if len(s.cells) == cap(s.cells) {
		s.grow()
	}
	s.cells = s.cells[:len(s.cells)+1]
	t := &s.cells[len(s.cells)-1]
	t.h, t.scope = h, s
	return t
}

// grow starts the scope's next block of Tensors (the last one stays with the Tensors in it).
func (s *Scope) grow() {
	s.done += len(s.cells)
	s.cells = make([]Tensor, 0, min(max(2*cap(s.cells), 4, s.hint), cellBlock))
}

// maxScopes bounds the scopes open at once in the process (all goroutines, all depths).
const maxScopes = 1 << 14

var (
	// scopes maps a frame's slot to its Scope. A slot is written by NewScope before its
	// frame exists and read only by the goroutine that owns the frame, so reads need no lock.
	scopes    [maxScopes]*Scope
	slotMu    sync.Mutex
	freeSlots []int32
	nextSlot  int32 = 1
)

func allocSlot(s *Scope) {
	slotMu.Lock()
	defer slotMu.Unlock()
	if n := len(freeSlots); n > 0 {
		s.slot = freeSlots[n-1]
		freeSlots = freeSlots[:n-1]
	} else {
		if nextSlot >= maxScopes {
			panic(&Error{Op: "scope", Msg: fmt.Sprintf("more than %d scopes open at once (is a scope leaking?)", maxScopes-1)})
		}
		s.slot = nextSlot
		nextSlot++
	}
	scopes[s.slot] = s
}

func freeSlot(slot int32) {
	slotMu.Lock()
	scopes[slot] = nil
	freeSlots = append(freeSlots, slot)
	slotMu.Unlock()
}

// NewScope opens a scope; tensors this goroutine creates until the scope closes belong
// to it. Scopes are per goroutine: the goroutine is locked to its OS thread until Close
// (tensors made on other goroutines meanwhile are theirs), so Close must be called on the
// goroutine that opened the scope.
func NewScope() *Scope {
	runtime.LockOSThread()
	s := &Scope{}
	allocSlot(s)
	if err := cgotorch.ScopeOpen(s.slot); err != nil {
		freeSlot(s.slot)
		runtime.UnlockOSThread()
		panic(wrapErr("scope", err))
	}
	return s
}

// WithScope runs f in a new scope and closes it afterwards, also when f panics.
func WithScope(f func()) {
	s := NewScope()
	defer s.Close()
	f()
}

// Close frees every tensor the scope still owns, in one call. Scopes close innermost
// first, on the goroutine that opened them; anything else panics.
func (s *Scope) Close() {
	if s.closed {
		return
	}
	if err := cgotorch.ScopeClose(s.slot); err != nil {
		panic(&Error{Op: "scope", Msg: "Scope.Close: scopes must be closed innermost first, on the goroutine that opened them"})
	}
	s.closed = true
	freeSlot(s.slot)
	runtime.UnlockOSThread()
}

// Renew closes s and returns a new scope in its place, with one call into libtorch
// where Close and NewScope take two: what a loop that frees each step's tensors does
// between steps. The tensors s owned are freed (using one panics, as after Close); the returned scope is
// the goroutine's innermost, as s was, and is closed like any other. Renew, like Close,
// must be called on the goroutine that opened s, with no scope opened since still open.
func (s *Scope) Renew() *Scope {
	if s.closed {
		panic(&Error{Op: "scope", Msg: "Scope.Renew: the scope is closed"})
	}
	if err := cgotorch.ScopeReset(s.slot); err != nil {
		panic(&Error{Op: "scope", Msg: "Scope.Renew: scopes must be renewed innermost, on the goroutine that opened them"})
	}
	n := &Scope{slot: s.slot, hint: s.done + len(s.cells)}
	s.closed = true
	scopes[s.slot] = n // read only by this goroutine, as NewScope's write
	return n
}

// Keep moves tensors out of s: into the enclosing scope, or, when s is outermost, to the
// caller, who frees them with Free (a runtime cleanup stands behind as a safety net).
// It returns its first argument, for `return s.Keep(y)`.
func (s *Scope) Keep(ts ...*Tensor) *Tensor {
	for _, t := range ts {
		if t == nil || t.scope != s || t.h == 0 {
			continue
		}
		now, err := cgotorch.ScopeMove(t.h, s.slot)
		check("keep", err)
		if now == 0 {
			t.scope = nil
			t.guardHandle()
		} else {
			t.scope = scopes[now]
		}
	}
	if len(ts) == 0 {
		return nil
	}
	return ts[0]
}

// Escape moves t out of whatever scope owns it, so that only Free (or the safety-net
// cleanup) releases it. Modules and optimizers use it for the tensors they own.
func (t *Tensor) Escape() *Tensor {
	if t.scope != nil && t.h != 0 {
		check("escape", cgotorch.ScopeDisown(t.h, t.scope.slot))
		t.scope = nil
		t.guardHandle()
	}
	return t
}

func (t *Tensor) guardHandle() {
	if t.guard == nil {
		c := runtime.AddCleanup(t, cgotorch.TensorFree, t.h)
		t.guard = &c
	}
}

// adopt wraps an op's result: its handle belongs to the scope the C side named, or to the
// new Tensor when none was open. A failure panics with a *Error for op.
func adopt(op string, r cgotorch.Result) *Tensor {
	if r.Err != nil || r.Scope == 0 || r.T == 0 {
		return adoptOwned(op, r)
	}
	return scopes[r.Scope].cell(r.T) // the common case, inlined into every op
}

// adoptOwned is adopt's failure and no-scope path.
func adoptOwned(op string, r cgotorch.Result) *Tensor {
	if r.Err != nil {
		panic(opErr(op, r.Err))
	}
	return wrapIn(r.T, r.Scope)
}

func adopt2(op string, r cgotorch.Result2) (*Tensor, *Tensor) {
	if r.Err != nil {
		panic(opErr(op, r.Err))
	}
	return wrapIn(r.T0, r.Scope), wrapIn(r.T1, r.Scope)
}

func adoptN(op string, r cgotorch.Results) []*Tensor {
	if r.Err != nil {
		panic(opErr(op, r.Err))
	}
	out := make([]*Tensor, len(r.Ts))
	for i, h := range r.Ts {
		out[i] = wrapIn(h, r.Scope)
	}
	return out
}

// wrapIn takes a handle that frame slot owns (slot 0: the Tensor owns it).
func wrapIn(h cgotorch.Tensor, slot int32) *Tensor {
	if h == 0 {
		return nil
	}
	if slot != 0 {
		return scopes[slot].cell(h)
	}
	t := &Tensor{h: h}
	t.guardHandle()
	return t
}

// owned wraps a handle no scope adopted (an out-parameter of a hand-written function).
func owned(h cgotorch.Tensor) *Tensor { return wrapIn(h, 0) }

func (t *Tensor) release() {
	if t.h == 0 {
		return
	}
	if t.guard != nil {
		t.guard.Stop()
		t.guard = nil
	}
	cgotorch.TensorFree(t.h)
	t.h = 0
}

// Free releases the tensor now. Using it afterwards panics. Freeing twice is harmless.
// A tensor a scope owns is freed on the goroutine that opened the scope.
func (t *Tensor) Free() {
	if t == nil || t.h == 0 {
		return
	}
	if s := t.scope; s != nil {
		if !s.closed {
			check("free", cgotorch.ScopeFree(t.h, s.slot))
		}
		t.scope, t.h = nil, 0
		return
	}
	t.release()
}

// handle returns the handle for a call, panicking on a freed tensor or one whose scope
// closed.
func (t *Tensor) handle() cgotorch.Tensor {
	if t.h == 0 || (t.scope != nil && t.scope.closed) {
		panic(&Error{Op: "use", Msg: "tensor used after Free or after its scope closed"})
	}
	return t.h
}

// ---- metadata ----

// Dim returns the number of dimensions.
func (t *Tensor) Dim() int { return cgotorch.Dim(t.handle()) }

// Shape returns the sizes of the dimensions.
func (t *Tensor) Shape() []int64 { return t.perDim(cgotorch.Sizes) }

// perDim returns the tensor's values per dimension that get writes.
func (t *Tensor) perDim(get func(cgotorch.Tensor, []int64)) []int64 {
	s := make([]int64, t.Dim())
	get(t.handle(), s)
	return s
}

// Size returns the size of dimension d (negative d counts from the end).
func (t *Tensor) Size(d int) int64 {
	s := t.Shape()
	if d < 0 {
		d += len(s)
	}
	if d < 0 || d >= len(s) {
		panic(&Error{Op: "size", Msg: fmt.Sprintf("dimension %d out of range for a %d-d tensor", d, len(s))})
	}
	return s[d]
}

// Strides returns the strides in elements.
func (t *Tensor) Strides() []int64 { return t.perDim(cgotorch.Strides) }

// Numel returns the number of elements.
func (t *Tensor) Numel() int64 { return cgotorch.Numel(t.handle()) }

// DType returns the element type.
func (t *Tensor) DType() DType { return DType(cgotorch.DType(t.handle())) }

// Device returns the device holding the tensor.
func (t *Tensor) Device() Device {
	typ, idx := cgotorch.Device(t.handle())
	return Device{Type: DeviceType(typ), Index: idx}
}

// IsContiguous reports whether the tensor is contiguous in memory.
func (t *Tensor) IsContiguous() bool { return cgotorch.IsContiguous(t.handle()) }

// StorageOffset returns the offset of the first element in its storage.
func (t *Tensor) StorageOffset() int64 { return cgotorch.StorageOffset(t.handle()) }

// dataPtr returns the address of the first element (valid while t lives; CPU tensors
// are host memory).
func (t *Tensor) dataPtr() unsafe.Pointer { return cgotorch.DataPtr(t.handle()) }

// ---- creation ----

func shapeOrLen(shape []int64, n int) []int64 {
	if len(shape) == 0 {
		return []int64{int64(n)}
	}
	return shape
}

func checkCount(op string, shape []int64, n int) {
	p := int64(1)
	for _, d := range shape {
		if d < 0 {
			panic(&Error{Op: op, Msg: fmt.Sprintf("negative dimension in shape %v", shape)})
		}
		p *= d
	}
	if p != int64(n) {
		panic(&Error{Op: op, Msg: fmt.Sprintf("shape %v needs %d elements, got %d", shape, p, n)})
	}
}

func fromSlice[T Elem](op string, data []T, shape []int64, pinned bool) *Tensor {
	shape = shapeOrLen(shape, len(data))
	checkCount(op, shape, len(data))
	var p unsafe.Pointer
	if len(data) > 0 {
		p = unsafe.Pointer(&data[0])
	}
	return adopt(op, cgotorch.FromBlob(p, shape, int(DTypeOf[T]()), pinned))
}

// FromSlice copies data into a new CPU tensor of the given shape (1-D when shape is
// omitted). The dtype follows T: []float32 gives float32, []int64 gives int64, and so on.
func FromSlice[T Elem](data []T, shape ...int64) *Tensor {
	return fromSlice("from_slice", data, shape, false)
}

// FromSlicePinned is FromSlice into pinned (page-locked) host memory, the source for
// non-blocking copies to a CUDA device. Without CUDA it fails.
func FromSlicePinned[T Elem](data []T, shape ...int64) *Tensor {
	return fromSlice("from_slice_pinned", data, shape, true)
}

// Scalar returns a 0-dimensional float32 tensor.
func Scalar(v float64) *Tensor { return Full(nil, v, Float32, CPU) }

// RandpermSeeded returns torch.randperm(n, generator=g) for a CPU generator g seeded with
// seed: the permutation PyTorch's DistributedSampler uses for seed+epoch.
func RandpermSeeded(n int64, seed int64) []int64 {
	out := make([]int64, n)
	check("randperm", cgotorch.RandpermSeeded(uint64(seed), out))
	return out
}

// ---- export ----

// Data copies the tensor's elements (converted to T's dtype, from any device and layout)
// into a new Go slice in row-major order.
func Data[T Elem](t *Tensor) []T {
	want := DTypeOf[T]()
	src := t
	if t.DType() != want {
		src = t.ToDType(want)
		defer src.Free()
	}
	hostReads.Add(1)
	out := make([]T, src.Numel())
	var p unsafe.Pointer
	if len(out) > 0 {
		p = unsafe.Pointer(&out[0])
	}
	check("copy_to_host", cgotorch.CopyToHost(src.handle(), p, int64(len(out))*int64(want.Size())))
	return out
}

// Float32s returns the elements as float32.
func (t *Tensor) Float32s() []float32 { return Data[float32](t) }

// Float64s returns the elements as float64.
func (t *Tensor) Float64s() []float64 { return Data[float64](t) }

// Int64s returns the elements as int64.
func (t *Tensor) Int64s() []int64 { return Data[int64](t) }

// Bools returns the elements as bool.
func (t *Tensor) Bools() []bool { return Data[bool](t) }

// Item returns the value of a one-element tensor.
func (t *Tensor) Item() float64 {
	hostReads.Add(1)
	d, _, err := cgotorch.Item(t.handle())
	check("item", err)
	return d
}

// ItemInt returns the value of a one-element integer tensor.
func (t *Tensor) ItemInt() int64 {
	hostReads.Add(1)
	_, i, err := cgotorch.Item(t.handle())
	check("item", err)
	return i
}

// ---- conversion ----

// Alias returns a second handle to the same tensor (same storage, same autograd
// identity), owned by the current scope.
func (t *Tensor) Alias() *Tensor { return adopt("alias", cgotorch.ShallowClone(t.handle())) }

func fromBlobStrided(p unsafe.Pointer, shape, strides []int64, dt DType) *Tensor {
	return adopt("from_blob", cgotorch.FromBlobStrided(p, shape, strides, int(dt)))
}

func copyToHost(t *Tensor, dst unsafe.Pointer, n int64) error {
	hostReads.Add(1)
	return wrapErr("copy_to_host", cgotorch.CopyToHost(t.handle(), dst, n))
}
