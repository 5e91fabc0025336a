package torch

import "github.com/gotrain/gotrain/cgotorch"

// CUDAIsAvailable reports whether a CUDA device can be used.
func CUDAIsAvailable() bool { return cgotorch.CUDAAvailable() }

// CUDADeviceCount returns the number of visible CUDA devices.
func CUDADeviceCount() int { return cgotorch.CUDADeviceCount() }

// CUDADeviceName returns the name of CUDA device n.
func CUDADeviceName(n int) (string, error) {
	s, err := cgotorch.CUDADeviceName(n)
	return s, wrapErr("cuda_device_name", err)
}

// CUDACapability returns the compute capability of CUDA device n.
func CUDACapability(n int) (major, minor int, err error) {
	major, minor, err = cgotorch.CUDACapability(n)
	return major, minor, wrapErr("cuda_capability", err)
}

// CUDATotalMemory returns the memory of CUDA device n in bytes.
func CUDATotalMemory(n int) (int64, error) {
	b, err := cgotorch.CUDATotalMemory(n)
	if err != nil {
		return 0, wrapErr("cuda_total_memory", err)
	}
	return b, nil
}

// CUDASetDevice makes CUDA device n the current device of the calling OS thread
// (torch.cuda.set_device): where work without an explicit device index goes, and the
// device NCCL communicators and cuDNN handles are made on. Call it after
// runtime.LockOSThread; the Trainer does.
func CUDASetDevice(n int) error {
	return wrapErr("cuda_set_device", cgotorch.CUDASetDevice(n))
}

// CUDASynchronize waits for all work queued on CUDA device n.
func CUDASynchronize(n int) error {
	return wrapErr("cuda_synchronize", cgotorch.CUDASynchronize(n))
}

// CUDAMemory is the caching allocator's view of one device.
type CUDAMemory struct{ Allocated, Reserved, PeakAllocated int64 }

// CUDAMemoryStats returns allocated, reserved and peak allocated bytes of device n.
func CUDAMemoryStats(n int) (CUDAMemory, error) {
	a, r, p, err := cgotorch.CUDAMemoryStats(n)
	if err != nil {
		return CUDAMemory{}, wrapErr("cuda_memory_stats", err)
	}
	return CUDAMemory{a, r, p}, nil
}

// CUDAResetPeakMemory resets the peak statistic of device n.
func CUDAResetPeakMemory(n int) error {
	return wrapErr("cuda_reset_peak", cgotorch.CUDAResetPeak(n))
}

// CUDAEmptyCache returns cached, unused device memory to the driver.
func CUDAEmptyCache() error {
	return wrapErr("cuda_empty_cache", cgotorch.CUDAEmptyCache())
}

// CuDNNVersion returns the cuDNN version (e.g. 91000), 0 without cuDNN.
func CuDNNVersion() int { return cgotorch.CuDNNVersion() }

// CUDARuntimeVersion returns the CUDA runtime version (e.g. 13000), 0 without CUDA.
func CUDARuntimeVersion() int { return cgotorch.CUDARuntimeVersion() }
