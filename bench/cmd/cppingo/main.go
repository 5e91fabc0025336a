// Command cppingo runs the C++ twin of the training benchmark (bench/cpp/loop.cpp) inside
// a Go process: the same C++ loop, compiled by cgo into a Go binary and called once from
// main, so that the Go runtime (its threads, its signal handlers, its heap, its binary's
// layout) is present while not one line of Go runs between the ops. It takes loop's flags
// and prints loop's JSON.
//
//	cppingo --workload mlp --dir build/bench/work/mlp --threads 1 --warmup 1 --reps 4 --adam fused
//
// Comparing it with build/bench/loop on the same flags separates the cost of being a Go
// process from the cost of running Go code between libtorch's calls (bench/README.md,
// "The step is bound by the memory hierarchy").
package main

/*
#cgo CXXFLAGS: -std=c++20 -O2 -g0 -Wno-deprecated-declarations
#cgo LDFLAGS: -ltorch -ltorch_cpu -lc10 -lstdc++
#include <stdlib.h>
int gotrain_loop_in_go(int argc, char **argv);
*/
import "C"

import (
	"os"
	"runtime"
	"unsafe"
)

func main() {
	runtime.LockOSThread()
	argv := (**C.char)(C.malloc(C.size_t(len(os.Args)+1) * C.size_t(unsafe.Sizeof((*C.char)(nil)))))
	args := unsafe.Slice(argv, len(os.Args)+1)
	for i, a := range os.Args {
		args[i] = C.CString(a)
	}
	args[len(os.Args)] = nil
	// C's exit, not os.Exit, so that the C++ streams are flushed.
	C.exit(C.gotrain_loop_in_go(C.int(len(os.Args)), argv))
}
