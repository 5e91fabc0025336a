package cgotorch

/*
#include <stdlib.h>
#include "cgotorch.h"
*/
import "C"

import (
	"unsafe"
)

// Module is a handle to a TorchScript module (torch::jit::Module) owned by the caller,
// who frees it with JitFree.
type Module = unsafe.Pointer

// NamedTensor is one parameter or buffer of a TorchScript module.
type NamedTensor struct {
	Name   string
	T      Tensor // a handle the caller owns, aliasing the module's tensor
	Buffer bool
}

// JitLoad loads a module saved by torch.jit.save onto a device (type 0 CPU, 1 CUDA).
func JitLoad(path string, devType, devIndex int) (Module, error) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	var m C.cg_module
	if err := st(C.cg_jit_load(cp, C.int(devType), C.int(devIndex), &m)); err != nil {
		return nil, err
	}
	return Module(m), nil
}

// JitFree deletes the module handle.
func JitFree(m Module) { C.cg_jit_free(C.cg_module(m)) }

// JitForward calls the module's forward with one tensor; it must return a tensor.
func JitForward(m Module, x Tensor) Result {
	return rt(C.cg_jit_forward(C.cg_module(m), C.cg_tensor(x)))
}

// JitTrain sets training mode on the module and all its submodules.
func JitTrain(m Module, on bool) error { return st(C.cg_jit_train(C.cg_module(m), cbool(on))) }

// JitIsTraining reports the module's training flag.
func JitIsTraining(m Module) bool { return C.cg_jit_is_training(C.cg_module(m)) != 0 }

// JitSave writes the module in torch.jit.save's format.
func JitSave(m Module, path string) error {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	return st(C.cg_jit_save(C.cg_module(m), cp))
}

// JitNamedTensors returns the module's parameters and buffers in state_dict order:
// each module's own parameters, then its buffers, then its children, pre-order.
func JitNamedTensors(m Module) ([]NamedTensor, error) {
	var nt C.cg_named_tensors
	if err := st(C.cg_jit_named_tensors(C.cg_module(m), &nt)); err != nil {
		return nil, err
	}
	defer C.cg_named_tensors_free(&nt)
	n := int(nt.n)
	out := make([]NamedTensor, n)
	if n == 0 {
		return out, nil
	}
	names := unsafe.Slice(nt.names, n)
	ts := unsafe.Slice(nt.tensors, n)
	kinds := unsafe.Slice(nt.kinds, n)
	for i := range out {
		out[i] = NamedTensor{Name: C.GoString(names[i]), T: Tensor(ts[i]), Buffer: kinds[i] == 1}
	}
	return out, nil
}
