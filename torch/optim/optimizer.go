package optim

import (
	"fmt"
	"math/big"
	"slices"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
)

// Optimizer updates parameters from their gradients. SGD, Adam (and AdamW), RMSprop and
// Adagrad implement it.
type Optimizer interface {
	// Step updates every parameter that has a gradient, in one call into libtorch.
	Step() error
	// ZeroGrad zeroes the gradients, or drops them when setToNone is true
	// (optimizer.zero_grad(set_to_none)).
	ZeroGrad(setToNone bool)
	// ParamGroups returns the live parameter groups: changing a group's LR or Options
	// changes the next Step.
	ParamGroups() []*ParamGroup
	// StateDict returns PyTorch's optimizer.state_dict() layout. Its tensors are the
	// optimizer's own: write it out before the next Step.
	StateDict() *checkpoint.Dict
	// LoadStateDict loads a state dict in PyTorch's layout (from StateDict, or from
	// Python's optimizer.state_dict()).
	LoadStateDict(sd *checkpoint.Dict) error
	// Params returns every parameter, group by group.
	Params() []*torch.Tensor
}

// ParamGroup is one parameter group: its parameters, learning rate and the rest of
// PyTorch's group keys.
type ParamGroup struct {
	Params []*torch.Tensor
	// LR is the group's learning rate ("lr"), read by every Step.
	LR float64
	// InitialLR is "initial_lr", which the first LR scheduler sets from LR; it is in the
	// state dict only when HasInitialLR is true.
	InitialLR    float64
	HasInitialLR bool
	// Options holds the group's other keys in PyTorch's order and types ("momentum",
	// "betas" as a checkpoint.Tuple, "eps", "weight_decay", "foreach": nil, ..., plus
	// keys schedulers add such as "max_lr"). Setting a key here with Set (for example
	// "momentum") takes effect at the next Step; Step converts the options again only
	// after a Set or Delete (checkpoint.Dict.Version), so replace a Tuple rather than
	// change its elements.
	Options *checkpoint.Dict
}

// Float returns the numeric group option key (ints and bools convert), or def when the
// group has no such key.
func (g *ParamGroup) Float(key string, def float64) float64 {
	v, _ := g.Options.Lookup(key) // nil, not a number, when missing
	if f, ok := number(v); ok {
		return f
	}
	return def
}

// Group is a parameter group for the New*Groups constructors: its parameters and the
// options that differ from the optimizer's, by PyTorch key ("lr", "weight_decay",
// "momentum", "betas" as [2]float64 or a checkpoint.Tuple, ...).
type Group struct {
	Params  []*torch.Tensor
	Options map[string]any
}

// number converts a Python number read from a state dict (or a Go number) to float64.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int64:
		return float64(x), true
	case int:
		return float64(x), true
	case int32:
		return float64(x), true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case *big.Int:
		f, _ := new(big.Float).SetInt(x).Float64()
		return f, true
	}
	return 0, false
}

// Bool reports whether the group option key is set and non-zero (a missing key is false).
func (g *ParamGroup) Bool(key string) bool { return g.Float(key, 0) != 0 }

// Pair returns the two-number option key ("betas"), or def when the group has no such
// key or it is not two numbers.
func (g *ParamGroup) Pair(key string, def [2]float64) [2]float64 {
	v, _ := g.Options.Lookup(key) // nil, not a pair, when missing
	if p, ok := pairValue(v); ok {
		return p
	}
	return def
}

// pairValue reads a two-number tuple, reporting whether v is one.
func pairValue(v any) ([2]float64, bool) {
	var l []any
	switch x := v.(type) {
	case checkpoint.Tuple:
		l = x
	case []any:
		l = x
	case [2]float64:
		return x, true
	}
	if len(l) != 2 {
		return [2]float64{}, false
	}
	a, ok1 := number(l[0])
	b, ok2 := number(l[1])
	return [2]float64{a, b}, ok1 && ok2
}

