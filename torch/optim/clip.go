package optim

import "github.com/gotrain/gotrain/torch"

// ClipGradNorm is torch.nn.utils.clip_grad_norm_, in one call into libtorch: it computes
// the norm of all gradients together (normType 2, or math.Inf(1) for the largest
// absolute value), multiplies every gradient by min(1, maxNorm/(total+1e-6)), and
// returns the total norm before clipping. Parameters without a gradient are ignored (with
// none, the norm is 0). With errorIfNonfinite, a NaN or infinite norm is an error and
// nothing is clipped; otherwise a NaN norm makes every gradient NaN, as in PyTorch.
func ClipGradNorm(params []*torch.Tensor, maxNorm, normType float64, errorIfNonfinite bool) (float64, error) {
	return torch.ClipGradNorm(params, maxNorm, normType, errorIfNonfinite)
}

// ClipGradNormTensor is ClipGradNorm returning the pre-clip norm as a 0-dim tensor on
// the gradients' device (0 when no parameter has a gradient): no device-to-host read, so
// a training loop on CUDA does not wait for the GPU at every step. A non-finite norm
// scales every gradient by NaN, as errorIfNonfinite=false does.
func ClipGradNormTensor(params []*torch.Tensor, maxNorm, normType float64) *torch.Tensor {
	return torch.ClipGradNormTensor(params, maxNorm, normType)
}

// ClipGradValue is torch.nn.utils.clip_grad_value_: it clamps every gradient element to
// [-v, v] in place, in one call into libtorch.
func ClipGradValue(params []*torch.Tensor, v float64) error {
	return torch.ClipGradValue(params, v)
}
