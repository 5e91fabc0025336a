// Package cgotorch is gotrain's one C boundary: a C ABI over libtorch (cgotorch.h and
// ops_gen.h, compiled from the .cc files in this directory by cgo) and thin Go functions
// over it. It is the only package in gotrain that imports "C", and package torch is the
// only package that imports it (a test in package torch enforces both).
//
// The ops are declared once, in ops.tab; `go generate` (opgen) writes ops_gen.h,
// ops_gen.cc, ops_gen.go and ../torch/ops_gen.go from it. Functions that are more than one
// ATen call (optimizer steps, AMP, collectives, TorchScript) are hand-written, with named
// C structs for their parameters and C enums for the kinds that cross.
//
// Handles are opaque pointers. A handle a result returns while the calling thread has a
// scope frame open belongs to that frame (Result.Scope names it) and is deleted when the
// frame closes; otherwise the caller owns it and frees it with TensorFree. Every C entry
// point catches C++ exceptions and returns them in-band; the Go functions return them as
// *Error values with the libtorch message (without backtrace) and a Code.
//
// The compiler and linker flags that locate libtorch come from the environment
// (CGO_CXXFLAGS, CGO_LDFLAGS), set by the Makefile through libtorch.mk. Build tag cpu
// links only libtorch's CPU libraries; without it libtorch_cuda is linked too.
package cgotorch

//go:generate go run ./opgen -table ops.tab -cgotorch . -torch ../torch

/*
#cgo CXXFLAGS: -std=c++20 -O2 -g0 -fPIC -Wno-deprecated-declarations
#cgo LDFLAGS: -ltorch -ltorch_cpu -lc10 -lstdc++
#include <stdlib.h>
#include "cgotorch.h"
static inline const char *cg_msg_text(cg_msg m) { return (const char *)m; }
*/
import "C"

import (
	"unsafe"
)

// Tensor is a handle to a libtorch at::Tensor: the address of C++ memory, as an integer
// (cgotorch.h says why). 0 is no tensor.
type Tensor = uintptr

// Code classifies a libtorch failure.
type Code int

// The failure classes of the C ABI.
const (
	CodeOutOfMemory    Code = C.CG_ERR_OOM
	CodeInvalid        Code = C.CG_ERR_INVALID
	CodeNotImplemented Code = C.CG_ERR_NOT_IMPLEMENTED
	CodeOther          Code = C.CG_ERR_OTHER
)

// Device types of the C ABI.
const (
	DeviceCPU  = C.CG_DEVICE_CPU
	DeviceCUDA = C.CG_DEVICE_CUDA
)

// Error is a libtorch exception caught at the C boundary.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Result is a new tensor handle and the slot of the scope that adopted it (0: none; the
// caller owns it), or the failure.
type Result struct {
	T     Tensor
	Scope int32
	Err   *Error
}

// Result2 is Result for ops that return two tensors.
type Result2 struct {
	T0, T1 Tensor
	Scope  int32
	Err    *Error
}

// Results is Result for ops that return a list of tensors.
type Results struct {
	Ts    []Tensor
	Scope int32
	Err   *Error
}

func statusErr(code C.int32_t, msg C.cg_msg) *Error {
	if code == 0 {
		return nil
	}
	return &Error{Code: Code(code), Msg: msgText(msg)}
}

// msgText returns a message's text and frees it.
func msgText(msg C.cg_msg) string {
	s := C.GoString(C.cg_msg_text(msg))
	C.cg_free_msg(msg)
	return s
}

// st returns a status's error; a nil *Error becomes a nil error.
func st(s C.cg_status) error {
	if e := statusErr(s.code, s.msg); e != nil {
		return e
	}
	return nil
}

func rt(r C.cg_result) Result {
	if r.code != 0 {
		return Result{Err: statusErr(r.code, r.msg)}
	}
	return Result{T: Tensor(r.t), Scope: int32(r.scope)}
}

func rt2(r C.cg_result2) Result2 {
	if r.code != 0 {
		return Result2{Err: statusErr(r.code, r.msg)}
	}
	return Result2{T0: Tensor(r.t0), T1: Tensor(r.t1), Scope: int32(r.scope)}
}

