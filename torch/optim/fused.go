package optim

// The fused optimizers in one file: torch.optim.Adam, AdamW and SGD with fused=True,
// written in Go over the generated rows of ATen's fused kernels (_fused_adam_,
// _fused_adamw_ and _fused_sgd_ in their tensor-lr form, and _foreach_add_ for the step
// counts), their hyperparameters read from the param-group dict PyTorch saves. They are
// the built-in optimizers' fused form (AdamOptions.Fused, SGDOptions.Fused) and their
// capturable form (a CUDA graph's, CaptureLR); the default (foreach) form is a kernel in
// libtorch (torch.OptimizerStep), which computes PyTorch's float64 bias corrections from
// the step counts on the host, something a replayed step has no Go to do. The fused
// kernels read the counts on the device, so they need no host arithmetic between steps.
//
// The learning rate reaches the kernel as a tensor: each group's is a torch.HostScalar
// that StepArgs and Step set from ParamGroup.LR, with no op, before each step. A replayed
// step (torch.Trace) records the kernels with that tensor as an argument and reads its
// value when it replays, so a scheduler's rate applies without a new recording.

import (
	"fmt"

	"github.com/gotrain/gotrain/torch"
)

// fusedUpdate updates params (a group's parameters with a gradient that share a device
// and dtype) and their state rows in one fused kernel call, at the learning rate held in
// the 0-dim tensor lr.
type fusedUpdate func(o *base, g *ParamGroup, lr *torch.Tensor, params, grads []*torch.Tensor, rows []*[torch.OptimizerStateSlots]*torch.Tensor)

// fusedAdam is torch.optim.Adam(fused=True), and AdamW's with decoupled weight decay:
// one is added to every parameter's "step" (a 0-dim float32 tensor on the parameter's
// device, as PyTorch keeps it for fused=True), then _fused_adam(w)_ updates the
// parameters and their moments in one pass.
func fusedAdam(o *base, g *ParamGroup, lr *torch.Tensor, params, grads []*torch.Tensor, rows []*[torch.OptimizerStateSlots]*torch.Tensor) {
	amsgrad := o.flag(g, "amsgrad")
	steps, avgs, sqs := make([]*torch.Tensor, len(params)), make([]*torch.Tensor, len(params)), make([]*torch.Tensor, len(params))
	var maxSqs []*torch.Tensor
	if amsgrad {
		maxSqs = make([]*torch.Tensor, len(params))
	}
	for i, p := range params {
		r := rows[i]
		dev := p.Device()
		switch {
		case r[0] == nil:
			r[0] = torch.Zeros(nil, torch.Float32, dev).Escape()
		case r[0].Device() != dev: // loaded from a foreach optimizer's state, on the CPU
			moved := r[0].To(dev, false).Escape()
			r[0].Free()
			r[0] = moved
		}
		for k := 1; k <= 3; k++ {
			if r[k] == nil && (k < 3 || amsgrad) {
				r[k] = p.ZerosLike().Escape()
			}
		}
		steps[i], avgs[i], sqs[i] = r[0], r[1], r[2]
		if amsgrad {
			maxSqs[i] = r[3]
		}
	}
	betas := g.Pair("betas", o.defaultGroup().Pair("betas", [2]float64{0.9, 0.999}))
	wd, eps, maximize := o.float(g, "weight_decay"), o.float(g, "eps"), o.flag(g, "maximize")
	torch.ForeachAddScalarInPlace(steps, 1)
	if o.flag(g, "decoupled_weight_decay") {
		torch.FusedAdamWTensorLR(params, grads, avgs, sqs, maxSqs, steps, lr, betas[0], betas[1], wd, eps, amsgrad, maximize, nil, nil)
	} else {
		torch.FusedAdamTensorLR(params, grads, avgs, sqs, maxSqs, steps, lr, betas[0], betas[1], wd, eps, amsgrad, maximize, nil, nil)
	}
}

// fusedSGD is torch.optim.SGD(fused=True): _fused_sgd_ updates the parameters and, with
// momentum, their "momentum_buffer"s, which its first step sets to the gradients.
func fusedSGD(o *base, g *ParamGroup, lr *torch.Tensor, params, grads []*torch.Tensor, rows []*[torch.OptimizerStateSlots]*torch.Tensor) {
	momentum := o.float(g, "momentum")
	var bufs []*torch.Tensor
	first := false
	if momentum != 0 {
		bufs = make([]*torch.Tensor, len(params))
		first = true // as PyTorch's: every buffer is new
		for i, p := range params {
			if rows[i][0] == nil {
				rows[i][0] = p.ZerosLike().Escape()
			} else {
				first = false
			}
			bufs[i] = rows[i][0]
		}
	}
	torch.FusedSGDTensorLR(params, grads, bufs, o.float(g, "weight_decay"), momentum, lr, o.float(g, "dampening"),
		o.flag(g, "nesterov"), o.flag(g, "maximize"), first, nil, nil)
}

