package torch

import "github.com/gotrain/gotrain/cgotorch"

// CPUMemory is the counting CPU allocator's view of CPU tensor memory: the bytes of the
// storages allocated since CountCPUMemory and not yet freed, their peak since
// CountCPUMemory or the last ResetCPUPeakMemory, and the number of allocations.
type CPUMemory struct{ Allocated, PeakAllocated, Allocations int64 }

// CountCPUMemory puts a counting allocator in front of libtorch's CPU allocator for the
// rest of the process (calling it again does nothing), so that CPUMemoryStats can report
// what CPU tensors hold, as CUDAMemoryStats does for a GPU. Storages allocated before the
// call are not counted. Counting takes a lock per allocation: benchmarks and tests turn it
// on; training need not. bench/gpu's Python side loads the same C++ allocator
// (cgotorch/cpumem.cc), so both sides measure a step's memory the same way.
func CountCPUMemory() { cgotorch.CPUMemInstall() }

// CountingCPUMemory reports whether CountCPUMemory has been called.
func CountingCPUMemory() bool { return cgotorch.CPUMemInstalled() }

// CPUMemoryStats returns the counting allocator's figures (zero before CountCPUMemory).
func CPUMemoryStats() CPUMemory {
	a, p, n := cgotorch.CPUMemStats()
	return CPUMemory{a, p, n}
}

// ResetCPUPeakMemory sets the peak to the bytes allocated now, as CUDAResetPeakMemory does
// for a GPU.
func ResetCPUPeakMemory() { cgotorch.CPUMemResetPeak() }
