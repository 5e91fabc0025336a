package optim

import (
	"fmt"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
)

// Algorithm is an optimizer written in Go with torch's ops: its name, its per-parameter
// state slots and its update. New turns it into an Optimizer with everything else an
// optimizer has — parameter groups, LR scheduling, PyTorch's state-dict layout (so its
// state moves to and from a Python optimizer of the same name), checkpoints and exact
// resume — so a new optimizer is one Go file:
//
//	var Lion = optim.Algorithm{
//		Name: "Lion", Slots: []string{"exp_avg"},
//		Defaults: map[string]any{"betas": checkpoint.Tuple{0.9, 0.99}, "weight_decay": 0.0},
//		Update: func(g *optim.ParamGroup, p, grad *torch.Tensor, state []*torch.Tensor) { ... },
//	}
//
// The package's own optimizers run ATen's multi-tensor (or fused) kernels instead, and
// the Trainer can run their step inside its one-call training step; an Algorithm's step
// is op by op, and the Trainer's one-call step declines it.
type Algorithm struct {
	// Name is the optimizer's class name, recorded in the run's config ("Lion").
	Name string
	// Slots names the per-parameter state tensors in PyTorch's order ("step",
	// "exp_avg"); a slot named "step" is restored as a step count (its own dtype and
	// device) rather than in the parameter's.
	Slots []string
	// Defaults are the group options besides "lr", with their default values (numbers,
	// bools, strings, checkpoint.Tuple).
	Defaults map[string]any
	// Check validates a group's options, as PyTorch's constructor does (optional).
	Check func(g *ParamGroup) error
	// Update changes p in place from its gradient, under torch.NoGrad and inside a
	// scope: state holds p's slots in Slots' order, nil before the first update. It may
	// replace a slot with a new tensor (the optimizer keeps it) or change it in place.
	Update func(g *ParamGroup, p, grad *torch.Tensor, state []*torch.Tensor)
}

// New returns an optimizer over groups that updates each parameter with a, at learning
// rate lr unless a group sets its own.
func New(a Algorithm, groups []Group, lr float64) (Optimizer, error) {
	if a.Name == "" || a.Update == nil {
		return nil, fmt.Errorf("optim: New: an Algorithm needs a Name and an Update")
	}
	if len(a.Slots) > torch.OptimizerStateSlots {
		return nil, fmt.Errorf("optim: %s: %d state slots, at most %d", a.Name, len(a.Slots), torch.OptimizerStateSlots)
	}
	defaults := checkpoint.NewDict()
	for k, v := range a.Defaults {
		defaults.Set(k, v)
	}
	check := a.Check
	if check == nil {
		check = func(*ParamGroup) error { return nil }
	}
	b, err := newBase(&kind{name: a.Name, slots: a.Slots, check: check}, groups, lr, defaults)
	if err != nil {
		return nil, err
	}
	return &algorithmOptimizer{b: b, a: a}, nil
}

// algorithmOptimizer is an Algorithm's Optimizer. It holds its base rather than
// embedding it, so that it is not an optim.Stepper: its step is not one of libtorch's
// kernels.
type algorithmOptimizer struct {
	b *base
	a Algorithm
}

// Step updates every parameter that has a gradient.
func (o *algorithmOptimizer) Step() (err error) {
	defer torch.Recover(&err, o.b.stepCtx)
	o.b.syncState()
	n := len(o.a.Slots)
	i := 0
	torch.WithScope(func() {
		torch.NoGrad(func() {
			for _, g := range o.b.groups {
				for _, p := range g.Params {
					slots := o.b.state[i][:n]
					i++
					grad := p.Grad()
					if grad == nil {
						continue
					}
					var old [torch.OptimizerStateSlots]*torch.Tensor
					copy(old[:], slots)
					o.a.Update(g, p, grad, slots)
					for k, t := range slots {
						if t != old[k] {
							t.Escape()
							if old[k] != nil {
								old[k].Free()
							}
						}
					}
				}
			}
		})
	})
	return nil
}

// ZeroGrad zeroes or drops the gradients.
func (o *algorithmOptimizer) ZeroGrad(setToNone bool) { o.b.ZeroGrad(setToNone) }

// ParamGroups returns the live parameter groups.
func (o *algorithmOptimizer) ParamGroups() []*ParamGroup { return o.b.ParamGroups() }

// StateDict returns PyTorch's optimizer state-dict layout.
func (o *algorithmOptimizer) StateDict() *checkpoint.Dict { return o.b.StateDict() }

// LoadStateDict loads PyTorch's optimizer state-dict layout.
func (o *algorithmOptimizer) LoadStateDict(sd *checkpoint.Dict) error { return o.b.LoadStateDict(sd) }

// Params returns every parameter, group by group.
func (o *algorithmOptimizer) Params() []*torch.Tensor { return o.b.Params() }

// Name returns the Algorithm's name, which the Trainer records as the optimizer's class.
func (o *algorithmOptimizer) Name() string { return o.a.Name }
