package nn

import (
	"fmt"
	"math"

	"github.com/gotrain/gotrain/torch"
)

// MultiheadAttentionConfig holds nn.MultiheadAttention's keyword arguments. The zero
// value is PyTorch's default (dropout 0, bias, sequence-first [L, N, E] inputs).
type MultiheadAttentionConfig struct {
	Dropout    float64 // dropout on the attention weights, in training mode
	NoBias     bool    // bias=False: no in_proj_bias and no out_proj.bias
	BatchFirst bool    // inputs and outputs are [N, L, E] instead of [L, N, E]
}

// MultiheadAttention is nn.MultiheadAttention with equal query, key and value widths:
// parameters "in_proj_weight" [3E, E] and "in_proj_bias" [3E] (the query, key and value
// projections stacked in that order) and the output projection "out_proj.weight" and
// "out_proj.bias". The attention runs through torch.ScaledDotProductAttention unless the
// weights are asked for.
type MultiheadAttention struct {
	Base
	EmbedDim, NumHeads int64
	Dropout            float64
	BatchFirst         bool
	InProjWeight       *torch.Tensor
	InProjBias         *torch.Tensor // nil with NoBias
	OutProj            *Linear
}

// NewMultiheadAttention returns nn.MultiheadAttention(embedDim, numHeads, ...) initialised
// as PyTorch does: in_proj_weight Xavier-uniform, biases zero, out_proj.weight as a
// Linear's. embedDim must be divisible by numHeads.
func NewMultiheadAttention(embedDim, numHeads int64, c MultiheadAttentionConfig) *MultiheadAttention {
	if numHeads <= 0 || embedDim%numHeads != 0 {
		panic(fmt.Sprintf("nn: MultiheadAttention: embed_dim %d must be divisible by num_heads %d", embedDim, numHeads))
	}
	m := &MultiheadAttention{EmbedDim: embedDim, NumHeads: numHeads, Dropout: c.Dropout, BatchFirst: c.BatchFirst}
	m.InProjWeight = m.RegisterParameter("in_proj_weight", newParam(3*embedDim, embedDim))
	if !c.NoBias {
		m.InProjBias = m.RegisterParameter("in_proj_bias", newParam(3*embedDim))
	}
	m.OutProj = Register(&m.Base, "out_proj", NewLinear(embedDim, embedDim, noBiasIf(c.NoBias)...))
	InitXavierUniform(m.InProjWeight, 1)
	if m.InProjBias != nil {
		InitConstant(m.InProjBias, 0)
		InitConstant(m.OutProj.Bias, 0)
	}
	return m
}

// InitXavierUniform fills t from U(-a, a) with a = gain·sqrt(6/(fan_in+fan_out)), as
// nn.init.xavier_uniform_.
func InitXavierUniform(t *torch.Tensor, gain float64) {
	in, out := Fans(t)
	a := gain * math.Sqrt(6/float64(in+out))
	InitUniform(t, -a, a)
}

// AttentionMasks are the optional arguments of an attention call, with PyTorch's
// meanings.
type AttentionMasks struct {
	// KeyPaddingMask [N, S] marks keys to ignore: bool true ignores the key, a float mask
	// is added to the scores (key_padding_mask).
	KeyPaddingMask *torch.Tensor
	// AttnMask [L, S] or [N·H, L, S]: bool true forbids attending, a float mask is added to
	// the scores (attn_mask).
	AttnMask *torch.Tensor
	// Causal, when AttnMask is nil, forbids each query position to attend to later key
	// positions (PyTorch's is_causal with the mask it implies).
	Causal bool
}

// Forward is self-attention of x without masks: m.Attend(x, x, x, AttentionMasks{}).
func (m *MultiheadAttention) Forward(x *torch.Tensor) *torch.Tensor {
	return m.Attend(x, x, x, AttentionMasks{})
}

// Attend returns the attention output for query [L, N, E] (or [N, L, E] with BatchFirst)
// and key and value [S, N, E], as m(query, key, value, need_weights=False, ...)[0].
func (m *MultiheadAttention) Attend(query, key, value *torch.Tensor, masks AttentionMasks) *torch.Tensor {
	out, _ := m.attend(query, key, value, masks, false)
	return out
}