// kind describes one optimizer algorithm for the shared implementation.
type kind struct {
	name  string
	slots []string // state names, in torch.OptimizerStep's slot order and PyTorch's key order
	// kernel is the libtorch step of a built-in optimizer, which reads the group keys
	// torch.OptimizerKeys names; fixed holds the values of those keys this optimizer
	// does not take from its groups (AdamW always decouples weight decay).
	kernel torch.OptimizerKernel
	fixed  map[string]float64
	// fused is the fused form's update (fused.go), which runs when the groups have
	// fused=True and in the capturable form; nil when the kind has none.
	fused fusedUpdate
	// check validates a group's options as PyTorch's constructor does.
	check func(g *ParamGroup) error
	// eager creates state before the first step (Adagrad), for params that have none.
	eager func(o *base, i int, p *torch.Tensor)
}

// base is the implementation the optimizers share: groups, per-parameter state and the
// one-call step.
type base struct {
	k        *kind
	groups   []*ParamGroup
	defaults *checkpoint.Dict // the group keys other than "lr", with this optimizer's values
	state    [][torch.OptimizerStateSlots]*torch.Tensor
	// Reused by every step, so that a step allocates nothing of its own in Go.
	stepCtx string
	ps      []*torch.Tensor
	sizes   []int64
	hyper   []float64     // the groups' kernel hyperparameters (torch.OptimizerKeys)
	from    []hyperSource // what each group's were read from
	// The fused form's (fused.go): each group's learning rate, set before each step; the
	// device learning rates of the capturable form (CaptureLR), nil outside it; and
	// fusedStep as the func a torch.OptimizerArgs holds.
	lrs     []*torch.HostScalar
	capture []*torch.Tensor
	stepFn  func() error
}

func newBase(k *kind, groups []Group, lr float64, defaults *checkpoint.Dict) (*base, error) {
	if len(groups) == 0 {
		return nil, fmt.Errorf("optim: %s: optimizer got an empty parameter list", k.name)
	}
	o := &base{k: k, defaults: defaults, stepCtx: "optim: " + k.name + " step"}
	for gi, gr := range groups {
		if len(gr.Params) == 0 {
			return nil, fmt.Errorf("optim: %s: parameter group %d is empty", k.name, gi)
		}
		g := &ParamGroup{Params: append([]*torch.Tensor(nil), gr.Params...), LR: lr, Options: copyDict(defaults)}
		for key, v := range gr.Options {
			switch key {
			case "lr":
				f, ok := number(v)
				if !ok {
					return nil, fmt.Errorf("optim: %s: group %d: lr is %T, want a number", k.name, gi, v)
				}
				g.LR = f
			case "params", "initial_lr":
				return nil, fmt.Errorf("optim: %s: group %d: option %q cannot be set", k.name, gi, key)
			default:
				if b, ok := v.([2]float64); ok {
					v = checkpoint.Tuple{b[0], b[1]}
				}
				g.Options.Set(key, v)
			}
		}
		if !(g.LR >= 0) {
			return nil, fmt.Errorf("optim: %s: group %d: invalid learning rate (lr): %v", k.name, gi, g.LR)
		}
		if err := k.check(g); err != nil {
			return nil, fmt.Errorf("optim: %s: group %d: %w", k.name, gi, err)
		}
		o.groups = append(o.groups, g)
	}
	seen := map[*torch.Tensor]bool{}
	for _, p := range o.Params() {
		if seen[p] {
			return nil, fmt.Errorf("optim: %s: some parameters appear in more than one parameter group", k.name)
		}
		seen[p] = true
	}
	o.syncState()
	if k.fused != nil {
		o.stepFn = o.fusedStep
		o.setLRs() // made here, not in a recorded step
	}
	return o, nil
}

func copyDict(d *checkpoint.Dict) *checkpoint.Dict {
	out := checkpoint.NewDict()
	for k, v := range d.All() {
		out.Set(k, v)
	}
	return out
}

