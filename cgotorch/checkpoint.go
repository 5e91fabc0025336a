package cgotorch

/*
#include <stdlib.h>
#include "checkpoint.h"
*/
import "C"

import (
	"fmt"
	"runtime/cgo"
	"sync/atomic"
	"unsafe"
)

// CheckpointFunc is the Go side of a checkpointed function (checkpoint.h). It runs the
// function over inputs — handles the C side owns, valid during the call — and passes
// its outputs to collect before it returns, while they are still alive. It runs once in
// the forward pass (gradients off) and once more in the backward pass (gradients on),
// possibly on another OS thread (CUDA's autograd threads). A failure it returns fails
// that pass.
type CheckpointFunc func(inputs []Tensor, collect func(outputs []Tensor) error) *Error

// checkpointsLive counts the functions registered and not yet released.
var checkpointsLive atomic.Int64

// Checkpoint is cg_checkpoint: f(inputs) without autograd history inside f, recomputed
// in backward. params are the tensors f reads that need gradients besides the inputs.
// The outputs belong to the calling thread's scope.
func Checkpoint(f CheckpointFunc, inputs, params []Tensor) Results {
	ReleaseCheckpoints()
	id := cgo.NewHandle(f)
	checkpointsLive.Add(1)
	return rtn(C.cg_checkpoint(C.uintptr_t(id), handles(inputs), C.int(len(inputs)), handles(params), C.int(len(params))))
}

// ReleaseCheckpoints forgets the functions of checkpoint nodes libtorch has freed.
// Checkpoint calls it; the nodes' destructors cannot call into Go themselves, as they
// run inside calls that must not call back.
func ReleaseCheckpoints() {
	var buf [64]C.uintptr_t
	for {
		k := int(C.cg_checkpoint_released(&buf[0], C.int(len(buf))))
		for _, id := range buf[:k] {
			cgo.Handle(id).Delete()
		}
		checkpointsLive.Add(-int64(k))
		if k < len(buf) {
			return
		}
	}
}

// CheckpointsLive returns the number of checkpointed functions autograd may still call
// (their nodes are alive), after releasing the others.
func CheckpointsLive() int64 {
	ReleaseCheckpoints()
	return checkpointsLive.Load()
}

// cgotorchCheckpointRun runs the Go function fn for checkpoint.cc. Nothing may unwind
// through the C++ frames below it, so every panic becomes an error here.
//
//export cgotorchCheckpointRun
func cgotorchCheckpointRun(fn C.uintptr_t, inputs *C.cg_tensor, n C.int, sink C.uintptr_t, msg *C.cg_msg) (code C.int32_t) {
	fail := func(c Code, text string) C.int32_t {
		*msg = C.cg_msg(uintptr(unsafe.Pointer(C.CString(text))))
		return C.int32_t(c)
	}
	defer func() {
		if r := recover(); r != nil {
			code = fail(CodeOther, fmt.Sprint(r))
		}
	}()
	f, ok := cgo.Handle(fn).Value().(CheckpointFunc)
	if !ok {
		return fail(CodeOther, "checkpoint: unknown function")
	}
	in := make([]Tensor, int(n))
	if n > 0 {
		copy(in, unsafe.Slice((*Tensor)(unsafe.Pointer(inputs)), int(n)))
	}
	collect := func(out []Tensor) error {
		return st(C.cg_checkpoint_collect(sink, handles(out), C.int(len(out))))
	}
	if e := f(in, collect); e != nil {
		if e.Code == 0 {
			e.Code = CodeOther
		}
		return fail(e.Code, e.Msg)
	}
	return C.CG_OK
}
