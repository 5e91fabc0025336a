// Package cgotorch is gotrain's one C boundary: a hand-written C ABI over libtorch
// (cgotorch.h, compiled from the .cc files in this directory by cgo) and thin Go
// functions over it. It is the only package in gotrain that imports "C".
//
// Handles are opaque pointers owned by the caller, who frees them with TensorFree.
// Every C entry point catches C++ exceptions and returns them in-band; the Go functions
// return them as *Error values with the libtorch message (without backtrace) and a Code.
//
// The compiler and linker flags that locate libtorch come from the environment
// (CGO_CXXFLAGS, CGO_LDFLAGS), set by the Makefile through libtorch.mk. Build tag cpu
// links only libtorch's CPU libraries; without it libtorch_cuda is linked too.
package cgotorch

/*
#cgo CXXFLAGS: -std=c++20 -O2 -g0 -fPIC -Wno-deprecated-declarations
#cgo LDFLAGS: -ltorch -ltorch_cpu -lc10 -lstdc++
#include <stdlib.h>
#include "cgotorch.h"
*/
import "C"

import (
	"unsafe"
)

// Tensor is a handle to a libtorch at::Tensor owned by the caller.
type Tensor = unsafe.Pointer

// Code classifies a libtorch failure.
type Code int

// The failure classes of the C ABI.
const (
	CodeOutOfMemory    Code = C.CG_ERR_OOM
	CodeInvalid        Code = C.CG_ERR_INVALID
	CodeNotImplemented Code = C.CG_ERR_NOT_IMPLEMENTED
	CodeOther          Code = C.CG_ERR_OTHER
)

// Error is a libtorch exception caught at the C boundary.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

func statusErr(code C.int32_t, msg *C.char) error {
	if code == 0 {
		return nil
	}
	e := &Error{Code: Code(code), Msg: C.GoString(msg)}
	C.cg_free_msg(msg)
	return e
}

func st(s C.cg_status) error { return statusErr(s.code, s.msg) }

func rt(r C.cg_result) (Tensor, error) {
	if r.code != 0 {
		return nil, statusErr(r.code, r.msg)
	}
	return Tensor(r.t), nil
}

func i64p(s []int64) *C.int64_t {
	if len(s) == 0 {
		return nil
	}
	return (*C.int64_t)(unsafe.Pointer(&s[0]))
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// ---- versions, threads, seeding, determinism ----

// TorchVersion returns the libtorch version compiled against, e.g. "2.14.1".
func TorchVersion() string { return C.GoString(C.cg_torch_version()) }

// TorchVersionNum returns major*10000 + minor*100 + patch.
func TorchVersionNum() int { return int(C.cg_torch_version_num()) }

// SetNumThreads sets libtorch's intra-op thread count.
func SetNumThreads(n int) error { return st(C.cg_set_num_threads(C.int(n))) }

// ThreadID returns the calling OS thread's id.
func ThreadID() int64 { return int64(C.cg_thread_id()) }

// NumThreads returns libtorch's intra-op thread count.
func NumThreads() int { return int(C.cg_get_num_threads()) }

// ManualSeed seeds the CPU generator and every CUDA generator.
func ManualSeed(seed uint64) error { return st(C.cg_manual_seed(C.uint64_t(seed))) }

// SetDeterministic switches deterministic algorithms and cuDNN determinism, and turns cuDNN benchmark off.
func SetDeterministic(on bool) error { return st(C.cg_set_deterministic(cbool(on))) }

// RNGState returns the state of a device's default generator as a uint8 tensor handle.
func RNGState(devType, devIndex int) (Tensor, error) {
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

// TensorFree deletes the handle (the storage is freed when no other tensor shares it).
func TensorFree(t Tensor) { C.cg_tensor_free(C.cg_tensor(t)) }

// ShallowClone returns a second handle to the same tensor.
func ShallowClone(t Tensor) Tensor { return Tensor(C.cg_tensor_shallow_clone(C.cg_tensor(t))) }

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

// Defined reports whether the handle holds a tensor.
func Defined(t Tensor) bool { return C.cg_tensor_defined(C.cg_tensor(t)) != 0 }

// DataPtr returns the address of the first element.
func DataPtr(t Tensor) unsafe.Pointer { return C.cg_tensor_data_ptr(C.cg_tensor(t)) }

// StorageOffset returns the offset of the first element in its storage, in elements.
func StorageOffset(t Tensor) int64 { return int64(C.cg_tensor_storage_offset(C.cg_tensor(t))) }

// ElementSize returns the size of one element in bytes.
func ElementSize(t Tensor) int64 { return int64(C.cg_tensor_element_size(C.cg_tensor(t))) }

// ---- creation and conversion ----

// FromBlob copies len(shape)-dimensional data of the given dtype into a new CPU tensor,
// in pinned memory when pinned is true.
func FromBlob(data unsafe.Pointer, shape []int64, dtype int, pinned bool) (Tensor, error) {
	return rt(C.cg_from_blob(data, i64p(shape), C.int(len(shape)), C.int(dtype), cbool(pinned)))
}

// FromBlobStrided copies a strided view of data into a new CPU tensor.
func FromBlobStrided(data unsafe.Pointer, shape, strides []int64, dtype int) (Tensor, error) {
	return rt(C.cg_from_blob_strided(data, i64p(shape), i64p(strides), C.int(len(shape)), C.int(dtype)))
}

// Fill kinds for Fill.
const (
	FillEmpty = C.CG_FILL_EMPTY
	FillZeros = C.CG_FILL_ZEROS
	FillOnes  = C.CG_FILL_ONES
	FillRand  = C.CG_FILL_RAND
	FillRandn = C.CG_FILL_RANDN
)

// Fill creates a tensor: empty, zeros, ones, uniform [0,1) or standard normal.
func Fill(kind int, shape []int64, dtype, devType, devIndex int) (Tensor, error) {
	return rt(C.cg_fill(C.int(kind), i64p(shape), C.int(len(shape)), C.int(dtype), C.int(devType), C.int(devIndex)))
}

// Full creates a tensor filled with v.
func Full(shape []int64, v float64, dtype, devType, devIndex int) (Tensor, error) {
	return rt(C.cg_full(i64p(shape), C.int(len(shape)), C.double(v), C.int(dtype), C.int(devType), C.int(devIndex)))
}

// Arange is torch.arange(start, end, step).
func Arange(start, end, step float64, dtype, devType, devIndex int) (Tensor, error) {
	return rt(C.cg_arange(C.double(start), C.double(end), C.double(step), C.int(dtype), C.int(devType), C.int(devIndex)))
}

// Randint is torch.randint(low, high, shape).
func Randint(low, high int64, shape []int64, dtype, devType, devIndex int) (Tensor, error) {
	return rt(C.cg_randint(C.int64_t(low), C.int64_t(high), i64p(shape), C.int(len(shape)), C.int(dtype), C.int(devType), C.int(devIndex)))
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

// Copy copies src into dst in place, without recording autograd history.
func Copy(dst, src Tensor, nonBlocking bool) error {
	return st(C.cg_copy_(C.cg_tensor(dst), C.cg_tensor(src), cbool(nonBlocking)))
}

// To converts t to a device and dtype; devType or dtype -1 keeps the current one.
func To(t Tensor, devType, devIndex, dtype int, nonBlocking, copy bool) (Tensor, error) {
	return rt(C.cg_to(C.cg_tensor(t), C.int(devType), C.int(devIndex), C.int(dtype), cbool(nonBlocking), cbool(copy)))
}