func rtn(r C.cg_results) Results {
	if r.code != 0 {
		return Results{Err: statusErr(r.code, r.msg)}
	}
	out := Results{Ts: make([]Tensor, int(r.n)), Scope: int32(r.scope)}
	copy(out.Ts, unsafe.Slice((*Tensor)(unsafe.Pointer(r.ts)), int(r.n)))
	C.cg_free_handles(r.ts)
	return out
}

func i64p(s []int64) *C.int64_t {
	if len(s) == 0 {
		return nil
	}
	return (*C.int64_t)(unsafe.Pointer(&s[0]))
}

func handles(ts []Tensor) *C.cg_tensor {
	if len(ts) == 0 {
		return nil
	}
	return (*C.cg_tensor)(unsafe.Pointer(&ts[0]))
}

func h(t Tensor) C.cg_tensor { return C.cg_tensor(t) }

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// ---- scopes ----

// ScopeOpen opens a frame named slot (> 0) on the calling thread: handles that results
// return until it closes are adopted by it.
func ScopeOpen(slot int32) error { return st(C.cg_scope_open(C.int32_t(slot))) }

// ScopeClose closes the calling thread's innermost frame, which must be slot, deleting
// its handles.
func ScopeClose(slot int32) error { return st(C.cg_scope_close(C.int32_t(slot))) }

// ScopeReset deletes the handles of the calling thread's innermost frame, which must be
// slot, and keeps the frame open.
func ScopeReset(slot int32) error { return st(C.cg_scope_reset(C.int32_t(slot))) }

// ScopeFree deletes t, which frame slot of this thread owns (slot 0: nobody).
func ScopeFree(t Tensor, slot int32) error { return st(C.cg_scope_free(h(t), C.int32_t(slot))) }

// ScopeMove moves t from frame slot to the enclosing frame and returns its slot (0 when
// slot was outermost: the caller owns t).
func ScopeMove(t Tensor, slot int32) (int32, error) {
	var now C.int32_t
	err := st(C.cg_scope_move(h(t), C.int32_t(slot), &now))
	return int32(now), err
}

// ScopeDisown takes t out of frame slot; the caller owns it.
func ScopeDisown(t Tensor, slot int32) error { return st(C.cg_scope_disown(h(t), C.int32_t(slot))) }

// ---- versions, threads, seeding, determinism ----

// TorchVersion returns the libtorch version compiled against, e.g. "2.14.1".
func TorchVersion() string { return C.GoString(C.cg_torch_version()) }

// SetNumThreads sets libtorch's intra-op thread count.
func SetNumThreads(n int) error { return st(C.cg_set_num_threads(C.int(n))) }

// NumThreads returns libtorch's intra-op thread count.
func NumThreads() int { return int(C.cg_get_num_threads()) }

// ManualSeed seeds the CPU generator and every CUDA generator.
func ManualSeed(seed uint64) error { return st(C.cg_manual_seed(C.uint64_t(seed))) }

// SetDeterministic switches deterministic algorithms and cuDNN determinism, and turns cuDNN benchmark off.
func SetDeterministic(on bool) error { return st(C.cg_set_deterministic(cbool(on))) }

// RNGState returns the state of a device's default generator as a uint8 tensor.
func RNGState(devType, devIndex int) Result {
	return rt(C.cg_get_rng_state(C.int(devType), C.int(devIndex)))
}

// SetRNGState restores a device's default generator from a state RNGState returned.
func SetRNGState(devType, devIndex int, state Tensor) error {
	return st(C.cg_set_rng_state(C.int(devType), C.int(devIndex), C.cg_tensor(state)))
}

// ShowConfig returns at::show_config(): the build settings, BLAS and CPU capability.
func ShowConfig() (string, error) {
	var p *C.char
	if err := st(C.cg_show_config(&p)); err != nil {
		return "", err
	}
	s := C.GoString(p)
	C.free(unsafe.Pointer(p))
	return s, nil
}

// CUDAKernelsRegistered reports whether libtorch_cuda's kernels are in the dispatcher.
func CUDAKernelsRegistered() bool { return C.cg_cuda_kernels_registered() != 0 }

// ---- lifetime and metadata ----

