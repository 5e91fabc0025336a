package torch

import (
	"fmt"
	"runtime"

	"github.com/gotrain/gotrain/cgotorch"
)

// This file holds the multi-tensor kernels that packages optim and amp are built on:
// each is one call over every parameter, so that a step does not cross the C boundary
// once per tensor.

// OptimizerKernel is an optimizer algorithm OptimizerStep runs: torch.optim's SGD, Adam
// (and AdamW), RMSprop and Adagrad in their default (foreach) form. They are C++ rather
// than Go over ops because each step computes host values from the step count in
// float64 (Adam's bias corrections, Adagrad's decayed rate) that must equal PyTorch's to
// the bit, and a replayed step (Trace) has no Go between steps to compute them. The
// fused forms (ATen's _fused_* kernels, which read the step count on the device) are Go
// over ops (package optim's fused.go).
type OptimizerKernel int

// The kernels of OptimizerStep.
const (
	SGDKernel     OptimizerKernel = cgotorch.OptSGD
	AdamKernel    OptimizerKernel = cgotorch.OptAdam
	RMSpropKernel OptimizerKernel = cgotorch.OptRMSprop
	AdagradKernel OptimizerKernel = cgotorch.OptAdagrad
)

// OptimizerKeys are the param-group keys (PyTorch's state_dict names) whose values each
// kernel reads, in the order OptimizerStep takes them: a group's hyperparameters are
// these values, bools as 0 or 1 and "betas" as its two numbers, padded with zeros to
// OptimizerHyperLen. They are the only form of a built-in optimizer's hyperparameters
// besides the param-group dict itself.
var OptimizerKeys = map[OptimizerKernel][]string{
	SGDKernel:     {"lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize"},
	AdamKernel:    {"lr", "betas", "eps", "weight_decay", "amsgrad", "maximize", "decoupled_weight_decay"},
	RMSpropKernel: {"lr", "alpha", "eps", "weight_decay", "momentum", "centered", "maximize"},
	AdagradKernel: {"lr", "lr_decay", "eps", "weight_decay", "initial_accumulator_value", "maximize"},
}

// OptimizerHyperLen is the number of hyperparameter values per group of OptimizerStep.
const OptimizerHyperLen = cgotorch.OptNHyper

// OptimizerStateSlots is the number of state tensors OptimizerStep keeps per parameter.
// Their order per algorithm: SGD momentum_buffer; Adam step, exp_avg, exp_avg_sq,
// max_exp_avg_sq; RMSprop step, square_avg, momentum_buffer, grad_avg; Adagrad step, sum.
const OptimizerStateSlots = cgotorch.OptNState

// OptimizerStep runs one optimizer step of kernel k over every parameter with a
// gradient, in one call, with the arithmetic of PyTorch's implementation: group g is the
// next groupSizes[g] params, with hyperparameters
// hyper[g*OptimizerHyperLen:(g+1)*OptimizerHyperLen] (OptimizerKeys). state holds each
// parameter's state tensors; nil slots the step needs are filled with new tensors the
// caller owns (no scope does), also when the step fails part way.
func OptimizerStep(k OptimizerKernel, hyper []float64, groupSizes []int64, params []*Tensor, state [][OptimizerStateSlots]*Tensor) error {
	a := NewOptimizerArgs(k, hyper, groupSizes, params, state)
	return a.Step()
}

// OptimizerArgs are the arguments of one OptimizerStep, held for later: Step runs them,
// and a replayed step (Trace.Run) takes its hyperparameters from them. The slices are
// the caller's (an optimizer's own state rows), not copies. Made by OptimizerFunc
// instead, they are an optimizer step written in Go over ops, which a trace records as
// it records any op.
type OptimizerArgs struct {
	fn         func() error
	kernel     OptimizerKernel
	hyper      []float64
	groupSizes []int64
	params     []*Tensor
	state      [][OptimizerStateSlots]*Tensor
}

// NewOptimizerArgs holds OptimizerStep(k, hyper, groupSizes, params, state)'s arguments.
// It panics with a *Error when their lengths disagree.
func NewOptimizerArgs(k OptimizerKernel, hyper []float64, groupSizes []int64, params []*Tensor, state [][OptimizerStateSlots]*Tensor) OptimizerArgs {
	if len(state) != len(params) {
		panic(&Error{Op: "optimizer step", Msg: fmt.Sprintf("%d state rows for %d parameters", len(state), len(params))})
	}
	if len(hyper) != len(groupSizes)*OptimizerHyperLen {
		panic(&Error{Op: "optimizer step", Msg: fmt.Sprintf("%d hyperparameter values for %d groups, want %d a group", len(hyper), len(groupSizes), OptimizerHyperLen)})
	}
	return OptimizerArgs{kernel: k, hyper: hyper, groupSizes: groupSizes, params: params, state: state}
}

