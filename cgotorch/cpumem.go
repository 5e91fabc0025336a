package cgotorch

/*
#include "cpumem.h"
*/
import "C"

// CPUMemInstall is cg_cpumem_install: the counting CPU allocator, from now on.
func CPUMemInstall() { C.cg_cpumem_install() }

// CPUMemInstalled is cg_cpumem_installed.
func CPUMemInstalled() bool { return C.cg_cpumem_installed() != 0 }

// CPUMemStats is cg_cpumem_stats: bytes allocated now, their peak, allocations made.
func CPUMemStats() (allocated, peak, count int64) {
	var out [3]C.int64_t
	C.cg_cpumem_stats(&out[0])
	return int64(out[0]), int64(out[1]), int64(out[2])
}

// CPUMemResetPeak is cg_cpumem_reset_peak.
func CPUMemResetPeak() { C.cg_cpumem_reset_peak() }
