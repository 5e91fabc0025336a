package cgotorch

/*
#include "cgotorch.h"
*/
import "C"

import "unsafe"

func h(t Tensor) C.cg_tensor { return C.cg_tensor(t) }

// Unary applies unary op number op (see the op tables in the torch package).
func Unary(op int, a Tensor) (Tensor, error) { return rt(C.cg_unary(C.int(op), h(a))) }

// Binary applies binary op number op.
func Binary(op int, a, b Tensor) (Tensor, error) { return rt(C.cg_binary(C.int(op), h(a), h(b))) }

// Scalar applies tensor-scalar op number op.
func Scalar(op int, a Tensor, s float64) (Tensor, error) {
	return rt(C.cg_scalar(C.int(op), h(a), C.double(s)))
}

// InplaceScalar applies in-place tensor-scalar op number op.
func InplaceScalar(op int, a Tensor, s float64) error {
	return st(C.cg_inplace_scalar(C.int(op), h(a), C.double(s)))
}

// InplaceBinary applies in-place op number op with b (and alpha for add_/sub_).
func InplaceBinary(op int, a, b Tensor, alpha float64) error {
	return st(C.cg_inplace_binary(C.int(op), h(a), h(b), C.double(alpha)))
}

// Reduce applies reduction op over dims (all dims when dims is empty).
func Reduce(op int, a Tensor, dims []int64, keepdim bool) (Tensor, error) {
	return rt(C.cg_reduce(C.int(op), h(a), i64p(dims), C.int(len(dims)), cbool(keepdim)))
}

// DimOp applies a one-dimension op (softmax, argmax, unsqueeze...).
func DimOp(op int, a Tensor, dim int64, keepdim bool) (Tensor, error) {
	return rt(C.cg_dim(C.int(op), h(a), C.int64_t(dim), cbool(keepdim)))
}

// ShapeOp applies a shape op (view, reshape, permute...).
func ShapeOp(op int, a Tensor, shape []int64) (Tensor, error) {
	return rt(C.cg_shape(C.int(op), h(a), i64p(shape), C.int(len(shape))))
}

// Dim2Op applies a two-dimension op (transpose).
func Dim2Op(op int, a Tensor, d0, d1 int64) (Tensor, error) {
	return rt(C.cg_dim2(C.int(op), h(a), C.int64_t(d0), C.int64_t(d1)))
}

// MinMaxDim returns max (isMax) or min along dim with indices.
func MinMaxDim(isMax bool, a Tensor, dim int64, keepdim bool) (Tensor, Tensor, error) {
	var v, i C.cg_tensor
	err := st(C.cg_min_max_dim(cbool(isMax), h(a), C.int64_t(dim), cbool(keepdim), &v, &i))
	return Tensor(v), Tensor(i), err
}

// TopK returns the k largest (or smallest) values along dim with indices.
func TopK(a Tensor, k, dim int64, largest, sorted bool) (Tensor, Tensor, error) {
	var v, i C.cg_tensor
	err := st(C.cg_topk(h(a), C.int64_t(k), C.int64_t(dim), cbool(largest), cbool(sorted), &v, &i))
	return Tensor(v), Tensor(i), err
}

// Cat concatenates (or stacks) tensors along dim.
func Cat(ts []Tensor, dim int64, stack bool) (Tensor, error) {
	if len(ts) == 0 {
		return nil, &Error{Code: CodeInvalid, Msg: "cat/stack: expected a non-empty list of tensors"}
	}
	hs := make([]C.cg_tensor, len(ts))
	for i, t := range ts {
		hs[i] = h(t)
	}
	return rt(C.cg_cat(&hs[0], C.int(len(ts)), C.int64_t(dim), cbool(stack)))
}

// Narrow is Tensor.narrow.
func Narrow(a Tensor, dim, start, length int64) (Tensor, error) {
	return rt(C.cg_narrow(h(a), C.int64_t(dim), C.int64_t(start), C.int64_t(length)))
}

// Slice is a[start:end:step] along dim.
func Slice(a Tensor, dim, start, end, step int64) (Tensor, error) {
	return rt(C.cg_slice(h(a), C.int64_t(dim), C.int64_t(start), C.int64_t(end), C.int64_t(step)))
}

// Select is Tensor.select.
func Select(a Tensor, dim, index int64) (Tensor, error) {
	return rt(C.cg_select(h(a), C.int64_t(dim), C.int64_t(index)))
}

// IndexSelect is torch.index_select.
func IndexSelect(a Tensor, dim int64, index Tensor) (Tensor, error) {
	return rt(C.cg_index_select(h(a), C.int64_t(dim), h(index)))
}

// Gather is torch.gather.
func Gather(a Tensor, dim int64, index Tensor) (Tensor, error) {
	return rt(C.cg_gather(h(a), C.int64_t(dim), h(index)))
}

