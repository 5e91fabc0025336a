//go:build !cpu

package cgotorch

// A CUDA build links libtorch_cuda with --no-as-needed: nothing references its symbols
// directly, and without it the CUDA kernels never register (the classic "CUDA not
// available" failure of libtorch bindings).

/*
#cgo CXXFLAGS: -DGOTRAIN_CUDA_BUILD=1
#cgo LDFLAGS: -Wl,--no-as-needed -ltorch_cuda -lc10_cuda -Wl,--as-needed
*/
import "C"

// CUDABuild reports whether this binary links libtorch's CUDA libraries.
const CUDABuild = true
