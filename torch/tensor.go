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
	h       cgotorch.Tensor
	scope   *Scope
	cleanup runtime.Cleanup
	guarded bool // a runtime cleanup is registered
}

var live atomic.Int64

// LiveTensors returns the number of tensor handles created and not yet freed.
func LiveTensors() int64 { return live.Load() }

var hostReads atomic.Int64

// HostReads returns how many times a tensor's values have been read back to Go (Item,
// ItemInt, Data and the slice accessors, checkpoint copies). On a CUDA device each read is
// a host synchronisation, so a training loop counts them to prove it has none per step.
func HostReads() int64 { return hostReads.Load() }

// Scope owns the tensors created while it is the innermost open scope of its goroutine.
type Scope struct {
	parent  *Scope
	tid     int64 // the OS thread its goroutine is locked to while it is open
	tensors []*Tensor
	closed  bool
}

var (
	scopeMu sync.Mutex
	// current is the innermost open scope of each OS thread with one open. A goroutine
	// with an open scope is locked to its thread, so this is per goroutine.
	current = map[int64]*Scope{}
	// scoped counts the threads with an open scope: zero lets wrap skip the lookup.
	scoped atomic.Int32
)

// NewScope opens a scope; tensors this goroutine creates until the scope closes belong
// to it. Scopes are per goroutine: the goroutine is locked to its OS thread until Close
// (tensors made on other goroutines meanwhile are theirs), so Close must be called on the
// goroutine that opened the scope.
func NewScope() *Scope {
	runtime.LockOSThread()
	tid := cgotorch.ThreadID()
	scopeMu.Lock()
	s := &Scope{parent: current[tid], tid: tid}
	if s.parent == nil {
		scoped.Add(1)
	}
	current[tid] = s
	scopeMu.Unlock()
	return s
}

// WithScope runs f in a new scope and closes it afterwards, also when f panics.
func WithScope(f func()) {
	s := NewScope()
	defer s.Close()
	f()
}

// Close frees every tensor the scope still owns. Scopes close innermost first.
func (s *Scope) Close() {
	scopeMu.Lock()
	if s.closed {
		scopeMu.Unlock()
		return
	}
	if current[s.tid] != s || cgotorch.ThreadID() != s.tid {
		scopeMu.Unlock()
		panic("torch: Scope.Close: scopes must be closed innermost first, on the goroutine that opened them")
	}
	if s.parent == nil {
		delete(current, s.tid)
		scoped.Add(-1)
	} else {
		current[s.tid] = s.parent
	}
	s.closed = true
	ts := s.tensors
	s.tensors = nil
	scopeMu.Unlock()
	runtime.UnlockOSThread()
	for i := len(ts) - 1; i >= 0; i-- {
		if t := ts[i]; t.scope == s {
			t.release()
		}
	}
}

