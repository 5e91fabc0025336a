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
// Update is called per parameter; UpdateGroup instead gets a group's parameters
// together, for ATen's multi-tensor and fused kernels (torch.FusedAdamW, torch.FusedSGD,
// torch.ForeachAddScalarInPlace): a fused optimizer is one Go file too, as the package's
// own are (fused.go, docs/extending.md). The package's own optimizers are
// optim.Steppers, whose hyperparameters a replayed training step reads at every step
// (the default forms are kernels in libtorch, torch.OptimizerStep; the fused forms read
// the learning rate from a tensor); an Algorithm's hyperparameters are Go values its ops
// receive, so the Trainer's one-call (replayed) step declines it rather than bake a
// scheduler's learning rate in.
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
	// UpdateGroup, set instead of Update, changes a group's parameters together: params
	// are those of g that have a gradient and share a device and dtype (one call for
	// each such set, in order of first appearance, as PyTorch's fused and foreach
	// optimizers group them), grads their gradients, and state[k][i] slot k of params[i],
	// nil before its first update; it may fill or replace state entries as Update may.
	UpdateGroup func(g *ParamGroup, params, grads []*torch.Tensor, state [][]*torch.Tensor)
}

// New returns an optimizer over groups that updates each parameter with a, at learning
// rate lr unless a group sets its own.
func New(a Algorithm, groups []Group, lr float64) (Optimizer, error) {
	if a.Name == "" || (a.Update == nil) == (a.UpdateGroup == nil) {
		return nil, fmt.Errorf("optim: New: an Algorithm needs a Name and one of Update and UpdateGroup")
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
	return &algorithmOptimizer{Optimizer: b, b: b, a: a}, nil
}

// algorithmOptimizer is an Algorithm's Optimizer. It embeds its base as an Optimizer
// (whose Step it replaces) rather than as a *base, so that it is not an optim.Stepper:
// its step is not one of libtorch's kernels.
type algorithmOptimizer struct {
	Optimizer
	b *base
	a Algorithm
}

// Step updates every parameter that has a gradient.
func (o *algorithmOptimizer) Step() (err error) {
	defer torch.Recover(&err, o.b.stepCtx)
	o.b.syncState()
	torch.WithScope(func() {
		torch.NoGrad(func() {
			i := 0
			for _, g := range o.b.groups {
				rows := o.b.state[i : i+len(g.Params)]
				i += len(g.Params)
				if o.a.UpdateGroup != nil {
					o.stepGroup(g, rows)
					continue
				}
				for j, p := range g.Params {
					if grad := p.Grad(); grad != nil {
						slots := rows[j][:len(o.a.Slots)]
						old := rows[j]
						o.a.Update(g, p, grad, slots)
						for k, t := range slots {
							keep(&rows[j][k], old[k], t)
						}
					}
				}
			}
		})
	})
	return nil
}

// stepGroup calls UpdateGroup for each device and dtype of g's parameters that have a
// gradient; rows are their state rows.
func (o *algorithmOptimizer) stepGroup(g *ParamGroup, rows [][torch.OptimizerStateSlots]*torch.Tensor) {
	for _, idx := range deviceSets(g.Params) {
		ps, grads := make([]*torch.Tensor, len(idx)), make([]*torch.Tensor, len(idx))
		state := make([][]*torch.Tensor, len(o.a.Slots))
		for s := range state {
			state[s] = make([]*torch.Tensor, len(idx))
		}
		for m, j := range idx {
			ps[m], grads[m] = g.Params[j], g.Params[j].Grad()
			for s := range state {
				state[s][m] = rows[j][s]
			}
		}
		o.a.UpdateGroup(g, ps, grads, state)
		for s := range state {
			for m, j := range idx {
				keep(&rows[j][s], rows[j][s], state[s][m])
			}
		}
	}
}

// keep makes t the state slot that held old: a new tensor escapes the step's scope and
// the one it replaces is freed.
func keep(slot **torch.Tensor, old, t *torch.Tensor) {
	if t == old {
		return
	}
	if t != nil {
		t.Escape()
	}
	old.Free()
	*slot = t
}

// Name returns the Algorithm's name, which the Trainer records as the optimizer's class.
func (o *algorithmOptimizer) Name() string { return o.a.Name }
