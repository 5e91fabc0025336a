package serve

import (
	"fmt"
	"slices"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/lora"
	"github.com/gotrain/gotrain/torch/nn/models"
)

// rowGroup is a run of a batch's rows that use one adapter (-1: the base model).
type rowGroup struct {
	adapter int
	n       int64
}

// router tells the adapted layers which rows of the forward being run use which
// adapter; the engine sets it before each forward (rows sorted by adapter).
type router struct{ groups []rowGroup }

// multiLinear takes an adapted nn.Linear's place and adds, to each row, the LoRA
// update of that row's adapter: base(x) + (x Aᵀ Bᵀ)·scaling, as PEFT's lora.Linear
// computes it, for the rows of each adapter (nothing for the base's rows, and nothing
// at all when no row uses an adapter of this layer).
type multiLinear struct {
	nn.Base
	base   *nn.Linear
	deltas map[int]*lora.Linear
	r      *router
}

func (l *multiLinear) Forward(x *torch.Tensor) *torch.Tensor {
	out := torch.Linear(x, l.base.Weight, l.base.Bias)
	if !slices.ContainsFunc(l.r.groups, func(g rowGroup) bool { return l.deltas[g.adapter] != nil }) {
		return out
	}
	parts := make([]*torch.Tensor, 0, len(l.r.groups))
	var at int64
	for _, g := range l.r.groups {
		xs := x.Narrow(0, at, g.n)
		at += g.n
		a := l.deltas[g.adapter]
		if a == nil {
			shape := out.Shape()
			shape[0] = g.n
			parts = append(parts, torch.Zeros(shape, out.DType(), out.Device()))
			continue
		}
		if xs.DType() != a.A.Weight.DType() {
			xs = xs.ToDType(a.A.Weight.DType())
		}
		d := torch.Linear(torch.Linear(xs, a.A.Weight, nil), a.B.Weight, nil).MulScalar(a.Scaling)
		if d.DType() != out.DType() {
			d = d.ToDType(out.DType())
		}
		parts = append(parts, d)
	}
	return out.Add(torch.Cat(parts, 0))
}

// loadAdapters reads each adapter directory (PEFT's files) onto m and puts a
// multiLinear in the place of every layer one of them adapts, so that one forward
// serves rows of different adapters; it returns the adapters, in the order of dirs.
func loadAdapters(m models.CausalLM, dirs []string, r *router) ([]*lora.Adapter, error) {
	var out []*lora.Adapter
	type site struct {
		base   *nn.Linear
		deltas map[int]*lora.Linear
	}
	sites := map[string]*site{}
	var order []string
	for i, dir := range dirs {
		a, err := lora.Load(m, dir, lora.LoadOptions{})
		if err != nil {
			for _, a := range out {
				freeAdapter(a)
			}
			return nil, err
		}
		// The base layers go back in their place, the adapter's A and B kept, so that
		// the next adapter loads onto the plain model.
		for _, l := range a.Layers() {
			if _, err := nn.ReplaceModule(m, l.Path, l.BaseLayer); err != nil {
				return nil, fmt.Errorf("serve: adapter %s: %w", dir, err)
			}
			l.BaseLayer.Wrapper = nil
			s := sites[l.Path]
			if s == nil {
				s = &site{base: l.BaseLayer, deltas: map[int]*lora.Linear{}}
				sites[l.Path] = s
				order = append(order, l.Path)
			}
			s.deltas[i] = l
		}
		out = append(out, a)
	}
	for _, path := range order {
		s := sites[path]
		ml := &multiLinear{base: s.base, deltas: s.deltas, r: r}
		nn.Register(&ml.Base, "base_layer", s.base)
		if _, err := nn.ReplaceModule(m, path, ml); err != nil {
			return nil, fmt.Errorf("serve: %w", err)
		}
		s.base.Wrapper = ml
	}
	return out, nil
}

// freeAdapter frees an adapter's A and B weights (its layers are out of the model).
func freeAdapter(a *lora.Adapter) {
	for _, l := range a.Layers() {
		nn.Free(l.A)
		nn.Free(l.B)
	}
}