// Keep moves tensors out of s: into the enclosing scope, or, when s is outermost, to the
// caller, who frees them with Free (a runtime cleanup stands behind as a safety net).
// It returns its first argument, for `return s.Keep(y)`.
func (s *Scope) Keep(ts ...*Tensor) *Tensor {
	scopeMu.Lock()
	defer scopeMu.Unlock()
	for _, t := range ts {
		if t == nil || t.scope != s {
			continue
		}
		t.scope = s.parent
		if s.parent != nil {
			s.parent.tensors = append(s.parent.tensors, t)
		} else {
			t.guard()
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
	scopeMu.Lock()
	if t.scope != nil {
		t.scope = nil
		t.guard()
	}
	scopeMu.Unlock()
	return t
}

func freeHandle(h cgotorch.Tensor) {
	cgotorch.TensorFree(h)
	live.Add(-1)
}

func (t *Tensor) guard() {
	if !t.guarded {
		t.cleanup = runtime.AddCleanup(t, freeHandle, t.h)
		t.guarded = true
	}
}

// wrap takes ownership of a handle returned by cgotorch.
func wrap(h cgotorch.Tensor) *Tensor {
	if h == nil {
		return nil
	}
	live.Add(1)
	t := &Tensor{h: h}
	if scoped.Load() > 0 {
		tid := cgotorch.ThreadID()
		scopeMu.Lock()
		if s := current[tid]; s != nil {
			t.scope = s
			s.tensors = append(s.tensors, t)
		}
		scopeMu.Unlock()
	}
	if t.scope == nil {
		t.guard()
	}
	return t
}

func must(op string, h cgotorch.Tensor, err error) *Tensor {
	check(op, err)
	return wrap(h)
}

func (t *Tensor) release() {
	if t.h == nil {
		return
	}
	if t.guarded {
		t.cleanup.Stop()
		t.guarded = false
	}
	freeHandle(t.h)
	t.h = nil
}

// Free releases the tensor now. Using it afterwards panics. Freeing twice is harmless.
func (t *Tensor) Free() {
	if t == nil {
		return
	}
	scopeMu.Lock()
	t.scope = nil
	scopeMu.Unlock()
	t.release()
}

// Handle returns the cgotorch handle, for packages that call the C boundary directly.
func (t *Tensor) Handle() cgotorch.Tensor {
	if t.h == nil {
		panic(&Error{Op: "use", Msg: "tensor used after Free"})
	}
	return t.h
}

// FromHandle wraps a cgotorch handle the caller owns; the Tensor takes it over.
func FromHandle(h cgotorch.Tensor) *Tensor { return wrap(h) }

// ---- metadata ----

// Dim returns the number of dimensions.
func (t *Tensor) Dim() int { return cgotorch.Dim(t.Handle()) }

// Shape returns the sizes of the dimensions.
func (t *Tensor) Shape() []int64 {
	s := make([]int64, t.Dim())
	cgotorch.Sizes(t.h, s)
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
func (t *Tensor) Strides() []int64 {
	s := make([]int64, t.Dim())
	cgotorch.Strides(t.Handle(), s)
	return s
}

// Numel returns the number of elements.
func (t *Tensor) Numel() int64 { return cgotorch.Numel(t.Handle()) }

// DType returns the element type.
func (t *Tensor) DType() DType { return DType(cgotorch.DType(t.Handle())) }

// Device returns the device holding the tensor.
func (t *Tensor) Device() Device {
	typ, idx := cgotorch.Device(t.Handle())
	return Device{Type: DeviceType(typ), Index: idx}
}

// IsContiguous reports whether the tensor is contiguous in memory.
func (t *Tensor) IsContiguous() bool { return cgotorch.IsContiguous(t.Handle()) }

// StorageOffset returns the offset of the first element in its storage.
func (t *Tensor) StorageOffset() int64 { return cgotorch.StorageOffset(t.Handle()) }

// DataPtr returns the address of the first element (valid while t lives; CPU tensors
// are host memory).
func (t *Tensor) DataPtr() unsafe.Pointer { return cgotorch.DataPtr(t.Handle()) }

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
	h, err := cgotorch.FromBlob(p, shape, int(DTypeOf[T]()), pinned)
	return must(op, h, err)
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

func fill(op string, kind int, shape []int64, dtype DType, dev Device) *Tensor {
	h, err := cgotorch.Fill(kind, shape, int(dtype), int(dev.Type), dev.Index)
	return must(op, h, err)
}

// Empty returns an uninitialised tensor.
func Empty(shape []int64, dtype DType, dev Device) *Tensor {
	return fill("empty", cgotorch.FillEmpty, shape, dtype, dev)
}

// Zeros returns a tensor of zeros.
func Zeros(shape []int64, dtype DType, dev Device) *Tensor {
	return fill("zeros", cgotorch.FillZeros, shape, dtype, dev)
}

// Ones returns a tensor of ones.
func Ones(shape []int64, dtype DType, dev Device) *Tensor {
	return fill("ones", cgotorch.FillOnes, shape, dtype, dev)
}

// Rand returns uniform samples from [0, 1) drawn from the default generator.
func Rand(shape []int64, dtype DType, dev Device) *Tensor {
	return fill("rand", cgotorch.FillRand, shape, dtype, dev)
}

// Randn returns standard normal samples drawn from the default generator.
func Randn(shape []int64, dtype DType, dev Device) *Tensor {
	return fill("randn", cgotorch.FillRandn, shape, dtype, dev)
}

// Full returns a tensor filled with v.
func Full(shape []int64, v float64, dtype DType, dev Device) *Tensor {
	h, err := cgotorch.Full(shape, v, int(dtype), int(dev.Type), dev.Index)
	return must("full", h, err)
}

// Arange is torch.arange(start, end, step).
func Arange(start, end, step float64, dtype DType, dev Device) *Tensor {
	h, err := cgotorch.Arange(start, end, step, int(dtype), int(dev.Type), dev.Index)
	return must("arange", h, err)
}

// Randint returns integers uniform in [low, high).
func Randint(low, high int64, shape []int64, dtype DType, dev Device) *Tensor {
	h, err := cgotorch.Randint(low, high, shape, int(dtype), int(dev.Type), dev.Index)
	return must("randint", h, err)
}

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
		h, err := cgotorch.To(t.Handle(), -1, -1, int(want), false, false)
		check("to", err)
		defer cgotorch.TensorFree(h)
		src = &Tensor{h: h}
	}
	hostReads.Add(1)
	out := make([]T, src.Numel())
	var p unsafe.Pointer
	if len(out) > 0 {
		p = unsafe.Pointer(&out[0])
	}
	check("copy_to_host", cgotorch.CopyToHost(src.h, p, int64(len(out))*int64(want.Size())))
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
	d, _, err := cgotorch.Item(t.Handle())
	check("item", err)
	return d
}

// ItemInt returns the value of a one-element integer tensor.
func (t *Tensor) ItemInt() int64 {
	hostReads.Add(1)
	_, i, err := cgotorch.Item(t.Handle())
	check("item", err)
	return i
}

// ---- conversion ----

// To returns the tensor on dev; nonBlocking copies asynchronously from pinned memory.
// When t is already there, the result shares its storage.
func (t *Tensor) To(dev Device, nonBlocking bool) *Tensor {
	h, err := cgotorch.To(t.Handle(), int(dev.Type), dev.Index, -1, nonBlocking, false)
	return must("to", h, err)
}

// ToDType returns the tensor converted to dtype.
func (t *Tensor) ToDType(dtype DType) *Tensor {
	h, err := cgotorch.To(t.Handle(), -1, -1, int(dtype), false, false)
	return must("to", h, err)
}

// CopyFrom copies src's values into t in place (broadcasting, converting dtype and
// device), without recording autograd history.
func (t *Tensor) CopyFrom(src *Tensor, nonBlocking bool) {
	check("copy_", cgotorch.Copy(t.Handle(), src.Handle(), nonBlocking))
}

// Alias returns a second handle to the same tensor (same storage, same autograd
// identity), owned by the current scope.
func (t *Tensor) Alias() *Tensor { return wrap(cgotorch.ShallowClone(t.Handle())) }

func fromBlobStrided(p unsafe.Pointer, shape, strides []int64, dt DType) *Tensor {
	h, err := cgotorch.FromBlobStrided(p, shape, strides, int(dt))
	return must("from_blob", h, err)
}

func copyToHost(t *Tensor, dst unsafe.Pointer, n int64) error {
	hostReads.Add(1)
	if err := cgotorch.CopyToHost(t.Handle(), dst, n); err != nil {
		return wrapErr("copy_to_host", err)
	}
	return nil
}