// syncState sizes the state to the parameter count and creates eager state.
func (o *base) syncState() {
	ps := o.params()
	for len(o.state) < len(ps) {
		o.state = append(o.state, [torch.OptimizerStateSlots]*torch.Tensor{})
	}
	o.state = o.state[:len(ps)]
	if o.k.eager != nil {
		for i, p := range ps {
			o.k.eager(o, i, p)
		}
	}
}

// ParamGroups returns the live parameter groups.
func (o *base) ParamGroups() []*ParamGroup { return o.groups }

// Name returns PyTorch's class name of the optimizer ("AdamW"), which the Trainer
// records.
func (o *base) Name() string { return o.k.name }

// Params returns every parameter, group by group.
func (o *base) Params() []*torch.Tensor { return slices.Clone(o.params()) }

// params is Params in a buffer the optimizer reuses (valid until the next call).
func (o *base) params() []*torch.Tensor {
	o.ps = o.ps[:0]
	for _, g := range o.groups {
		o.ps = append(o.ps, g.Params...)
	}
	return o.ps
}

type hyperSource struct {
	opts    *checkpoint.Dict
	version uint64
	lr      float64
}

// hyperValues returns the groups' hyperparameters in the kernel's form. A group's are
// read again when its LR or its Options (Dict.Version) changed since the last step, and
// kept otherwise: a step neither reads the options by name nor allocates.
func (o *base) hyperValues() []float64 {
	const n = torch.OptimizerHyperLen
	if len(o.from) != len(o.groups) {
		o.hyper, o.from = make([]float64, n*len(o.groups)), make([]hyperSource, len(o.groups))
		for i := range o.from {
			o.from[i].version = ^uint64(0) // never a Dict's: the first step reads
		}
	}
	for i, g := range o.groups {
		src := hyperSource{opts: g.Options, version: g.Options.Version(), lr: g.LR}
		if o.from[i] != src {
			o.readHyper(g, o.hyper[i*n:(i+1)*n])
			o.from[i] = src
		}
	}
	return o.hyper
}

// readHyper writes group g's values of the kernel's keys (torch.OptimizerKeys) into h;
// a key the group lacks (deleted from its Options) has the optimizer's default.
func (o *base) readHyper(g *ParamGroup, h []float64) {
	clear(h)
	def := &ParamGroup{Options: o.defaults}
	i := 0
	for _, key := range torch.OptimizerKeys[o.k.kernel] {
		if v, ok := o.k.fixed[key]; ok {
			h[i] = v
		} else if key == "lr" {
			h[i] = g.LR
		} else if key == "betas" {
			b := g.Pair(key, def.Pair(key, [2]float64{}))
			h[i], h[i+1] = b[0], b[1]
			i++
		} else if _, ok := g.Options.Lookup(key); ok {
			h[i] = g.Float(key, 0) // None is 0
		} else {
			h[i] = def.Float(key, 0)
		}
		i++
	}
}

// Step updates every parameter that has a gradient, with the arithmetic of PyTorch's
// implementation: in one call into libtorch, or with fused=True in a fused kernel call
// per device and dtype of each group (fused.go).
func (o *base) Step() (err error) {
	defer torch.Recover(&err, o.stepCtx)
	if len(o.params()) == 0 {
		return nil
	}
	// The state tensors the step creates belong to the optimizer, not to any scope.
	a := o.StepArgs()
	return a.Step()
}

// StepArgs returns the arguments of the optimizer's next step without running it, for
// a torch.TrainStep that runs the step inside its own call into libtorch; a.Step() is
// Step. They hold the optimizer's own parameter list and state rows (the tensors a step
// creates become the optimizer's) and are valid until the optimizer's groups or state
// change: take them again for every step. With fused=True they are the fused step
// (torch.OptimizerFunc), and taking them writes each group's LR into the learning-rate
// tensor that step's kernels read, eagerly or replayed. It panics with a *torch.Error
// on misuse, as ops do.
func (o *base) StepArgs() torch.OptimizerArgs {
	o.syncState()
	if fused, err := o.fused(); err != nil {
		return torch.OptimizerFunc(func() error { return fmt.Errorf("%s: %w", o.stepCtx, err) })
	} else if fused {
		o.setLRs()
		return torch.OptimizerFunc(o.stepFn)
	}
	ps := o.params()
	o.sizes = o.sizes[:0]
	for _, g := range o.groups {
		o.sizes = append(o.sizes, int64(len(g.Params)))
	}
	return torch.NewOptimizerArgs(o.k.kernel, o.hyperValues(), o.sizes, ps, o.state)
}

