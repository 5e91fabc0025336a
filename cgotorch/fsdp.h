// fsdp.h: what sharded training (FSDP2's reshard_after_forward) needs of autograd and
// of storages: a unit's full parameters freed after its forward and filled again, in
// place, before its backward, and a node that runs the unit's gather when the backward
// pass reaches the unit's output.
#ifndef GOTRAIN_CGOTORCH_FSDP_H
#define GOTRAIN_CGOTORCH_FSDP_H

#include "cgotorch.h"

#ifdef __cplusplus
extern "C" {
#endif

// cg_fsdp_pre_backward returns xs through an identity autograd node whose backward first
// calls the Go side's cgotorchFSDPPreBackward(unit) (the unit's gather), then passes the
// gradients on, as FSDP2's pre-backward hook on a unit's outputs. Tensors that do not
// require gradients pass through as they are. The outputs are adopted by the calling
// thread's scope.
cg_results cg_fsdp_pre_backward(uintptr_t unit, cg_tensor *xs, int n);

// cg_fsdp_own gives each tensor a storage of its own (a contiguous copy) when it shares
// one or is not contiguous, so that freeing it frees nothing else.
cg_status cg_fsdp_own(cg_tensor *ts, int n);

// cg_fsdp_free frees each tensor's storage (FSDP2's storage resize_(0)); the tensors
// keep their sizes, and autograd's saved references to them stay valid until filled.
cg_status cg_fsdp_free(cg_tensor *ts, int n);

// cg_fsdp_alloc allocates each tensor's storage again where it was freed (its values
// undefined until written) and returns aliases of the tensors under version counters of
// their own, to write the gathered values into without counting a change autograd would
// refuse. The aliases are adopted by the calling thread's scope.
cg_results cg_fsdp_alloc(cg_tensor *ts, int n);

// cg_fsdp_fill allocates each dst's storage again where it was freed and copies the
// first dst.size(0) rows of src (the gathered, padded parameter) into it, without
// counting a change of dst's version (autograd saved dst, and the values are the ones
// it saved).
cg_status cg_fsdp_fill(cg_tensor *dst, cg_tensor *src, int n);

// cg_fsdp_storage_bytes returns the bytes t's storage holds now (0 once freed), -1 on
// a tensor without storage.
int64_t cg_fsdp_storage_bytes(cg_tensor t);

#ifdef __cplusplus
}
#endif

#endif