// defaultGroup is the optimizer's defaults as a group, for the keys a group lacks.
func (o *base) defaultGroup() *ParamGroup { return &ParamGroup{Options: o.defaults} }

// float returns group g's numeric option key, or the optimizer's default when g lacks it.
func (o *base) float(g *ParamGroup, key string) float64 {
	if v, ok := o.k.fixed[key]; ok {
		return v
	}
	return g.Float(key, o.defaultGroup().Float(key, 0))
}

// flag is float as a bool.
func (o *base) flag(g *ParamGroup, key string) bool { return o.float(g, key) != 0 }

// fused reports whether the next step runs the fused form, or why it cannot: the kind
// has one, and every group has fused=True or a CUDA graph captures the step (CaptureLR).
func (o *base) fused() (bool, error) {
	if o.k.fused == nil {
		return false, nil
	}
	if o.capture != nil {
		return true, nil
	}
	n := 0
	for _, g := range o.groups {
		if o.flag(g, "fused") {
			n++
		}
	}
	if n != 0 && n != len(o.groups) {
		return false, fmt.Errorf("%d of %d parameter groups have fused=True; set it in all or none", n, len(o.groups))
	}
	return n != 0, nil
}

// setLRs writes each group's LR into its learning-rate tensor, with no op (so nothing
// is recorded): what the next fused step, eager or replayed, reads.
func (o *base) setLRs() {
	for len(o.lrs) < len(o.groups) {
		o.lrs = append(o.lrs, torch.NewHostScalar(0))
	}
	for i, g := range o.groups {
		o.lrs[i].Set(g.LR)
	}
}

// fusedStep runs the fused form over every group: one kernel call for each device and
// dtype of a group's parameters that have a gradient, in order of first appearance, as
// PyTorch groups them.
func (o *base) fusedStep() (err error) {
	defer torch.Recover(&err, o.stepCtx)
	torch.WithScope(func() {
		i := 0
		for gi, g := range o.groups {
			lr := o.lrs[gi].Tensor()
			if o.capture != nil {
				lr = o.capture[gi]
			}
			rows := o.state[i : i+len(g.Params)]
			i += len(g.Params)
			for _, set := range deviceSets(g.Params) {
				ps, grads := make([]*torch.Tensor, len(set)), make([]*torch.Tensor, len(set))
				rs := make([]*[torch.OptimizerStateSlots]*torch.Tensor, len(set))
				for m, j := range set {
					ps[m], grads[m], rs[m] = g.Params[j], g.Params[j].Grad(), &rows[j]
				}
				o.k.fused(o, g, lr, ps, grads, rs)
			}
		}
	})
	return nil
}

// deviceSets returns the indices of the params that have a gradient, in sets that share
// a device and dtype, in order of first appearance.
func deviceSets(params []*torch.Tensor) [][]int {
	type key struct {
		dev torch.Device
		dt  torch.DType
	}
	var sets [][]int
	at := map[key]int{} // the index in sets of each key's set
	for j, p := range params {
		if p.Grad() == nil {
			continue
		}
		k := key{p.Device(), p.DType()}
		i, ok := at[k]
		if !ok {
			i, at[k] = len(sets), len(sets)
			sets = append(sets, nil)
		}
		sets[i] = append(sets[i], j)
	}
	return sets
}

// Capturable is implemented by the optimizers whose step a CUDA graph can capture: SGD,
// and Adam and AdamW with fused=True, whose capturable form is the fused one reading the
// learning rate from the device.
type Capturable interface {
	Stepper
	// Capturable returns why the optimizer's step cannot be captured, or nil.
	Capturable() error
	// CaptureLR makes the following steps run the capturable form, reading group g's
	// learning rate from lrs[g], a 0-dim float32 tensor on the parameters' device that
	// the caller fills before each step, instead of the group's LR; nil ends it.
	CaptureLR(lrs []*torch.Tensor) error
}

// Capturable returns why the optimizer's step cannot be captured by a CUDA graph, or nil.
func (o *base) Capturable() error {
	switch {
	case o.k.fused == nil:
		return fmt.Errorf("optimizer %s reads its step count on the host and has no capturable form; use SGD, Adam or AdamW (fused)", o.k.name)
	case o.k.kernel == torch.AdamKernel: // its foreach form reads the counts on the host
		for _, g := range o.groups {
			if !o.flag(g, "fused") {
				return fmt.Errorf("optimizer %s without fused=True reads its step count on the host; use %s(fused=True) (cmd/train: --adam-kernel fused), whose capturable form keeps it on the device", o.k.name, o.k.name)
			}
		}
	}
	return nil
}

// CaptureLR makes the step read each group's learning rate from lrs (Capturable).
func (o *base) CaptureLR(lrs []*torch.Tensor) error {
	if lrs == nil {
		o.capture = nil
		return nil
	}
	if err := o.Capturable(); err != nil {
		return err
	}
	if len(lrs) != len(o.groups) {
		return fmt.Errorf("optim: %s: %d learning rates for %d parameter groups", o.k.name, len(lrs), len(o.groups))
	}
	o.capture = lrs
	return nil
}
