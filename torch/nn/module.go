package nn

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gotrain/gotrain/torch"
)

// Module is what every layer and model has, whatever its forward pass: the Base that
// holds its registered parameters, buffers and submodules and its training flag (tch-rs
// keeps the same in a VarStore, apart from its Module trait). Embedding Base provides
// the ModuleBase method. (The method cannot be called Base: the embedded field of that
// name would hide it.)
//
// The forward pass is not part of Module: a model defines the forward its task needs —
// a two-input model takes both inputs, a decoder takes ids, a mask, positions and a
// cache (models.CausalLM) — and the step that trains it calls that method on the
// model's own type (trainer.WithTrainStep is generic over it). Layer is the one-input
// forward that Sequential composes and the default steps call.
type Module interface {
	ModuleBase() *Base
}

// Layer is a Module with a one-tensor forward pass: the layers of torch/nn, Sequential
// itself, and any model whose forward maps one input to one output (an image
// classifier). Sequential composes Layers, and the Trainer's default steps
// (trainer.LossStep, trainer.ClassificationStep) call Forward on the batch's input.
type Layer interface {
	Module
	Forward(x *torch.Tensor) *torch.Tensor
}

// NamedTensor is a parameter or buffer with its dotted PyTorch name ("layer1.0.bn1.weight").
type NamedTensor struct {
	Name   string
	Tensor *torch.Tensor
}

type namedModule struct {
	name string
	m    Module
}

// Base holds what a module registered, in registration order, and its training flag.
// The zero value is an empty module in training mode, as PyTorch modules start.
type Base struct {
	params   []NamedTensor
	buffers  []NamedTensor
	children []namedModule
	// nonPersistent names the buffers left out of the state dict.
	nonPersistent map[string]bool
	eval          bool
}

// ModuleBase returns b itself; embedding Base gives a struct this method of Module.
func (b *Base) ModuleBase() *Base { return b }

// Training reports whether the module is in training mode.
func (b *Base) Training() bool { return !b.eval }

func (b *Base) checkName(kind, name string) {
	if name == "" || strings.Contains(name, ".") {
		panic(fmt.Sprintf("nn: %s name %q must be non-empty and contain no \".\"", kind, name))
	}
	switch {
	case lookup(b.params, name) != nil:
		panic(fmt.Sprintf("nn: %s %q: a parameter of that name exists", kind, name))
	case lookup(b.buffers, name) != nil:
		panic(fmt.Sprintf("nn: %s %q: a buffer of that name exists", kind, name))
	case slices.ContainsFunc(b.children, func(c namedModule) bool { return c.name == name }):
		panic(fmt.Sprintf("nn: %s %q: a submodule of that name exists", kind, name))
	}
}

// RegisterParameter makes t a parameter named name: the module owns it from now on (it
// is taken out of its scope) and it records gradients. It returns t.
func (b *Base) RegisterParameter(name string, t *torch.Tensor) *torch.Tensor {
	b.checkName("parameter", name)
	t.Escape()
	if !t.RequiresGrad() {
		t.SetRequiresGrad(true)
	}
	b.params = append(b.params, NamedTensor{name, t})
	return t
}

// RegisterBuffer makes t a buffer named name (state that is saved but not trained, such
// as BatchNorm's running_mean). The module owns it. It returns t.
func (b *Base) RegisterBuffer(name string, t *torch.Tensor) *torch.Tensor {
	b.checkName("buffer", name)
	t.Escape()
	b.buffers = append(b.buffers, NamedTensor{name, t})
	return t
}

// RegisterNonPersistentBuffer is RegisterBuffer for a buffer that StateDict leaves out
// (persistent=False in PyTorch).
func (b *Base) RegisterNonPersistentBuffer(name string, t *torch.Tensor) *torch.Tensor {
	b.RegisterBuffer(name, t)
	if b.nonPersistent == nil {
		b.nonPersistent = map[string]bool{}
	}
	b.nonPersistent[name] = true
	return t
}

// RegisterModule makes m a submodule named name; its parameters' names get the prefix
// "name.". It returns m.
func (b *Base) RegisterModule(name string, m Module) Module {
	b.checkName("submodule", name)
	b.children = append(b.children, namedModule{name, m})
	return m
}

// Register is b.RegisterModule(name, m) returning m with its own type:
//
//	n.fc = nn.Register(&n.Base, "fc", nn.NewLinear(512, 10))
func Register[M Module](b *Base, name string, m M) M {
	b.RegisterModule(name, m)
	return m
}

// Parameter returns the module's own parameter called name, or nil.
func (b *Base) Parameter(name string) *torch.Tensor { return lookup(b.params, name) }

// Buffer returns the module's own buffer called name, or nil.
func (b *Base) Buffer(name string) *torch.Tensor { return lookup(b.buffers, name) }

// lookup returns the tensor called name in ts, or nil.
func lookup(ts []NamedTensor, name string) *torch.Tensor {
	for _, p := range ts {
		if p.Name == name {
			return p.Tensor
		}
	}
	return nil
}

// Child returns the submodule called name, or nil.
func (b *Base) Child(name string) Module {
	for _, c := range b.children {
		if c.name == name {
			return c.m
		}
	}
	return nil
}

// walk visits m and its submodules pre-order, with each module's name prefix ("" or
// "layer1.0.").
func walk(m Module, prefix string, f func(prefix string, m Module)) {
	f(prefix, m)
	for _, c := range m.ModuleBase().children {
		walk(c.m, prefix+c.name+".", f)
	}
}

