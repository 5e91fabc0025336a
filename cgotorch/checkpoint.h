// checkpoint.h: activation checkpointing (torch.utils.checkpoint) over a Go function.
//
// libtorch's C++ API has no torch.utils.checkpoint, and its non-reentrant form rests on
// saved-tensor hooks that only Python can install. cg_checkpoint is the reentrant form,
// built as a custom autograd Function whose forward and backward call back into Go to
// run the checkpointed function: once with gradients off in the forward pass, and again
// with gradients on inside the backward pass, over the same inputs and with the same
// RNG and autocast state, so that the recomputed activations, and so the gradients, are
// the ones the plain forward would have kept.
#ifndef GOTRAIN_CGOTORCH_CHECKPOINT_H
#define GOTRAIN_CGOTORCH_CHECKPOINT_H

#include "cgotorch.h"

#ifdef __cplusplus
extern "C" {
#endif

// cg_checkpoint returns fn(inputs) computed without recording autograd history inside
// it; its outputs' backward recomputes fn(inputs) with gradients on and backpropagates
// through the recomputation. fn is the id of the Go function (the Go side's registry);
// from this call on the C++ side owns that id and hands it back through
// cg_checkpoint_released once the autograd node that needs it is gone. params are the
// tensors fn reads that need gradients besides the inputs (a layer's trainable
// weights): they are inputs of the node, so that gradients reach them even when no
// input requires one. The outputs are adopted by the calling thread's scope.
cg_results cg_checkpoint(uintptr_t fn, cg_tensor *inputs, int n, cg_tensor *params, int np);

// cg_checkpoint_collect appends ts to the output list sink (the address cg_checkpoint
// passed to the Go function): the Go function's way to return its outputs.
cg_status cg_checkpoint_collect(uintptr_t sink, cg_tensor *ts, int n);

// cg_checkpoint_released moves up to cap ids of Go functions that no autograd node
// needs any more into out and returns how many it moved. (The node's destructor runs
// wherever libtorch drops it, inside calls that must not call back into Go, so the ids
// wait here for the Go side to collect.)
int cg_checkpoint_released(uintptr_t *out, int cap);

#ifdef __cplusplus
}
#endif

#endif