// OptimizerFunc returns the arguments of an optimizer step written in Go over ops (a
// fused optimizer): Step calls step, and a replayed step replays the ops it recorded,
// with no hyperparameters to pass (those that change between steps, such as the learning
// rate, are tensors the ops read: see HostScalar).
func OptimizerFunc(step func() error) OptimizerArgs { return OptimizerArgs{fn: step} }

// Step runs the optimizer step (OptimizerStep).
func (a *OptimizerArgs) Step() error {
	if a.fn != nil {
		return a.fn()
	}
	st, ps := a.borrow()
	err := cgotorch.OptimStep(int(a.kernel), a.hyper, a.groupSizes, *ps, *st)
	a.adopt(st, ps)
	return wrapErr("optimizer step", err)
}

// setHyper puts the step's hyperparameters in h, for a replayed step (Trace.Run); a nil
// a has none.
func (a *OptimizerArgs) setHyper(h *cgotorch.Hyper) {
	if a == nil || a.fn != nil {
		h.SetNone()
		return
	}
	h.Set(int(a.kernel), a.hyper)
}

// borrow returns the state and parameter handles in C's layout, in borrowed buffers.
func (a *OptimizerArgs) borrow() (st, ps *[]cgotorch.Tensor) {
	st = borrowHandles(len(a.params) * OptimizerStateSlots)
	for i := range a.state {
		for k, t := range a.state[i] {
			(*st)[i*OptimizerStateSlots+k] = opt(t)
		}
	}
	return st, borrowHandlesOf(a.params)
}

// adopt gives the state rows the tensors the step created (the caller owns them) and
// returns the buffers.
func (a *OptimizerArgs) adopt(st, ps *[]cgotorch.Tensor) {
	for i := range a.state {
		for k := range a.state[i] {
			if h := (*st)[i*OptimizerStateSlots+k]; h != 0 && a.state[i][k] == nil {
				a.state[i][k] = owned(h)
			}
		}
	}
	returnHandles(st)
	returnHandles(ps)
}

// HostScalar is a 0-dim float64 CPU tensor whose value Go sets directly in its memory,
// with no call into libtorch, so that setting it is never recorded: an op given its
// Tensor reads the value it has when the op runs, also in a replayed step (Trace), which
// holds the tensor by identity. A fused optimizer passes its learning rate this way, so
// that a scheduler's rate reaches a replayed step without a new recording.
type HostScalar struct {
	t *Tensor
	p *float64
}

// NewHostScalar returns a HostScalar holding v, owned by the caller (no scope). It
// panics with a *Error while a step is recorded (its memory is read on the host).
func NewHostScalar(v float64) *HostScalar {
	var h HostScalar
	WithScope(func() { h.t = Full(nil, v, Float64, CPU).Escape() })
	h.p = (*float64)(h.t.dataPtr())
	return &h
}

// Set makes v the value the next op reading the tensor sees.
func (h *HostScalar) Set(v float64) { *h.p = v }

// Value returns the value.
func (h *HostScalar) Value() float64 { return *h.p }

// Tensor returns the tensor, owned by h.
func (h *HostScalar) Tensor() *Tensor { return h.t }

// Free releases the tensor now; h must not be used afterwards.
func (h *HostScalar) Free() {
	if h != nil {
		h.t.Free()
		h.t, h.p = nil, nil
	}
}

// ZeroGrads zeroes the params' gradients in one call, or drops them when setToNone is true
// (optimizer.zero_grad).
func ZeroGrads(params []*Tensor, setToNone bool) {
	b := borrowHandlesOf(params)
	err := cgotorch.ZeroGrad(*b, setToNone)
	returnHandles(b)
	check("zero_grad", err)
}

// ClipGradNorm is torch.nn.utils.clip_grad_norm_: it scales the params' gradients so that
// their total normType-norm is at most maxNorm, and returns the norm before clipping.
// With errorIfNonfinite a non-finite norm is an error and nothing is scaled.
func ClipGradNorm(params []*Tensor, maxNorm, normType float64, errorIfNonfinite bool) (float64, error) {
	total, err := cgotorch.ClipGradNorm(handles(params), maxNorm, normType, errorIfNonfinite)
	return total, wrapErr("clip_grad_norm_", err)
}

