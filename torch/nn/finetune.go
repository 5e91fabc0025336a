package nn

import "github.com/gotrain/gotrain/torch"

// TrainableParameters returns the parameters of m that require gradients, in
// NamedParameters' order: the list to give an optimizer when part of a model is frozen
// (LoRA's adapters on a frozen base), so that it keeps state for those alone, as
// PyTorch code passes filter(lambda p: p.requires_grad, model.parameters()).
func TrainableParameters(m Module) []*torch.Tensor {
	var out []*torch.Tensor
	for _, p := range NamedParameters(m) {
		if p.Tensor.RequiresGrad() {
			out = append(out, p.Tensor)
		}
	}
	return out
}

// Freeze switches gradient recording off for every parameter of m and clears their
// gradients (requires_grad_(False) on each): a frozen base gets no gradients and, given
// TrainableParameters, no optimizer state.
func Freeze(m Module) {
	for _, p := range NamedParameters(m) {
		p.Tensor.SetGrad(nil)
		p.Tensor.SetRequiresGrad(false)
	}
}

// Checkpoint returns f(x) with activation checkpointing (torch.Checkpoint): the
// activations inside f are not kept but recomputed in the backward pass, with the same
// random draws, and the gradients are those of f(x) called plainly. m is the module f
// runs — its parameters that require gradients receive them, even when x needs none
// (LoRA on frozen embeddings). f must read no other tensor that needs a gradient.
//
// This is transformers' gradient checkpointing when a decoder calls it around each
// layer while training:
//
//	x = nn.Checkpoint(layer, x, func(x *torch.Tensor) *torch.Tensor { return layer.forward(x, cos, sin, mask) })
//
// With gradient recording off (evaluation, generation) it is f(x).
func Checkpoint(m Module, x *torch.Tensor, f func(x *torch.Tensor) *torch.Tensor) *torch.Tensor {
	if !torch.GradEnabled() {
		return f(x)
	}
	var params []*torch.Tensor
	for _, p := range NamedParameters(m) {
		params = append(params, p.Tensor)
	}
	return torch.Checkpoint(func(in []*torch.Tensor) []*torch.Tensor {
		return []*torch.Tensor{f(in[0])}
	}, []*torch.Tensor{x}, params)[0]
}
