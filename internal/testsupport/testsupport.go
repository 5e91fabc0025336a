// Package testsupport holds helpers that the tests of several packages share: the Go
// heap's allocations while a function runs, and special files (FIFOs) to give as input.
package testsupport

import "runtime"

// AllocatedBy runs f and returns the bytes the Go heap allocated while it ran
// (runtime.MemStats.TotalAlloc: garbage included).
func AllocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