// MaskedFill is torch.masked_fill.
func MaskedFill(a, mask Tensor, v float64) (Tensor, error) {
	return rt(C.cg_masked_fill(h(a), h(mask), C.double(v)))
}

// MaskedSelect is torch.masked_select.
func MaskedSelect(a, mask Tensor) (Tensor, error) { return rt(C.cg_masked_select(h(a), h(mask))) }

// Where is torch.where(cond, a, b).
func Where(cond, a, b Tensor) (Tensor, error) { return rt(C.cg_where(h(cond), h(a), h(b))) }

// Clamp is torch.clamp with optional bounds.
func Clamp(a Tensor, lo, hi float64, hasLo, hasHi bool) (Tensor, error) {
	return rt(C.cg_clamp(h(a), C.double(lo), C.double(hi), cbool(hasLo), cbool(hasHi)))
}

// Flatten is Tensor.flatten(start, end).
func Flatten(a Tensor, start, end int64) (Tensor, error) {
	return rt(C.cg_flatten(h(a), C.int64_t(start), C.int64_t(end)))
}

// LeakyReLU is F.leaky_relu.
func LeakyReLU(a Tensor, slope float64) (Tensor, error) {
	return rt(C.cg_leaky_relu(h(a), C.double(slope)))
}

// GELU is F.gelu (tanh approximation when tanh is true).
func GELU(a Tensor, tanh bool) (Tensor, error) { return rt(C.cg_gelu(h(a), cbool(tanh))) }

// Dropout is F.dropout.
func Dropout(a Tensor, p float64, train bool) (Tensor, error) {
	return rt(C.cg_dropout(h(a), C.double(p), cbool(train)))
}

// Norm is torch.norm(a, p) over all elements.
func Norm(a Tensor, p float64) (Tensor, error) { return rt(C.cg_norm(h(a), C.double(p))) }

// ---- nn functional ----

// Linear is F.linear; b may be nil.
func Linear(x, w, b Tensor) (Tensor, error) { return rt(C.cg_linear(h(x), h(w), h(b))) }

// Conv2d is F.conv2d; b may be nil; stride, padding, dilation have two elements.
func Conv2d(x, w, b Tensor, stride, padding, dilation []int64, groups int64) (Tensor, error) {
	return rt(C.cg_conv2d(h(x), h(w), h(b), i64p(stride), i64p(padding), i64p(dilation), C.int64_t(groups)))
}

// MaxPool2d is F.max_pool2d.
func MaxPool2d(x Tensor, kernel, stride, padding, dilation []int64, ceil bool) (Tensor, error) {
	return rt(C.cg_max_pool2d(h(x), i64p(kernel), i64p(stride), i64p(padding), i64p(dilation), cbool(ceil)))
}

// AvgPool2d is F.avg_pool2d.
func AvgPool2d(x Tensor, kernel, stride, padding []int64, ceil, countIncludePad bool) (Tensor, error) {
	return rt(C.cg_avg_pool2d(h(x), i64p(kernel), i64p(stride), i64p(padding), cbool(ceil), cbool(countIncludePad)))
}

// AdaptiveAvgPool2d is F.adaptive_avg_pool2d.
func AdaptiveAvgPool2d(x Tensor, out []int64) (Tensor, error) {
	return rt(C.cg_adaptive_avg_pool2d(h(x), i64p(out)))
}

// BatchNorm is F.batch_norm; w, b, rm, rv may be nil.
func BatchNorm(x, w, b, rm, rv Tensor, training bool, momentum, eps float64) (Tensor, error) {
	return rt(C.cg_batch_norm(h(x), h(w), h(b), h(rm), h(rv), cbool(training), C.double(momentum), C.double(eps)))
}

// LayerNorm is F.layer_norm.
func LayerNorm(x Tensor, shape []int64, w, b Tensor, eps float64) (Tensor, error) {
	return rt(C.cg_layer_norm(h(x), i64p(shape), C.int(len(shape)), h(w), h(b), C.double(eps)))
}

// GroupNorm is F.group_norm.
func GroupNorm(x Tensor, groups int64, w, b Tensor, eps float64) (Tensor, error) {
	return rt(C.cg_group_norm(h(x), C.int64_t(groups), h(w), h(b), C.double(eps)))
}

// Embedding is F.embedding.
func Embedding(w, idx Tensor, paddingIdx int64) (Tensor, error) {
	return rt(C.cg_embedding(h(w), h(idx), C.int64_t(paddingIdx)))
}

// CrossEntropy is F.cross_entropy; weight may be nil; reduction 0 none, 1 mean, 2 sum.
func CrossEntropy(x, y, weight Tensor, reduction int, ignoreIndex int64, labelSmoothing float64) (Tensor, error) {
	return rt(C.cg_cross_entropy(h(x), h(y), h(weight), C.int(reduction), C.int64_t(ignoreIndex), C.double(labelSmoothing)))
}