// Stepper is implemented by optimizers whose step a torch.TrainStep can run (all of this
// package's): see StepArgs.
type Stepper interface {
	Optimizer
	StepArgs() torch.OptimizerArgs
}

// ZeroGrad zeroes every parameter's gradient in one call, or drops the gradients when
// setToNone is true (PyTorch's default, and cheaper). It panics with a *torch.Error
// if libtorch fails, as ops do.
func (o *base) ZeroGrad(setToNone bool) { torch.ZeroGrads(o.params(), setToNone) }

// Free releases the optimizer's state tensors now instead of leaving them to the
// garbage collector. The optimizer starts from empty state if used again.
func (o *base) Free() { freeState(o.state) }

// freeState frees the state tensors and clears their slots.
func freeState(state [][torch.OptimizerStateSlots]*torch.Tensor) {
	for i := range state {
		for k, t := range state[i] {
			t.Free()
			state[i][k] = nil
		}
	}
}

// State returns parameter i's state tensors by PyTorch name ("exp_avg", "step", ...);
// the tensors are the optimizer's own.
func (o *base) State(i int) map[string]*torch.Tensor {
	m := map[string]*torch.Tensor{}
	if i < 0 || i >= len(o.state) {
		return m
	}
	for k, name := range o.k.slots {
		if t := o.state[i][k]; t != nil {
			m[name] = t
		}
	}
	return m
}

// StateDict returns PyTorch's optimizer state dict: "state" maps each parameter's index
// (int64, counted across groups in order) to its state tensors, and "param_groups"
// lists each group's options with "params" holding its indices.
func (o *base) StateDict() *checkpoint.Dict {
	o.syncState()
	state := checkpoint.NewDict()
	for i, slots := range o.state {
		d := checkpoint.NewDict()
		for k, name := range o.k.slots {
			if slots[k] != nil {
				d.Set(name, slots[k])
			}
		}
		if d.Len() > 0 {
			state.Set(int64(i), d)
		}
	}
	groups := make([]any, len(o.groups))
	next := int64(0)
	for gi, g := range o.groups {
		d := dictOf("lr", g.LR)
		for k, v := range g.Options.All() {
			d.Set(k, v)
		}
		if g.HasInitialLR {
			d.Set("initial_lr", g.InitialLR)
		}
		ids := make([]any, len(g.Params))
		for i := range ids {
			ids[i] = next
			next++
		}
		d.Set("params", ids)
		groups[gi] = d
	}
	return dictOf("state", state, "param_groups", groups)
}

