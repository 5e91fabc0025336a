//go:build cpu

package cgotorch

// CUDABuild reports whether this binary links libtorch's CUDA libraries.
const CUDABuild = false