// ClipGradNormTensor is ClipGradNorm (without errorIfNonfinite) returning the total
// norm as a 0-dim tensor on the gradients' device instead of a float64, so that clipping
// makes no device-to-host read; a CUDA training loop sums it on the device.
func ClipGradNormTensor(params []*Tensor, maxNorm, normType float64) *Tensor {
	return adopt("clip_grad_norm_", cgotorch.ClipGradNormTensor(handles(params), maxNorm, normType))
}

// ClipGradValue is torch.nn.utils.clip_grad_value_: it clamps every gradient element to
// [-v, v].
func ClipGradValue(params []*Tensor, v float64) error {
	return wrapErr("clip_grad_value_", cgotorch.ClipGradValue(handles(params), v))
}

// Autocast runs f with autocast on for dev's device type and dtype, as `with
// torch.autocast(dev.type, dtype=dtype):` does. Autocast state is per OS thread, so the
// goroutine is locked to its thread while f runs; the previous state is restored
// afterwards (also when f panics) and the cast cache is cleared on leaving the outermost
// region.
func Autocast(dev Device, dtype DType, f func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	dt := int(dev.Type)
	prev, err := cgotorch.AutocastEnter(dt, int(dtype))
	check("autocast", err)
	defer func() { check("autocast", cgotorch.AutocastExit(dt, prev)) }()
	f()
}

// AMPUnscale multiplies the params' gradients by 1/scale in place
// (GradScaler.unscale_'s kernel) and returns a new float32 found_inf tensor on the
// scale's device, non-zero when a gradient held inf or NaN. The caller owns it.
func AMPUnscale(params []*Tensor, scale *Tensor) (*Tensor, error) {
	h, err := cgotorch.AMPUnscale(handles(params), scale.handle())
	if err != nil {
		return nil, opErr("unscale_", err)
	}
	return owned(h), nil
}

// AMPUpdateScale is torch._amp_update_scale_ over the sum of foundInfs: it backs the scale
// off after an inf or NaN, and grows it after interval clean steps.
func AMPUpdateScale(scale, growthTracker *Tensor, foundInfs []*Tensor, growth, backoff float64, interval int64) error {
	return wrapErr("_amp_update_scale_", cgotorch.AMPUpdateScale(scale.handle(), growthTracker.handle(), handles(foundInfs), growth, backoff, interval))
}

// SetData is `t.data = src`: t keeps its identity (autograd leaf, optimizer and module
// slots) and takes src's storage, device and dtype.
func (t *Tensor) SetData(src *Tensor) {
	check("set_data", cgotorch.SetData(t.handle(), src.handle()))
}

// AccumulateFlags choose what Accumulate does besides adding.
type AccumulateFlags int

const (
	// AccumulateTrack treats values[0] as a loss to watch: acc[n] receives it, and
	// acc[n+1] becomes min(acc[n+1], step) when it is not finite, so that the first bad
	// step is known without reading the loss back every step (start acc[n+1] at +Inf).
	AccumulateTrack AccumulateFlags = cgotorch.AccTrack
	// AccumulateSkipNonfinite leaves a sum unchanged when its value is inf or NaN.
	AccumulateSkipNonfinite AccumulateFlags = cgotorch.AccSkipNonfinite
	// AccumulateOnDevice takes the path a CUDA accumulator takes (ATen ops queued on the
	// device) on the CPU too, so the two can be compared.
	AccumulateOnDevice AccumulateFlags = cgotorch.AccATen
)

// Accumulate adds weight·values[i] to acc[i] in one call: the running sums of a
// training loop's per-batch scalars (loss, metrics), kept where they are computed so
// that a CUDA step makes no device-to-host read. acc is a contiguous float64 vector on
// the values' device with at least len(values) elements (two more with AccumulateTrack);
// each value has one element. On the CPU the sums are computed directly, with no ATen
// dispatch; on a GPU they are ATen ops queued on its stream. It panics on misuse.
func Accumulate(acc *Tensor, values []*Tensor, weight float64, step int64, flags AccumulateFlags) {
	hs := borrowHandlesOf(values) // a step's loss and metrics: no allocation
	err := cgotorch.Accumulate(acc.handle(), *hs, weight, step, int(flags))
	returnHandles(hs)
	check("accumulate", err)
}
