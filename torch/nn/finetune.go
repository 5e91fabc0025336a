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

// Checkpoint returns f(x, extra) with activation checkpointing (torch.Checkpoint): the
// activations inside f are not kept but recomputed in the backward pass, with the same
// random draws, and the gradients are those of f called plainly. m is the module f
// runs: its parameters that require gradients receive them, even when x needs none
// (LoRA on frozen embeddings). extra are the other tensors f reads (rotary tables, an
// attention mask; nil ones reach f as nil): f must take them from its argument, not
// from its enclosing function, whose scopes may have freed them by the time the
// backward pass reruns f. m's own parameters and buffers may be read directly.
//
// This is transformers' gradient checkpointing when a decoder calls it around each
// layer while training:
//
//	x = nn.Checkpoint(layer, func(x *torch.Tensor, ex []*torch.Tensor) *torch.Tensor {
//		return layer.forward(x, ex[0], ex[1], ex[2])
//	}, x, cos, sin, mask)
//
// With gradient recording off (evaluation, generation) it is f(x, extra).
func Checkpoint(m Module, f func(x *torch.Tensor, extra []*torch.Tensor) *torch.Tensor, x *torch.Tensor, extra ...*torch.Tensor) *torch.Tensor {
	if !torch.GradEnabled() {
		return f(x, extra)
	}
	return torch.Checkpoint(func(in []*torch.Tensor) []*torch.Tensor {
		return []*torch.Tensor{f(in[0], in[1:])}
	}, append([]*torch.Tensor{x}, extra...), Parameters(m))[0]
}