// LiveHandles returns the number of tensor handles made and not yet freed, on all threads
// (counted on the C side, per thread, so that making one costs no atomic operation).
func LiveHandles() int64 { return int64(C.cg_live_handles()) }

// TensorFree deletes the handle (the storage is freed when no other tensor shares it).
func TensorFree(t Tensor) { C.cg_tensor_free(C.cg_tensor(t)) }

// ShallowClone returns a second handle to the same tensor.
func ShallowClone(t Tensor) Result { return rt(C.cg_tensor_shallow_clone(C.cg_tensor(t))) }

// Dim returns the number of dimensions.
func Dim(t Tensor) int { return int(C.cg_tensor_dim(C.cg_tensor(t))) }

// Sizes writes the shape into out, which must have Dim(t) elements.
func Sizes(t Tensor, out []int64) { C.cg_tensor_sizes(C.cg_tensor(t), i64p(out)) }

// Strides writes the strides into out, which must have Dim(t) elements.
func Strides(t Tensor, out []int64) { C.cg_tensor_strides(C.cg_tensor(t), i64p(out)) }

// Numel returns the number of elements.
func Numel(t Tensor) int64 { return int64(C.cg_tensor_numel(C.cg_tensor(t))) }

// DType returns the ScalarType number.
func DType(t Tensor) int { return int(C.cg_tensor_dtype(C.cg_tensor(t))) }

// Device returns the device type (0 CPU, 1 CUDA) and index (-1 for none).
func Device(t Tensor) (typ, index int) {
	var a, b C.int
	C.cg_tensor_device(C.cg_tensor(t), &a, &b)
	return int(a), int(b)
}

// RequiresGrad reports whether autograd records operations on t.
func RequiresGrad(t Tensor) bool { return C.cg_tensor_requires_grad(C.cg_tensor(t)) != 0 }

// IsContiguous reports whether t is contiguous in memory.
func IsContiguous(t Tensor) bool { return C.cg_tensor_is_contiguous(C.cg_tensor(t)) != 0 }

// DataPtr returns the address of the first element.
func DataPtr(t Tensor) unsafe.Pointer { return C.cg_tensor_data_ptr(C.cg_tensor(t)) }

// StorageOffset returns the offset of the first element in its storage, in elements.
func StorageOffset(t Tensor) int64 { return int64(C.cg_tensor_storage_offset(C.cg_tensor(t))) }

// ---- creation and conversion ----

// FromBlob copies len(shape)-dimensional data of the given dtype into a new CPU tensor,
// in pinned memory when pinned is true.
func FromBlob(data unsafe.Pointer, shape []int64, dtype int, pinned bool) Result {
	return rt(C.cg_from_blob(data, i64p(shape), C.int(len(shape)), C.int(dtype), cbool(pinned)))
}

// FromBlobStrided copies a strided view of data into a new CPU tensor.
func FromBlobStrided(data unsafe.Pointer, shape, strides []int64, dtype int) Result {
	return rt(C.cg_from_blob_strided(data, i64p(shape), i64p(strides), C.int(len(shape)), C.int(dtype)))
}

// RandpermSeeded writes torch.randperm(len(out)) drawn from a CPU generator seeded with seed.
func RandpermSeeded(seed uint64, out []int64) error {
	return st(C.cg_randperm_seeded(C.int64_t(len(out)), C.uint64_t(seed), i64p(out)))
}

// CopyToHost copies t (any device, any layout) into dst as contiguous elements.
func CopyToHost(t Tensor, dst unsafe.Pointer, nbytes int64) error {
	return st(C.cg_copy_to_host(C.cg_tensor(t), dst, C.int64_t(nbytes)))
}

// Item returns the single element of t as a float64 and an int64.
func Item(t Tensor) (float64, int64, error) {
	var d C.double
	var i C.int64_t
	err := st(C.cg_item(C.cg_tensor(t), &d, &i))
	return float64(d), int64(i), err
}

// SetData is `t.data = src`: t keeps its identity and takes src's storage, device and dtype.
func SetData(t, src Tensor) error { return st(C.cg_tensor_set_data(C.cg_tensor(t), C.cg_tensor(src))) }
