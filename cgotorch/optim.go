package cgotorch

/*
#cgo noescape cg_optim_step
#cgo nocallback cg_optim_step
#include "cgotorch.h"
*/
import "C"

import (
	"unsafe"

	"github.com/gotrain/gotrain/internal/hyper"
)

// OptNState is the number of state slots per parameter of OptimStep (see cgotorch.h for
// each algorithm's slot order).
const OptNState = C.CG_OPT_NSTATE

func ci32(b bool) C.int32_t {
	if b {
		return 1
	}
	return 0
}

// optimStep converts the groups' hyperparameters to kind's C struct and runs the step.
func optimStep[H, CH any](kind C.enum_cg_optimizer, hyper []H, conv func(H) CH, groupSizes []int64, params, state []Tensor) error {
	if len(params) == 0 || len(hyper) == 0 {
		return nil
	}
	var buf [4]CH // most optimizers have one group: no allocation
	ch := buf[:0]
	if len(hyper) > len(buf) {
		ch = make([]CH, 0, len(hyper))
	}
	for _, h := range hyper {
		ch = append(ch, conv(h))
	}
	return st(C.cg_optim_step(kind, C.int(len(groupSizes)), i64p(groupSizes), unsafe.Pointer(&ch[0]), handles(params), handles(state)))
}

// SGDStep runs one SGD step over the groups: group g is the next groupSizes[g] params,
// with hyper[g]. state has OptNState slots per parameter; nil slots the step needs are
// filled with new handles the caller owns.
func SGDStep(hs []hyper.SGD, groupSizes []int64, params, state []Tensor) error {
	return optimStep(C.CG_OPT_SGD, hs, sgdC, groupSizes, params, state)
}

// AdamStep is SGDStep for Adam and AdamW.
func AdamStep(hs []hyper.Adam, groupSizes []int64, params, state []Tensor) error {
	return optimStep(C.CG_OPT_ADAM, hs, adamC, groupSizes, params, state)
}

// RMSpropStep is SGDStep for RMSprop.
func RMSpropStep(hs []hyper.RMSprop, groupSizes []int64, params, state []Tensor) error {
	return optimStep(C.CG_OPT_RMSPROP, hs, rmspropC, groupSizes, params, state)
}

// AdagradStep is SGDStep for Adagrad.
func AdagradStep(hs []hyper.Adagrad, groupSizes []int64, params, state []Tensor) error {
	return optimStep(C.CG_OPT_ADAGRAD, hs, adagradC, groupSizes, params, state)
}

// The C structs of the algorithms' hyperparameters.

func sgdC(h hyper.SGD) C.cg_sgd_hyper {
	return C.cg_sgd_hyper{lr: C.double(h.LR), momentum: C.double(h.Momentum), dampening: C.double(h.Dampening),
		weight_decay: C.double(h.WeightDecay), nesterov: ci32(h.Nesterov), maximize: ci32(h.Maximize)}
}

func adamC(h hyper.Adam) C.cg_adam_hyper {
	return C.cg_adam_hyper{lr: C.double(h.LR), beta1: C.double(h.Beta1), beta2: C.double(h.Beta2), eps: C.double(h.Eps),
		weight_decay: C.double(h.WeightDecay), amsgrad: ci32(h.AMSGrad), maximize: ci32(h.Maximize),
		decoupled_weight_decay: ci32(h.DecoupledWeightDecay), fused: ci32(h.Fused)}
}

func rmspropC(h hyper.RMSprop) C.cg_rmsprop_hyper {
	return C.cg_rmsprop_hyper{lr: C.double(h.LR), alpha: C.double(h.Alpha), eps: C.double(h.Eps),
		weight_decay: C.double(h.WeightDecay), momentum: C.double(h.Momentum), centered: ci32(h.Centered),
		maximize: ci32(h.Maximize)}
}

func adagradC(h hyper.Adagrad) C.cg_adagrad_hyper {
	return C.cg_adagrad_hyper{lr: C.double(h.LR), lr_decay: C.double(h.LRDecay), eps: C.double(h.Eps),
		weight_decay: C.double(h.WeightDecay), initial_accumulator_value: C.double(h.InitialAccumulatorValue),
		maximize: ci32(h.Maximize)}
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
