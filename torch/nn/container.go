package nn

import (
	"strconv"
	"sync"

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

// Forward feeds x through every stage in order. A run of consecutive built-in layers
// (Linear, Conv2d, BatchNorm1d/2d, the pools, the activations, Flatten, Dropout,
// Identity, and Sequentials of them) crosses into libtorch once, as a torch.Chain, with
// the result its layers' Forwards give one by one; any other module's Forward is called
// as it is.
func (s *Sequential) Forward(x *torch.Tensor) *torch.Tensor {
	buf := stageBufs.Get().(*[]torch.Stage)
	defer stageBufs.Put(buf)
	run := (*buf)[:0]
	for _, m := range s.mods {
		var ok bool
		if run, ok = appendStages(run, m); ok {
			continue
		}
		x = torch.Chain(x, run)
		clear(run) // the pool does not keep the layers' tensors alive
		run = run[:0]
		x = m.Forward(x)
	}
	x = torch.Chain(x, run)
	clear(run)
	*buf = run[:0]
	return x
}

// stageBufs are Forward's stage buffers: pooled so that a forward pass neither
// allocates one nor clears a large array on its stack.
var stageBufs = sync.Pool{New: func() any { b := make([]torch.Stage, 0, 16); return &b }}

// Stages returns m's forward as chain stages, as Sequential's Forward runs them, and
// true; or false when some part of m is not a built-in layer a stage covers (then m's
// Forward is the only way to run it). The stages read m's tensors when they run, but
// hold its layers' settings (training mode, Dropout's p) as they are now.
func Stages(m Module) ([]torch.Stage, bool) {
	st, ok := appendStages(nil, m)
	if !ok {
		return nil, false
	}
	return st, true
}

// appendStages appends m's forward as chain stages to dst, or returns dst unchanged and
// false when m's Forward is not one (a user's module, or a layer in a state its stage
// does not cover). It switches on concrete types, so a type that embeds a layer and
// overrides Forward is called as it is.
func appendStages(dst []torch.Stage, m Module) ([]torch.Stage, bool) {
	switch m := m.(type) {
	case *Linear:
		if m.Wrapper != nil {
			return dst, false
		}
		return append(dst, torch.LinearStage(m.Weight, m.Bias)), true
	case *Conv2d:
		return append(dst, torch.Conv2dStage(m.Weight, m.Bias, m.Options)), true
	case *MaxPool2d:
		return append(dst, torch.MaxPool2dStage(m.Options)), true
	case *AvgPool2d:
		return append(dst, torch.AvgPool2dStage(m.Options)), true
	case *AdaptiveAvgPool2d:
		return append(dst, torch.AdaptiveAvgPool2dStage(m.H, m.W)), true
	case *BatchNorm:
		training := m.Training()
		if training && m.NumBatchesTracked != nil && m.CumulativeAverage {
			return dst, false // its momentum is read back from the count
		}
		return append(dst, torch.BatchNormStage(torch.BatchNormStageOptions{
			RunningMean: m.RunningMean, RunningVar: m.RunningVar, Weight: m.Weight, Bias: m.Bias,
			Training: training, Momentum: m.Momentum, Eps: m.Eps, BatchesTracked: m.NumBatchesTracked,
			Ranks: m.inputDims, Name: m.name})), true
	case *Dropout:
		return append(dst, torch.DropoutStage(m.P, m.Training())), true
	case *Flatten:
		return append(dst, torch.FlattenStage(m.StartDim, m.EndDim)), true
	case *ReLU:
		return append(dst, torch.ReLUStage()), true
	case *LeakyReLU:
		return append(dst, torch.LeakyReLUStage(m.Slope)), true
	case *GELU:
		return append(dst, torch.GELUStage(m.Tanh)), true
	case *SiLU:
		return append(dst, torch.SiLUStage()), true
	case *Tanh:
		return append(dst, torch.TanhStage()), true
	case *Sigmoid:
		return append(dst, torch.SigmoidStage()), true
	case *Identity:
		return dst, true
	case *Sequential:
		n := len(dst)
		for _, c := range m.mods {
			var ok bool
			if dst, ok = appendStages(dst, c); !ok {
				return dst[:n], false
			}
		}
		return dst, true
	}
	return dst, false
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
