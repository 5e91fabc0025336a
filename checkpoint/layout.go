package checkpoint

import "fmt"

// A Layout maps a model's state tensors to the tensors its weights files hold: for the
// state tensor s, the parts a file holds in its place, in order, each a contiguous run
// of s's bytes (nil: s itself, under its own name). The Hub's files hold a mixture of
// experts' fused expert weights one expert and projection at a time, for instance. A
// nil Layout holds every state tensor as it is.
type Layout func(s TensorSpec) []Part

// A Part is one tensor of a weights file cut from a state tensor: its spec, and where
// its data starts in the state tensor's (C-contiguous) data, in bytes.
type Part struct {
	TensorSpec
	Offset int64
}

// Specs returns the weights files' tensors of the state tensors specs, in order.
func (l Layout) Specs(specs []TensorSpec) []TensorSpec {
	if l == nil {
		return specs
	}
	var out []TensorSpec
	for _, s := range specs {
		parts := l(s)
		if parts == nil {
			out = append(out, s)
		}
		for _, p := range parts {
			out = append(out, p.TensorSpec)
		}
	}
	return out
}

// Split calls fn with each tensor a weights file holds of the state tensor t named name
// (t itself when l is nil or keeps it), in order.
func (l Layout) Split(name string, t *Tensor, fn func(name string, t *Tensor) error) error {
	var parts []Part
	if l != nil {
		parts = l(TensorSpec{Name: name, DType: t.DType, Shape: t.Shape})
	}
	if parts == nil {
		return fn(name, t)
	}
	raw, err := t.ReadBytes()
	if err != nil {
		return fmt.Errorf("checkpoint: %s: %w", name, err)
	}
	for _, p := range parts {
		end := p.Offset + p.bytes()
		if p.Offset < 0 || end > int64(len(raw)) {
			return fmt.Errorf("checkpoint: %s: part %s takes bytes [%d, %d) of %d", name, p.Name, p.Offset, end, len(raw))
		}
		if err := fn(p.Name, NewTensor(p.DType, p.Shape, raw[p.Offset:end])); err != nil {
			return err
		}
	}
	return nil
}

// Apply returns the tensors of d (a state dict of checkpoint tensors, in order) as the
// weights files hold them.
func (l Layout) Apply(d *Dict) (*Dict, error) {
	out := NewDict()
	for k, v := range d.All() {
		name, _ := k.(string)
		t, ok := v.(*Tensor)
		if !ok {
			out.Set(k, v)
			continue
		}
		if err := l.Split(name, t, func(name string, t *Tensor) error {
			out.Set(name, t)
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return out, nil
}
