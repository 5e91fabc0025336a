package nn

import (
	"strconv"

	"github.com/gotrain/gotrain/torch"
)

// Sequential is nn.Sequential: modules applied in order, registered as "0", "1", ...
type Sequential struct {
	Base
	mods []Layer
}

// NewSequential returns nn.Sequential(mods...).
func NewSequential(mods ...Layer) *Sequential {
	s := &Sequential{}
	for _, m := range mods {
		s.Append(m)
	}
	return s
}

// Append adds m as the next stage, named by its index.
func (s *Sequential) Append(m Layer) {
	s.RegisterModule(strconv.Itoa(len(s.mods)), m)
	s.mods = append(s.mods, m)
}

// Len returns the number of stages.
func (s *Sequential) Len() int { return len(s.mods) }

// At returns stage i.
func (s *Sequential) At(i int) Layer { return s.mods[i] }

// Forward feeds x through every stage in order.
func (s *Sequential) Forward(x *torch.Tensor) *torch.Tensor {
	for _, m := range s.mods {
		x = m.Forward(x)
	}
	return x
}

// ModuleList is nn.ModuleList: modules registered as "0", "1", ..., for a parent's
// Forward to call as it likes. It has no forward pass of its own.
type ModuleList struct {
	Base
	mods []Module
}

// NewModuleList returns nn.ModuleList(mods).
func NewModuleList(mods ...Module) *ModuleList {
	l := &ModuleList{}
	for _, m := range mods {
		l.Append(m)
	}
	return l
}

// Append adds m, named by its index.
func (l *ModuleList) Append(m Module) {
	l.RegisterModule(strconv.Itoa(len(l.mods)), m)
	l.mods = append(l.mods, m)
}

// Len returns the number of modules.
func (l *ModuleList) Len() int { return len(l.mods) }

// At returns module i.
func (l *ModuleList) At(i int) Module { return l.mods[i] }

// Identity is nn.Identity: returns its input.
type Identity struct{ Base }

// NewIdentity returns nn.Identity().
func NewIdentity() *Identity { return &Identity{} }

// Forward returns x.
func (*Identity) Forward(x *torch.Tensor) *torch.Tensor { return x }

// Flatten is nn.Flatten(StartDim, EndDim).
type Flatten struct {
	Base
	StartDim, EndDim int64
}

// NewFlatten returns nn.Flatten(): dimensions 1 to the last flattened into one.
func NewFlatten() *Flatten { return &Flatten{StartDim: 1, EndDim: -1} }

// Forward flattens dimensions StartDim..EndDim of x.
func (f *Flatten) Forward(x *torch.Tensor) *torch.Tensor { return x.Flatten(f.StartDim, f.EndDim) }

// Dropout is nn.Dropout(P): in training mode it zeroes each element with probability P
// (drawn from torch's default generator) and scales the rest by 1/(1-P); in evaluation
// mode it returns its input.
type Dropout struct {
	Base
	P float64
}

// NewDropout returns nn.Dropout(p); PyTorch's default p is 0.5.
func NewDropout(p float64) *Dropout {
	if p < 0 || p > 1 {
		panic("nn: Dropout probability must be in [0, 1]")
	}
	return &Dropout{P: p}
}

// Forward applies dropout in training mode.
func (d *Dropout) Forward(x *torch.Tensor) *torch.Tensor {
	return torch.Dropout(x, d.P, d.Training())
}
