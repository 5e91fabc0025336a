package cgotorch

/*
#include "cgotorch.h"
*/
import "C"

import "unsafe"

// ---- autograd ----

// SetRequiresGrad switches gradient recording for a leaf tensor.
func SetRequiresGrad(t Tensor, on bool) error { return st(C.cg_set_requires_grad(h(t), cbool(on))) }

// Backward runs backpropagation from t; grad may be nil for a scalar t.
func Backward(t, grad Tensor, retainGraph bool) error {
	return st(C.cg_backward(h(t), h(grad), cbool(retainGraph)))
}

// Grad returns a new handle to t's gradient (T nil when it is undefined).
func Grad(t Tensor) Result { return rt(C.cg_grad(h(t))) }

// SetGrad replaces t's gradient; nil clears it.
func SetGrad(t, grad Tensor) error { return st(C.cg_set_grad(h(t), h(grad))) }

// GradEnabled reports the calling thread's grad mode.
func GradEnabled() bool { return C.cg_grad_enabled() != 0 }

// SetGradEnabled sets the calling thread's grad mode.
func SetGradEnabled(on bool) { C.cg_set_grad_enabled(cbool(on)) }

// ---- CUDA ----

// CUDAAvailable reports whether a CUDA device can be used.
func CUDAAvailable() bool { return C.cg_cuda_available() != 0 }

// CUDADeviceCount returns the number of visible CUDA devices.
func CUDADeviceCount() int { return int(C.cg_cuda_device_count()) }

// CUDASetDevice makes device the current CUDA device of the calling thread.
func CUDASetDevice(device int) error { return st(C.cg_cuda_set_device(C.int(device))) }

// CUDADeviceName returns the name of a device.
func CUDADeviceName(device int) (string, error) {
	buf := make([]byte, 256)
	if err := st(C.cg_cuda_device_name(C.int(device), (*C.char)(unsafe.Pointer(&buf[0])), C.int(len(buf)))); err != nil {
		return "", err
	}
	return C.GoString((*C.char)(unsafe.Pointer(&buf[0]))), nil
}

// CUDACapability returns a device's compute capability.
func CUDACapability(device int) (major, minor int, err error) {
	var a, b C.int
	err = st(C.cg_cuda_capability(C.int(device), &a, &b))
	return int(a), int(b), err
}

// CUDATotalMemory returns a device's memory in bytes.
func CUDATotalMemory(device int) (int64, error) {
	var n C.int64_t
	err := st(C.cg_cuda_total_memory(C.int(device), &n))
	return int64(n), err
}

// CUDASynchronize waits for all work on a device.
func CUDASynchronize(device int) error { return st(C.cg_cuda_synchronize(C.int(device))) }

// CUDAMemoryStats returns the caching allocator's allocated, reserved and peak allocated bytes.
func CUDAMemoryStats(device int) (allocated, reserved, peak int64, err error) {
	var a, r, p C.int64_t
	err = st(C.cg_cuda_memory_stats(C.int(device), &a, &r, &p))
	return int64(a), int64(r), int64(p), err
}

// CUDAEmptyCache releases unused cached device memory.
func CUDAEmptyCache() error { return st(C.cg_cuda_empty_cache()) }

// CUDAResetPeak resets the peak memory statistic of a device.
func CUDAResetPeak(device int) error { return st(C.cg_cuda_reset_peak(C.int(device))) }

// CuDNNVersion returns the cuDNN version libtorch uses, 0 when none.
func CuDNNVersion() int { return int(C.cg_cudnn_version()) }

// CUDARuntimeVersion returns the CUDA runtime version, 0 when none.
func CUDARuntimeVersion() int { return int(C.cg_cuda_runtime_version()) }
