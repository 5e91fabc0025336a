package nn

import (
	"math"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
)

// LearnedPositionEmbedding is a learned table "weight" [maxLen, dim] of position
// vectors, as GPT-2's wpe (an nn.Embedding looked up with arange). Its Forward adds the
// first L rows to a batch-first input [N, L, dim].
type LearnedPositionEmbedding struct {
	Base
	Weight *torch.Tensor
}

// NewLearnedPositionEmbedding returns a table drawn from N(0, std²) (GPT-2 uses 0.02,
// nn.Embedding 1).
func NewLearnedPositionEmbedding(maxLen, dim int64, std float64) *LearnedPositionEmbedding {
	p := &LearnedPositionEmbedding{}
	p.Weight = p.RegisterParameter("weight", newParam(maxLen, dim))
	InitNormal(p.Weight, 0, std)
	return p
}

// Forward returns x + weight[:L] for x [N, L, dim].
func (p *LearnedPositionEmbedding) Forward(x *torch.Tensor) *torch.Tensor {
	return x.Add(p.At(0, x.Size(1)))
}

// At returns the vectors of positions start..start+n-1, [n, dim] (a view).
func (p *LearnedPositionEmbedding) At(start, n int64) *torch.Tensor {
	return p.Weight.Narrow(0, start, n)
}

// SinusoidalPositionEncoding is the fixed encoding of "Attention Is All You Need" (and of
// PyTorch's transformer tutorial): pe[pos, 2i] = sin(pos / 10000^(2i/dim)), pe[pos, 2i+1]
// the cosine, held in a non-persistent buffer "pe" [maxLen, dim], so it is not in the
// state dict. Forward adds it to a batch-first input [N, L, dim].
type SinusoidalPositionEncoding struct {
	Base
	PE *torch.Tensor
}

// NewSinusoidalPositionEncoding returns the encoding for up to maxLen positions of an
// even width dim.
func NewSinusoidalPositionEncoding(maxLen, dim int64) *SinusoidalPositionEncoding {
	if dim%2 != 0 {
		panic("nn: SinusoidalPositionEncoding: dim must be even")
	}
	s := &SinusoidalPositionEncoding{}
	var pe *torch.Tensor
	torch.WithScope(func() {
		pos := torch.Arange(0, float64(maxLen), 1, torch.Float32, torch.CPU).Unsqueeze(1)
		div := torch.Arange(0, float64(dim), 2, torch.Float32, torch.CPU).MulScalar(-math.Log(10000) / float64(dim)).Exp()
		angle := pos.Mul(div)
		// Interleave: [maxLen, dim/2, 2] with sin in slot 0 and cos in slot 1.
		pe = torch.Stack([]*torch.Tensor{angle.Sin(), angle.Cos()}, 2).Reshape(maxLen, dim)
		pe.Escape()
	})
	s.PE = s.RegisterNonPersistentBuffer("pe", pe)
	return s
}

// Forward returns x + pe[:L] for x [N, L, dim].
func (s *SinusoidalPositionEncoding) Forward(x *torch.Tensor) *torch.Tensor {
	return x.Add(s.PE.Narrow(0, 0, x.Size(1)).ToDType(x.DType()))
}

// CheckpointStateDict is StateDict(m) as checkpoint tensors, ready for checkpoint.Write,
// with every state-dict entry that is the same tensor (a tied weight such as GPT-2's
// lm_head.weight and transformer.wte.weight) converted once, so the file stores it once
// and torch.load gives back one shared tensor, as torch.save(model.state_dict()) does.
// The model's tensors must stay alive and unchanged until the write returns.
func CheckpointStateDict(m Module) (*checkpoint.Dict, error) {
	sd := checkpoint.NewOrderedDict()
	done := map[*torch.Tensor]*checkpoint.Tensor{}
	for _, e := range stateEntries(m) {
		ct, ok := done[e.Tensor]
		if !ok {
			var err error
			ct, err = torch.TensorToCheckpoint(e.Tensor)
			if err != nil {
				return nil, err
			}
			ct.RequiresGrad = false
			done[e.Tensor] = ct
		}
		sd.Set(e.Name, ct)
	}
	return sd, nil
}