// AttendWithWeights is Attend that also returns the attention weights averaged over the
// heads, [N, L, S] (need_weights=True, average_attn_weights=True).
func (m *MultiheadAttention) AttendWithWeights(query, key, value *torch.Tensor, masks AttentionMasks) (out, weights *torch.Tensor) {
	return m.attend(query, key, value, masks, true)
}

// additiveMask turns a bool mask (true: leave out) into a float one of dtype dt with -inf
// where it is true; a float mask is returned as it is.
func additiveMask(mask *torch.Tensor, dt torch.DType) *torch.Tensor {
	if mask.DType() != torch.Bool {
		return mask
	}
	return torch.Zeros(mask.Shape(), dt, mask.Device()).MaskedFill(mask, math.Inf(-1))
}

// CausalMask returns the float [l, s] mask with -inf above the diagonal and 0 elsewhere,
// as nn.Transformer.generate_square_subsequent_mask for l = s.
func CausalMask(l, s int64, dev torch.Device) *torch.Tensor {
	return torch.Full([]int64{l, s}, math.Inf(-1), torch.Float32, dev).Triu(1)
}

// scoreMask merges the masks into one float mask broadcastable to [N, H, L, S], or nil.
func (m *MultiheadAttention) scoreMask(masks AttentionMasks, n, l, s int64, dt torch.DType, dev torch.Device) *torch.Tensor {
	var mask *torch.Tensor
	switch {
	case masks.AttnMask != nil:
		a := additiveMask(masks.AttnMask, dt)
		switch a.Dim() {
		case 2:
			mask = a.View(1, 1, l, s)
		case 3:
			mask = a.View(n, m.NumHeads, l, s)
		default:
			panic(&torch.Error{Op: "multi_head_attention_forward", Msg: fmt.Sprintf("attn_mask must be 2-D or 3-D, got %d-D", a.Dim())})
		}
	case masks.Causal:
		mask = CausalMask(l, s, dev).ToDType(dt).View(1, 1, l, s)
	}
	if masks.KeyPaddingMask != nil {
		kp := additiveMask(masks.KeyPaddingMask, dt).View(n, 1, 1, s)
		if mask == nil {
			return kp
		}
		mask = mask.Add(kp)
	}
	return mask
}

func (m *MultiheadAttention) attend(query, key, value *torch.Tensor, masks AttentionMasks, needWeights bool) (*torch.Tensor, *torch.Tensor) {
	self := query == key && key == value
	if !m.BatchFirst {
		query, key, value = query.Transpose(0, 1), key.Transpose(0, 1), value.Transpose(0, 1)
	}
	n, l, e := query.Size(0), query.Size(1), query.Size(2)
	s := key.Size(1)
	h, d := m.NumHeads, m.EmbedDim/m.NumHeads
	var q, k, v *torch.Tensor
	if self {
		qkv := torch.Linear(query, m.InProjWeight, m.InProjBias).Chunk(3, -1)
		q, k, v = qkv[0], qkv[1], qkv[2]
	} else {
		w := m.InProjWeight.Chunk(3, 0)
		b := []*torch.Tensor{nil, nil, nil}
		if m.InProjBias != nil {
			b = m.InProjBias.Chunk(3, 0)
		}
		q, k, v = torch.Linear(query, w[0], b[0]), torch.Linear(key, w[1], b[1]), torch.Linear(value, w[2], b[2])
	}
	heads := func(x *torch.Tensor, seq int64) *torch.Tensor { return x.Reshape(n, seq, h, d).Transpose(1, 2) }
	q, k, v = heads(q, l), heads(k, s), heads(v, s)
	mask := m.scoreMask(masks, n, l, s, q.DType(), q.Device())
	dropout := 0.0
	if m.Training() {
		dropout = m.Dropout
	}
	var out, weights *torch.Tensor
	if needWeights {
		scores := q.MulScalar(1 / math.Sqrt(float64(d))).Matmul(k.Transpose(-2, -1))
		if mask != nil {
			scores = scores.Add(mask)
		}
		weights = scores.Softmax(-1)
		out = torch.Dropout(weights, dropout, dropout > 0).Matmul(v)
		weights = weights.MeanDims([]int64{1}, false)
	} else {
		out = torch.ScaledDotProductAttention(q, k, v, mask, dropout, false, 0)
	}
	out = m.OutProj.Forward(out.Transpose(1, 2).Reshape(n, l, e))
	if !m.BatchFirst {
		out = out.Transpose(0, 1)
	}
	return out, weights
}