// NLLLoss is F.nll_loss.
func NLLLoss(x, y, weight Tensor, reduction int, ignoreIndex int64) (Tensor, error) {
	return rt(C.cg_nll_loss(h(x), h(y), h(weight), C.int(reduction), C.int64_t(ignoreIndex)))
}

// MSELoss is F.mse_loss.
func MSELoss(x, y Tensor, reduction int) (Tensor, error) {
	return rt(C.cg_mse_loss(h(x), h(y), C.int(reduction)))
}

// L1Loss is F.l1_loss.
func L1Loss(x, y Tensor, reduction int) (Tensor, error) {
	return rt(C.cg_l1_loss(h(x), h(y), C.int(reduction)))
}

// SmoothL1Loss is F.smooth_l1_loss.
func SmoothL1Loss(x, y Tensor, reduction int, beta float64) (Tensor, error) {
	return rt(C.cg_smooth_l1_loss(h(x), h(y), C.int(reduction), C.double(beta)))
}

// BCEWithLogits is F.binary_cross_entropy_with_logits; weight and posWeight may be nil.
func BCEWithLogits(x, y, weight, posWeight Tensor, reduction int) (Tensor, error) {
	return rt(C.cg_bce_with_logits(h(x), h(y), h(weight), h(posWeight), C.int(reduction)))
}

// ---- autograd ----

// SetRequiresGrad switches gradient recording for a leaf tensor.
func SetRequiresGrad(t Tensor, on bool) error { return st(C.cg_set_requires_grad(h(t), cbool(on))) }

// Backward runs backpropagation from t; grad may be nil for a scalar t.
func Backward(t, grad Tensor, retainGraph bool) error {
	return st(C.cg_backward(h(t), h(grad), cbool(retainGraph)))
}

// Grad returns a new handle to t's gradient, or nil when it is undefined.
func Grad(t Tensor) (Tensor, error) { return rt(C.cg_grad(h(t))) }

// SetGrad replaces t's gradient; nil clears it.
func SetGrad(t, grad Tensor) error { return st(C.cg_set_grad(h(t), h(grad))) }

// GradEnabled reports the calling thread's grad mode.
func GradEnabled() bool { return C.cg_grad_enabled() != 0 }

// SetGradEnabled sets the calling thread's grad mode.
func SetGradEnabled(on bool) { C.cg_set_grad_enabled(cbool(on)) }

// ---- CUDA ----

// CUDAAvailable reports whether a CUDA device can be used.
func CUDAAvailable() bool { return C.cg_cuda_available() != 0 }

// CUDADeviceCount returns the number of visible CUDA devices.
func CUDADeviceCount() int { return int(C.cg_cuda_device_count()) }

// CUDASetDevice makes device the current CUDA device of the calling thread.
func CUDASetDevice(device int) error { return st(C.cg_cuda_set_device(C.int(device))) }

// CUDADeviceName returns the name of a device.
func CUDADeviceName(device int) (string, error) {
	buf := make([]byte, 256)
	if err := st(C.cg_cuda_device_name(C.int(device), (*C.char)(unsafe.Pointer(&buf[0])), C.int(len(buf)))); err != nil {
		return "", err
	}
	return C.GoString((*C.char)(unsafe.Pointer(&buf[0]))), nil
}

// CUDACapability returns a device's compute capability.
func CUDACapability(device int) (major, minor int, err error) {
	var a, b C.int
	err = st(C.cg_cuda_capability(C.int(device), &a, &b))
	return int(a), int(b), err
}

// CUDATotalMemory returns a device's memory in bytes.
func CUDATotalMemory(device int) (int64, error) {
	var n C.int64_t
	err := st(C.cg_cuda_total_memory(C.int(device), &n))
	return int64(n), err
}

// CUDASynchronize waits for all work on a device.
func CUDASynchronize(device int) error { return st(C.cg_cuda_synchronize(C.int(device))) }

// CUDAMemoryStats returns the caching allocator's allocated, reserved and peak allocated bytes.
func CUDAMemoryStats(device int) (allocated, reserved, peak int64, err error) {
	var a, r, p C.int64_t
	err = st(C.cg_cuda_memory_stats(C.int(device), &a, &r, &p))
	return int64(a), int64(r), int64(p), err
}

// CUDAEmptyCache releases unused cached device memory.
func CUDAEmptyCache() error { return st(C.cg_cuda_empty_cache()) }

// CUDAResetPeak resets the peak memory statistic of a device.
func CUDAResetPeak(device int) error { return st(C.cg_cuda_reset_peak(C.int(device))) }

// CuDNNVersion returns the cuDNN version libtorch uses, 0 when none.
func CuDNNVersion() int { return int(C.cg_cudnn_version()) }

// CUDARuntimeVersion returns the CUDA runtime version, 0 when none.
func CUDARuntimeVersion() int { return int(C.cg_cuda_runtime_version()) }
