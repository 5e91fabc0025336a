package torch

import "github.com/gotrain/gotrain/cgotorch"

// Checkpoint returns f(inputs) with activation checkpointing, as PyTorch's
// torch.utils.checkpoint.checkpoint(f, *inputs, use_reentrant=True): f runs with
// gradient recording off, so none of its intermediate activations is kept — only its
// inputs — and the backward pass runs f again over the same inputs, with recording on,
// the same random-generator state (a dropout inside f draws the same mask) and the same
// autocast state, and backpropagates through that recomputation, whose activations are
// freed as soon as its gradients are out. The gradients are the ones f called plainly
// gives; the price is f's forward computed twice.
//
// params are the tensors f reads, besides its inputs, that need gradients (a layer's
// trainable weights; those that do not require one are skipped). They are declared so
// that the gradients reach them even when no input requires a gradient — LoRA on a
// frozen base, whose embeddings produce an input without one; transformers needs
// enable_input_require_grads() for the same case. A tensor f reads that requires a
// gradient and is neither an input nor in params gets none.
//
// f must read every other tensor through its inputs, never as a tensor captured from
// its caller: the backward pass reruns f later, when the caller's scopes (a torch.Local
// around the forward pass, the Trainer's forward scope) may have freed it — using it
// then fails Backward. Inputs may need no gradient (a rotary table, an attention mask)
// and may be nil (f gets nil in its place). A module's own parameters and buffers are
// never freed and may be read directly. f must compute the same thing both times (the
// same ops on the same shapes). Its outputs belong to the current scope; the tensors f
// makes belong to a scope of its own call. With gradient recording off, or nothing that
// requires a gradient, Checkpoint is f(inputs). Gradients flow through Backward;
// autograd.grad-style calls on the outputs are not supported, as for PyTorch's
// reentrant checkpoint.
//
// A panic in f during the forward pass panics out of Checkpoint with the same value;
// during the backward pass it fails Backward with its message.
func Checkpoint(f func(inputs []*Tensor) []*Tensor, inputs, params []*Tensor) []*Tensor {
	if !GradEnabled() {
		return f(inputs)
	}
	var trainable []*Tensor
	for _, p := range params {
		if p != nil && p.RequiresGrad() {
			trainable = append(trainable, p)
		}
	}
	need := len(trainable) > 0
	// The C side gets the non-nil inputs; at[k] is the place of the k-th among all.
	var present []*Tensor
	var at []int
	for i, x := range inputs {
		if x != nil {
			present, at = append(present, x), append(at, i)
			need = need || x.RequiresGrad()
		}
	}
	if !need {
		return f(inputs)
	}
	n := len(inputs)
	var panicked any
	run := func(hs []cgotorch.Tensor, collect func([]cgotorch.Tensor) error) (e *cgotorch.Error) {
		s := NewScope()
		defer s.Close()
		defer recoverCallback(&e, &panicked)
		// The C side owns hs; f gets aliases its scope owns, so that f may free them.
		in := make([]*Tensor, n)
		for k, h := range hs {
			in[at[k]] = adopt("checkpoint", cgotorch.ShallowClone(h))
		}
		out := f(in)
		oh := make([]cgotorch.Tensor, len(out))
		for i, t := range out {
			oh[i] = opt(t)
		}
		check("checkpoint", collect(oh))
		return nil
	}
	r := cgotorch.Checkpoint(run, handles(present), handles(trainable))
	if r.Err != nil && panicked != nil {
		panic(panicked)
	}
	return adoptN("checkpoint", r)
}

// LiveCheckpoints returns the number of Checkpoint calls whose autograd nodes are still
// alive (their graph not yet freed), each holding its function for the backward pass.
// Like LiveTensors, it lets a test check that a step leaves nothing behind.
func LiveCheckpoints() int64 { return cgotorch.CheckpointsLive() }
