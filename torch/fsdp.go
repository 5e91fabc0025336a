package torch

import "github.com/gotrain/gotrain/cgotorch"

// The storage and autograd pieces of sharded training's reshard_after_forward (FSDP2,
// ZeRO-3): a unit's full parameters are freed after its forward (FreeStorage) and filled
// again in place before its backward (FillStorage), from a node on the unit's outputs
// (FSDPPreBackward) that runs the unit's gather when the backward pass reaches them.
// trainer.FullyShardedDataParallel uses them.

// RegisterFSDPUnit registers gather, the gather of one unit's parameters, and returns
// the unit's id for FSDPPreBackward. The registration lasts as long as the process. gather
// runs inside the backward pass, in a scope of its own, possibly on another OS thread
// (CUDA's autograd threads); an error or a panic it returns fails the backward pass.
func RegisterFSDPUnit(gather func() error) uintptr {
	return cgotorch.RegisterFSDPUnit(func() (e *cgotorch.Error) {
		s := NewScope()
		defer s.Close()
		defer recoverCallback(&e, nil)
		if err := gather(); err != nil {
			return &cgotorch.Error{Code: cgotorch.CodeOther, Msg: err.Error()}
		}
		return nil
	})
}

// FSDPPreBackward returns xs through an identity node whose backward first runs unit's
// gather (RegisterFSDPUnit). Tensors that do not require gradients pass through as
// they are; with gradient recording off it returns xs.
func FSDPPreBackward(unit uintptr, xs ...*Tensor) []*Tensor {
	if !GradEnabled() {
		return xs
	}
	return adoptN("fsdp_pre_backward", cgotorch.FSDPPreBackward(unit, handles(xs)))
}

// OwnStorage gives each tensor a contiguous storage of its own where it shares one, so
// that FreeStorage frees nothing else.
func OwnStorage(ts []*Tensor) { check("own_storage", cgotorch.FSDPOwn(handles(ts))) }

// FreeStorage frees each tensor's storage (PyTorch's untyped_storage().resize_(0)): the
// tensors keep their shapes, and must be filled (FillStorage) before their values are
// read again.
func FreeStorage(ts []*Tensor) { check("free_storage", cgotorch.FSDPFree(handles(ts))) }

// AllocStorage allocates each tensor's storage again where FreeStorage freed it (the
// values are undefined until written) and returns aliases of the tensors whose writes
// do not count as changes of the tensors' version: a gather writes the values autograd
// saved back through them.
func AllocStorage(ts []*Tensor) []*Tensor {
	return adoptN("alloc_storage", cgotorch.FSDPAlloc(handles(ts)))
}

// FillStorage allocates each dst's storage again where it was freed and copies into it
// the first dst.Size(0) rows of src, without counting a change of dst's version (the
// values autograd saved come back).
func FillStorage(dst, src []*Tensor) {
	check("fill_storage", cgotorch.FSDPFill(handles(dst), handles(src)))
}

// StorageBytes returns the bytes t's storage holds now: 0 once FreeStorage freed it.
func StorageBytes(t *Tensor) int64 { return cgotorch.FSDPStorageBytes(t.handle()) }