// LoadStateDict loads PyTorch's optimizer state dict layout, as Python's
// optimizer.load_state_dict does: the groups must match in number and size, parameters
// are matched by position, and state tensors are copied to their parameter's device and
// dtype ("step" keeps its own). Tensors may be *torch.Tensor or *checkpoint.Tensor.
func (o *base) LoadStateDict(sd *checkpoint.Dict) (err error) {
	defer torch.Recover(&err, "optim: "+o.k.name+": load_state_dict")
	if sd == nil {
		return fmt.Errorf("nil state dict")
	}
	groups, err := checkpoint.GetList(sd, "param_groups")
	if err != nil {
		return err
	}
	stateD, err := checkpoint.GetDict(sd, "state")
	if err != nil {
		return err
	}
	if len(groups) != len(o.groups) {
		return fmt.Errorf("loaded state dict has a different number of parameter groups (%d, want %d)", len(groups), len(o.groups))
	}
	ids := map[int64]int{}
	newGroups := make([]*ParamGroup, len(groups))
	flat := 0
	for gi, gv := range groups {
		gd, ok := gv.(*checkpoint.Dict)
		if !ok {
			return fmt.Errorf("param_groups[%d] is %T, want a dict", gi, gv)
		}
		pl, err := checkpoint.GetList(gd, "params")
		if err != nil {
			return err
		}
		cur := o.groups[gi]
		if len(pl) != len(cur.Params) {
			return fmt.Errorf("loaded state dict contains a parameter group that doesn't match the size of optimizer's group (group %d: %d parameters, want %d)", gi, len(pl), len(cur.Params))
		}
		for _, idv := range pl {
			id, ok := idv.(int64)
			if !ok {
				return fmt.Errorf("param_groups[%d] params holds %T, want int", gi, idv)
			}
			ids[id] = flat
			flat++
		}
		ng := &ParamGroup{Params: cur.Params, Options: copyDict(o.defaults)}
		for k, v := range gd.All() {
			key, _ := k.(string)
			switch key {
			case "params", "param_names":
			case "lr", "initial_lr":
				f, ok := number(v)
				if !ok {
					return fmt.Errorf("param_groups[%d] %s is %T, want a number", gi, key, v)
				}
				if key == "lr" {
					ng.LR = f
				} else {
					ng.InitialLR, ng.HasInitialLR = f, true
				}
			default:
				ng.Options.Set(k, v)
			}
		}
		newGroups[gi] = ng
	}
	ps := o.Params()
	newState := make([][torch.OptimizerStateSlots]*torch.Tensor, len(ps))
	for kv, v := range stateD.All() {
		id, ok := kv.(int64)
		if !ok {
			freeState(newState)
			return fmt.Errorf("state key %v is %T, want int", kv, kv)
		}
		i, ok := ids[id]
		if !ok {
			continue // Python keeps state for unknown ids; nothing here can use it.
		}
		d, ok := v.(*checkpoint.Dict)
		if !ok {
			freeState(newState)
			return fmt.Errorf("state[%d] is %T, want a dict", id, v)
		}
		for k, name := range o.k.slots {
			sv, ok := d.Get(name)
			if !ok {
				continue
			}
			t, err := o.loadTensor(sv, ps[i], name == "step")
			if err != nil {
				freeState(newState)
				return fmt.Errorf("state[%d][%s]: %w", id, name, err)
			}
			newState[i][k] = t
		}
	}
	o.Free()
	o.groups = newGroups
	o.state = newState
	for gi, g := range o.groups {
		if err := o.k.check(g); err != nil {
			return fmt.Errorf("param_groups[%d]: %w", gi, err)
		}
	}
	o.syncState()
	return nil
}

// loadTensor copies a loaded state value into a new tensor the optimizer owns.
func (o *base) loadTensor(v any, p *torch.Tensor, isStep bool) (*torch.Tensor, error) {
	var src *torch.Tensor
	switch x := v.(type) {
	case *torch.Tensor:
		src = x
	case *checkpoint.Tensor:
		t, err := torch.TensorFromCheckpoint(x, torch.CPU)
		if err != nil {
			return nil, err
		}
		defer t.Free()
		src = t
	default:
		f, ok := number(v)
		if !ok || !isStep {
			return nil, fmt.Errorf("got %T, want a tensor", v)
		}
		// Old checkpoints store step as a number; PyTorch upgrades it to a tensor.
		return torch.Full(nil, f, torch.Float32, torch.CPU).Escape(), nil
	}
	dt, dev := p.DType(), p.Device()
	if isStep {
		dt, dev = src.DType(), src.Device()
	} else if !dt.IsFloatingPoint() {
		dt = src.DType()
	}
	t := torch.Empty(src.Shape(), dt, dev).Escape()
	t.CopyFrom(src, false)
	return t, nil
}
