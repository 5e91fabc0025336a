package nn

import "github.com/gotrain/gotrain/torch"

// Linear is nn.Linear: y = x Wᵀ + b, with parameters "weight" [out, in] and "bias" [out].
type Linear struct {
	Base
	Weight, Bias *torch.Tensor // Bias is nil with NoBias
	// Wrapper, when set, is the layer that took this one's place in the module tree and
	// wraps it (a LoRA layer; see ReplaceModule): Forward runs the wrapper, so that a
	// model's own fields that point to this Linear reach it too. The wrapper computes
	// x Wᵀ + b itself, with torch.Linear.
	Wrapper Layer
}

// NewLinear returns nn.Linear(in, out) initialised as PyTorch does: weight and bias
// uniform in ±1/sqrt(in). It takes the option NoBias.
func NewLinear(in, out int64, opts ...Option) *Linear {
	o := parseOptions("Linear", []string{"NoBias"}, opts)
	l := &Linear{}
	l.Weight, l.Bias = resetParams(&l.Base, o.noBias, out, in)
	return l
}

// Forward returns x Wᵀ + b, or what Wrapper returns when it is set.
func (l *Linear) Forward(x *torch.Tensor) *torch.Tensor {
	if l.Wrapper != nil {
		return l.Wrapper.Forward(x)
	}
	return torch.Linear(x, l.Weight, l.Bias)
}

// Embedding is nn.Embedding: a lookup table "weight" [num, dim] indexed by int64 tensors.
type Embedding struct {
	Base
	Weight     *torch.Tensor
	PaddingIdx int64 // -1 for none
}

// NewEmbedding returns nn.Embedding(num, dim) with weights drawn from N(0, 1). It takes
// the option PaddingIdx.
func NewEmbedding(num, dim int64, opts ...Option) *Embedding {
	o := parseOptions("Embedding", []string{"PaddingIdx"}, opts)
	e := &Embedding{PaddingIdx: -1}
	e.Weight = e.RegisterParameter("weight", newParam(num, dim))
	InitNormal(e.Weight, 0, 1)
	if o.paddingIdxSet {
		p := o.paddingIdx
		if p < 0 {
			p += num
		}
		if p < 0 || p >= num {
			panic("nn: Embedding: padding index out of range")
		}
		e.PaddingIdx = p
		torch.WithScope(func() { torch.NoGrad(func() { e.Weight.Select(0, p).Zero() }) })
	}
	return e
}

// Forward looks up the rows of weight named by the indices in x.
func (e *Embedding) Forward(x *torch.Tensor) *torch.Tensor {
	return torch.Embedding(e.Weight, x, e.PaddingIdx)
}
