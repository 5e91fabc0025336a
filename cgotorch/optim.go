package cgotorch

/*
#cgo noescape cg_optim_step
#cgo nocallback cg_optim_step
#include "cgotorch.h"
*/
import "C"

import "unsafe"

// OptNState is the number of state slots per parameter of OptimStep (see cgotorch.h for
// each algorithm's slot order); OptNHyper the number of hyperparameter values per group.
const (
	OptNState = C.CG_OPT_NSTATE
	OptNHyper = C.CG_OPT_NHYPER
)

// The algorithms of OptimStep.
const (
	OptSGD     = C.CG_OPT_SGD
	OptAdam    = C.CG_OPT_ADAM
	OptRMSprop = C.CG_OPT_RMSPROP
	OptAdagrad = C.CG_OPT_ADAGRAD
)

// OptimStep runs one step of algorithm kind over the groups: group g is the next
// groupSizes[g] params, with hyper[g*OptNHyper:(g+1)*OptNHyper]. state has OptNState
// slots per parameter; nil slots the step needs are filled with new handles the caller
// owns.
func OptimStep(kind int, hyper []float64, groupSizes []int64, params, state []Tensor) error {
	if len(params) == 0 || len(groupSizes) == 0 {
		return nil
	}
	return st(C.cg_optim_step(C.enum_cg_optimizer(kind), C.int(len(groupSizes)), i64p(groupSizes),
		(*C.double)(unsafe.Pointer(&hyper[0])), handles(params), handles(state)))
}

// ZeroGrad zeroes the params' gradients, or drops them when setToNone is true.
func ZeroGrad(params []Tensor, setToNone bool) error {
	return st(C.cg_zero_grad(handles(params), C.int(len(params)), cbool(setToNone)))
}

// ClipGradNorm is torch.nn.utils.clip_grad_norm_; it returns the pre-clip total norm.
func ClipGradNorm(params []Tensor, maxNorm, normType float64, errorIfNonfinite bool) (float64, error) {
	var total C.double
	err := st(C.cg_clip_grad_norm(handles(params), C.int(len(params)), C.double(maxNorm), C.double(normType),
		cbool(errorIfNonfinite), &total))
	return float64(total), err
}

// ClipGradNormTensor is ClipGradNorm returning the norm as a tensor on the gradients'
// device (adopted by the thread's scope).
func ClipGradNormTensor(params []Tensor, maxNorm, normType float64) Result {
	return rt(C.cg_clip_grad_norm_tensor(handles(params), C.int(len(params)), C.double(maxNorm), C.double(normType)))
}

// ClipGradValue is torch.nn.utils.clip_grad_value_.
func ClipGradValue(params []Tensor, v float64) error {
	return st(C.cg_clip_grad_value(handles(params), C.int(len(params)), C.double(v)))
}

// AutocastState is what AutocastEnter replaced, for AutocastExit to restore.
type AutocastState struct{ enabled, dtype, cache C.int }

// AutocastEnter turns autocast on for the calling thread and device type with the given
// ScalarType.
func AutocastEnter(devType, dtype int) (AutocastState, error) {
	var s AutocastState
	err := st(C.cg_autocast_enter(C.int(devType), C.int(dtype), &s.enabled, &s.dtype, &s.cache))
	return s, err
}

// AutocastExit restores the settings AutocastEnter replaced and clears the cast cache
// when leaving the outermost region.
func AutocastExit(devType int, s AutocastState) error {
	return st(C.cg_autocast_exit(C.int(devType), s.enabled, s.dtype, s.cache))
}

// AMPUnscale multiplies the params' gradients by 1/scale and returns a new found_inf
// tensor (non-zero when a gradient held inf or NaN) on the scale's device; the caller owns it.
func AMPUnscale(params []Tensor, scale Tensor) (Tensor, error) {
	var out C.cg_tensor
	err := st(C.cg_amp_unscale(handles(params), C.int(len(params)), h(scale), &out))
	return Tensor(out), err
}

// AMPUpdateScale is torch._amp_update_scale_ with the sum of foundInfs.
func AMPUpdateScale(scale, growthTracker Tensor, foundInfs []Tensor, growth, backoff float64, interval int64) error {
	return st(C.cg_amp_update_scale(h(scale), h(growthTracker), handles(foundInfs), C.int(len(foundInfs)),
		C.double(growth), C.double(backoff), C.int64_t(interval)))
}