// NamedParameters returns every parameter of m and its submodules with dotted PyTorch
// names, in PyTorch's order (registration order, each module before its children). A
// tensor registered twice (shared weights) is listed once, under its first name.
func NamedParameters(m Module) []NamedTensor {
	return named(m, func(b *Base) []NamedTensor { return b.params })
}

// named returns the tensors of m and its submodules that of picks, with dotted names,
// each tensor once, under its first name.
func named(m Module, of func(*Base) []NamedTensor) []NamedTensor {
	var out []NamedTensor
	seen := map[*torch.Tensor]bool{}
	walk(m, "", func(prefix string, m Module) {
		for _, p := range of(m.ModuleBase()) {
			if !seen[p.Tensor] {
				seen[p.Tensor] = true
				out = append(out, NamedTensor{prefix + p.Name, p.Tensor})
			}
		}
	})
	return out
}

// Parameters returns the tensors of NamedParameters, the list an optimizer takes.
func Parameters(m Module) []*torch.Tensor {
	np := NamedParameters(m)
	out := make([]*torch.Tensor, len(np))
	for i, p := range np {
		out[i] = p.Tensor
	}
	return out
}

// NamedBuffers returns every buffer of m and its submodules with dotted names, in
// PyTorch's order.
func NamedBuffers(m Module) []NamedTensor {
	return named(m, func(b *Base) []NamedTensor { return b.buffers })
}

// NamedModules returns m and its submodules pre-order, with dotted names ("" for m).
func NamedModules(m Module) []NamedModule {
	var out []NamedModule
	walk(m, "", func(prefix string, m Module) {
		out = append(out, NamedModule{strings.TrimSuffix(prefix, "."), m})
	})
	return out
}

// NamedModule is a module with its dotted path inside the root ("" for the root).
type NamedModule struct {
	Name   string
	Module Module
}

// NumParameters returns the number of scalar parameters (PyTorch's
// sum(p.numel() for p in model.parameters())).
func NumParameters(m Module) int64 {
	var n int64
	for _, p := range NamedParameters(m) {
		n += p.Tensor.Numel()
	}
	return n
}

// SetTraining switches m and all its submodules to training (on) or evaluation mode,
// as model.train(on) / model.eval(). It affects Dropout and BatchNorm.
func SetTraining(m Module, on bool) {
	walk(m, "", func(_ string, m Module) { m.ModuleBase().eval = !on })
}

// ZeroGrad clears the gradients of m's parameters (zero_grad(set_to_none=True)).
func ZeroGrad(m Module) {
	for _, p := range NamedParameters(m) {
		p.Tensor.SetGrad(nil)
	}
}

// ToDevice moves m's parameters and buffers to dev in place, as model.to(dev): each
// *torch.Tensor keeps its identity (`param.data = param.data.to(dev)`), so references
// held elsewhere follow the move. Gradients are dropped. Move the model before building
// its optimizer: optimizer state already created on the old device does not move.
func ToDevice(m Module, dev torch.Device) {
	convertInPlace(m, func(t *torch.Tensor) bool { return t.Device() != dev },
		func(t *torch.Tensor) *torch.Tensor { return t.To(dev, false) })
}

// convertInPlace replaces the data of each parameter and buffer t of m for which need(t)
// holds by to(t), in place, dropping t's gradient.
func convertInPlace(m Module, need func(*torch.Tensor) bool, to func(*torch.Tensor) *torch.Tensor) {
	all := ownTensors(m)
	torch.WithScope(func() {
		torch.NoGrad(func() {
			for _, t := range all {
				if !need(t) {
					continue
				}
				if t.RequiresGrad() {
					t.SetGrad(nil)
				}
				t.SetData(to(t))
			}
		})
	})
}

// ownTensors lists the parameters and buffers of m and its submodules, as registered
// (a tied tensor once per name).
func ownTensors(m Module) []*torch.Tensor {
	var all []*torch.Tensor
	walk(m, "", func(_ string, m Module) {
		b := m.ModuleBase()
		for _, p := range slices.Concat(b.params, b.buffers) {
			all = append(all, p.Tensor)
		}
	})
	return all
}

// ToDType converts m's floating-point parameters and buffers to dt in place, as
// model.to(dtype): each *torch.Tensor keeps its identity, gradients are dropped, and
// integer buffers (num_batches_tracked) stay as they are. Convert before building the
// optimizer.
func ToDType(m Module, dt torch.DType) {
	// A tied tensor listed twice is converted once: the second time it has dtype dt,
	// or, for an integer dt, is no longer floating-point.
	convertInPlace(m, func(t *torch.Tensor) bool { return t.DType().IsFloatingPoint() && t.DType() != dt },
		func(t *torch.Tensor) *torch.Tensor { return t.ToDType(dt) })
}

// freer is implemented by modules that hold resources beyond their tensors.
type freer interface{ free() }

// Free releases m's parameters and buffers (and those of its submodules) now. Using the
// module afterwards panics.
func Free(m Module) {
	walk(m, "", func(_ string, m Module) {
		b := m.ModuleBase()
		for _, p := range slices.Concat(b.params, b.buffers) {
			p.Tensor.Free()
		}
		if f, ok := m.(freer); ok {
			f.free()
		}
	})
}
