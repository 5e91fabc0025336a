package cgotorch

/*
#include <stdlib.h>
#include "fsdp.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// FSDPGather is the Go side of a unit's pre-backward node (fsdp.h): it gathers the
// unit's full parameters. It may run on another OS thread (CUDA's autograd threads).
type FSDPGather func() *Error

var (
	fsdpMu    sync.Mutex
	fsdpUnits = map[uintptr]FSDPGather{}
	fsdpNext  uintptr
)

// RegisterFSDPUnit registers a unit's gather and returns its id for FSDPPreBackward. Units
// live as long as the process (a strategy registers each of its units once).
func RegisterFSDPUnit(f FSDPGather) uintptr {
	fsdpMu.Lock()
	defer fsdpMu.Unlock()
	fsdpNext++
	fsdpUnits[fsdpNext] = f
	return fsdpNext
}

// FSDPPreBackward is cg_fsdp_pre_backward: xs through a node whose backward gathers unit.
func FSDPPreBackward(unit uintptr, xs []Tensor) Results {
	return rtn(C.cg_fsdp_pre_backward(C.uintptr_t(unit), handles(xs), C.int(len(xs))))
}

// FSDPOwn is cg_fsdp_own.
func FSDPOwn(ts []Tensor) error { return st(C.cg_fsdp_own(handles(ts), C.int(len(ts)))) }

// FSDPFree is cg_fsdp_free.
func FSDPFree(ts []Tensor) error { return st(C.cg_fsdp_free(handles(ts), C.int(len(ts)))) }

// FSDPStorageBytes is cg_fsdp_storage_bytes.
func FSDPStorageBytes(t Tensor) int64 { return int64(C.cg_fsdp_storage_bytes(C.cg_tensor(t))) }

// FSDPAlloc is cg_fsdp_alloc.
func FSDPAlloc(ts []Tensor) Results { return rtn(C.cg_fsdp_alloc(handles(ts), C.int(len(ts)))) }

// FSDPFill is cg_fsdp_fill.
func FSDPFill(dst, src []Tensor) error {
	if len(dst) != len(src) {
		return &Error{Code: CodeOther, Msg: fmt.Sprintf("fsdp fill: %d destinations, %d sources", len(dst), len(src))}
	}
	return st(C.cg_fsdp_fill(handles(dst), handles(src), C.int(len(dst))))
}

// cgotorchFSDPPreBackward runs unit's gather for fsdp.cc. Nothing may unwind through the
// C++ frames below it, so every panic becomes an error here.
//
//export cgotorchFSDPPreBackward
func cgotorchFSDPPreBackward(unit C.uintptr_t, msg *C.cg_msg) (code C.int32_t) {
	fail := func(c Code, text string) C.int32_t {
		*msg = C.cg_msg(uintptr(unsafe.Pointer(C.CString(text))))
		return C.int32_t(c)
	}
	defer func() {
		if r := recover(); r != nil {
			code = fail(CodeOther, fmt.Sprint(r))
		}
	}()
	fsdpMu.Lock()
	f := fsdpUnits[uintptr(unit)]
	fsdpMu.Unlock()
	if f == nil {
		return fail(CodeOther, "fsdp: unknown unit")
	}
	if e := f(); e != nil {
		if e.Code == 0 {
			e.Code = CodeOther
		}
		return fail(e.Code, e.Msg)
	}
	return C.CG_OK
}
