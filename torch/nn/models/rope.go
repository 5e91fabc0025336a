package models

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// The rotary-embedding types RotaryEmbedding implements, by transformers' rope_type names.
const (
	RopeDefault = "default"
	RopeLinear  = "linear"
	RopeDynamic = "dynamic"
	RopeLlama3  = "llama3"
)

// defaultRopeTheta is transformers' default_theta, used when a config names none.
const defaultRopeTheta = 10000.0

// RopeParameters is transformers' rope_parameters (config.json's v5 form): the rotary
// embedding's type, base and scaling. Reading accepts the v4 spellings too ("type" for
// "rope_type"); the v4 top-level rope_theta and rope_scaling are folded in by the
// config parsers (ParseLlamaConfig and the others).
type RopeParameters struct {
	// RopeType is one of RopeDefault, RopeLinear, RopeDynamic, RopeLlama3.
	RopeType string `json:"rope_type"`
	// RopeTheta is the base of the wavelengths (10000, Llama 3's 500000).
	RopeTheta float64 `json:"rope_theta"`
	// Factor scales the context: positions are divided by it (linear), the base grows
	// with it past the original context (dynamic), or low frequencies are divided by it
	// (llama3).
	Factor float64 `json:"factor,omitempty"`
	// LowFreqFactor and HighFreqFactor bound llama3's smoothing band: wavelengths above
	// original/low are scaled, below original/high kept, and blended in between.
	LowFreqFactor  float64 `json:"low_freq_factor,omitempty"`
	HighFreqFactor float64 `json:"high_freq_factor,omitempty"`
	// OriginalMaxPositionEmbeddings is the pretraining context llama3 scaling refers to
	// (max_position_embeddings when absent).
	OriginalMaxPositionEmbeddings int64 `json:"original_max_position_embeddings,omitempty"`
}

// UnmarshalJSON reads a rope_parameters or v4 rope_scaling object: "rope_type", or
// "type" as older files spell it. Keys of rope types gotrain does not implement are an
// error naming them, not ignored: a model would silently compute other numbers.
func (r *RopeParameters) UnmarshalJSON(b []byte) error {
	type plain RopeParameters
	var aux struct {
		plain
		Type                *string         `json:"type"`
		PartialRotaryFactor *float64        `json:"partial_rotary_factor"`
		Full                json.RawMessage `json:"full_attention"`
		Sliding             json.RawMessage `json:"sliding_attention"`
	}
	aux.plain = plain(*r)
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	if aux.Full != nil || aux.Sliding != nil {
		return fmt.Errorf("rope parameters given per layer type are not supported")
	}
	if aux.PartialRotaryFactor != nil && *aux.PartialRotaryFactor != 1 {
		return fmt.Errorf("partial_rotary_factor %v is not supported (only 1)", *aux.PartialRotaryFactor)
	}
	*r = RopeParameters(aux.plain)
	if r.RopeType == "" && aux.Type != nil {
		r.RopeType = *aux.Type
	}
	return nil
}

// ropeFields reads the rotary-embedding settings of a config.json in either form
// transformers writes, with transformers' precedence (convert_rope_params_to_dict):
// a v4 rope_scaling object wins over rope_parameters, a rope_theta inside the object
// over the top-level one, and the type defaults to "default", the base to 10000.
// llama3's original context defaults to the top-level original_max_position_embeddings,
// else maxPos.
func ropeFields(raw []byte, maxPos int64) (RopeParameters, error) {
	var top struct {
		RopeParameters json.RawMessage `json:"rope_parameters"`
		RopeScaling    json.RawMessage `json:"rope_scaling"`
		RopeTheta      *float64        `json:"rope_theta"`
		OriginalMax    *int64          `json:"original_max_position_embeddings"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		return RopeParameters{}, fmt.Errorf("%s: %w", ConfigFile, err)
	}
	var p RopeParameters
	field, obj := "rope_parameters", top.RopeParameters
	if isJSONObject(top.RopeScaling) {
		field, obj = "rope_scaling", top.RopeScaling
	}
	if isJSONObject(obj) {
		if err := json.Unmarshal(obj, &p); err != nil {
			return RopeParameters{}, fmt.Errorf("%s: %s: %w", ConfigFile, field, err)
		}
	} else if obj != nil && !bytes.Equal(bytes.TrimSpace(obj), []byte("null")) {
		return RopeParameters{}, fmt.Errorf("%s: %s must be an object or null", ConfigFile, field)
	}
	if p.RopeType == "" {
		p.RopeType = RopeDefault
	}
	if p.RopeTheta == 0 {
		p.RopeTheta = defaultRopeTheta
		if top.RopeTheta != nil {
			p.RopeTheta = *top.RopeTheta
		}
	}
	if p.RopeType == RopeLlama3 && p.OriginalMaxPositionEmbeddings == 0 {
		p.OriginalMaxPositionEmbeddings = maxPos
		if top.OriginalMax != nil {
			p.OriginalMaxPositionEmbeddings = *top.OriginalMax
		}
	}
	return p, nil
}

func isJSONObject(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{'
}

// validate checks the parameters for a rotary embedding over heads of headDim.
func (r RopeParameters) validate() error {
	const field = "rope_parameters"
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	if !finite(r.RopeTheta) || r.RopeTheta <= 0 {
		return fmt.Errorf("%s.rope_theta %v must be a positive number", field, r.RopeTheta)
	}
	switch r.RopeType {
	case RopeDefault:
		return nil
	case RopeLinear, RopeDynamic, RopeLlama3:
		if !finite(r.Factor) || r.Factor <= 0 {
			return fmt.Errorf("%s.factor %v must be a positive number for rope_type %q", field, r.Factor, r.RopeType)
		}
	default:
		return fmt.Errorf("%s.rope_type %q is not supported (supported: %s, %s, %s, %s)",
			field, r.RopeType, RopeDefault, RopeLinear, RopeDynamic, RopeLlama3)
	}
	if r.RopeType != RopeLlama3 {
		return nil
	}
	switch {
	case !finite(r.LowFreqFactor) || r.LowFreqFactor <= 0:
		return fmt.Errorf("%s.low_freq_factor %v must be a positive number", field, r.LowFreqFactor)
	case !finite(r.HighFreqFactor) || r.HighFreqFactor <= r.LowFreqFactor:
		return fmt.Errorf("%s.high_freq_factor %v must be a number above low_freq_factor %v", field, r.HighFreqFactor, r.LowFreqFactor)
	case r.OriginalMaxPositionEmbeddings <= 0 || r.OriginalMaxPositionEmbeddings > maxPositions:
		return fmt.Errorf("%s.original_max_position_embeddings %d is outside [1, %d]", field, r.OriginalMaxPositionEmbeddings, int64(maxPositions))
	}
	return nil
}

// RotaryEmbedding is transformers' LlamaRotaryEmbedding (shared by Qwen2 and Mistral):
// the inverse frequencies "inv_freq" (a non-persistent float32 buffer, so not in the
// state dict) from which each forward computes the cosines and sines of its positions.
// The "dynamic" type changes inv_freq when a forward's positions pass the original
// context and restores it when they return within it, as transformers'
// dynamic_rope_update does.
type RotaryEmbedding struct {
	nn.Base
	InvFreq *torch.Tensor
	// Float32 keeps the cosines and sines in float32 whatever the model's dtype, as
	// OlmoRotaryEmbedding does (ApplyRotary then rounds the rotated queries and keys).
	Float32 bool
	params  RopeParameters
	headDim int64
	maxPos  int64
	// invFreq is the current inverse frequencies on the host, original those of the
	// original context; maxSeqLen is transformers' max_seq_len_cached.
	invFreq, original []float32
	maxSeqLen         int64
}

// NewRotaryEmbedding returns the rotary embedding of p for heads of headDim dimensions
// in a model of maxPositions positions (max_position_embeddings).
func NewRotaryEmbedding(p RopeParameters, headDim, maxPositions int64) (r *RotaryEmbedding, err error) {
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	if headDim < 2 || headDim%2 != 0 || headDim > maxHeadDim {
		return nil, fmt.Errorf("models: rotary embedding: head_dim %d must be even, in [2, %d]", headDim, maxHeadDim)
	}
	defer torch.Recover(&err, "rotary embedding")
	r = &RotaryEmbedding{params: p, headDim: headDim, maxPos: maxPositions, maxSeqLen: maxPositions}
	torch.WithScope(func() { r.original = r.computeInvFreq(0).Float32s() })
	r.invFreq = r.original
	r.InvFreq = r.RegisterNonPersistentBuffer("inv_freq", torch.FromSlice(r.original))
	return r, nil
}

// computeInvFreq is transformers' ROPE_INIT_FUNCTIONS[rope_type](config, seq_len) with
// the same float32 tensor operations in the same order, so the frequencies are the
// same bits. seqLen > 0 is the dynamic type's current length (a tensor in transformers,
// so its arithmetic is float32 too).
func (r *RotaryEmbedding) computeInvFreq(seqLen int64) *torch.Tensor {
	p, dim := r.params, r.headDim
	exponent := torch.Arange(0, float64(dim), 2, torch.Int64, torch.CPU).ToDType(torch.Float32).DivScalar(float64(dim))
	base := torch.Full([]int64{}, p.RopeTheta, torch.Float32, torch.CPU)
	if p.RopeType == RopeDynamic {
		if seqLen > 0 {
			// base * ((factor * seq_len / max_pos) - (factor - 1)) ** (dim / (dim - 2)), seq_len a tensor.
			s := torch.Full([]int64{}, float64(max(seqLen, r.maxPos)), torch.Int64, torch.CPU).ToDType(torch.Float32)
			grow := s.MulScalar(p.Factor).DivScalar(float64(r.maxPos)).SubScalar(p.Factor - 1).PowScalar(float64(dim) / float64(dim-2))
			base = grow.MulScalar(p.RopeTheta)
		} else {
			// At construction transformers computes the same in Python floats with
			// seq_len = max_position_embeddings.
			b := p.RopeTheta * math.Pow(p.Factor*float64(r.maxPos)/float64(r.maxPos)-(p.Factor-1), float64(dim)/float64(dim-2))
			base = torch.Full([]int64{}, b, torch.Float32, torch.CPU)
		}
	}
	inv := base.Pow(exponent).Reciprocal()
	switch p.RopeType {
	case RopeLinear:
		inv = inv.DivScalar(p.Factor)
	case RopeLlama3:
		inv = llama3InvFreq(inv, p)
	}
	return inv
}

// llama3InvFreq is transformers' _compute_llama3_parameters after the default
// frequencies: wavelengths longer than original/low_freq_factor are divided by factor,
// shorter than original/high_freq_factor kept, and those between blended smoothly.
func llama3InvFreq(inv *torch.Tensor, p RopeParameters) *torch.Tensor {
	old := float64(p.OriginalMaxPositionEmbeddings)
	lowWavelen, highWavelen := old/p.LowFreqFactor, old/p.HighFreqFactor
	wavelen := inv.Reciprocal().MulScalar(2 * math.Pi)
	scaled := torch.Where(wavelen.GtScalar(lowWavelen), inv.DivScalar(p.Factor), inv)
	smooth := wavelen.Reciprocal().MulScalar(old).SubScalar(p.LowFreqFactor).DivScalar(p.HighFreqFactor - p.LowFreqFactor)
	smoothed := smooth.RSubScalar(1).Mul(scaled).DivScalar(p.Factor).Add(smooth.Mul(scaled))
	medium := wavelen.LtScalar(highWavelen).LogicalNot().LogicalAnd(wavelen.GtScalar(lowWavelen).LogicalNot())
	return torch.Where(medium, smoothed, scaled)
}

// Forward returns the cosines and sines [B or 1, T, head_dim] of positions [B or 1, T]
// (int64) in x's dtype (float32 with Float32), as LlamaRotaryEmbedding.forward(x,
// position_ids).
func (r *RotaryEmbedding) Forward(x, positions *torch.Tensor) (cos, sin *torch.Tensor) {
	if r.params.RopeType == RopeDynamic {
		r.dynamicUpdate(positions)
	}
	inv := r.InvFreq
	if inv.DType() != torch.Float32 {
		// A whole-model dtype conversion rounded the buffer; transformers keeps it in
		// float32, so restore the exact values.
		torch.NoGrad(func() { inv.SetData(torch.FromSlice(r.invFreq).To(inv.Device(), false)) })
	}
	var out [2]*torch.Tensor
	torch.NoGrad(func() {
		freqs := positions.ToDType(torch.Float32).Unsqueeze(-1).Mul(inv)
		emb := torch.Cat([]*torch.Tensor{freqs, freqs}, -1)
		dt := x.DType()
		if r.Float32 {
			dt = torch.Float32
		}
		out = [2]*torch.Tensor{emb.Cos().ToDType(dt), emb.Sin().ToDType(dt)}
	})
	return out[0], out[1]
}

// dynamicUpdate is dynamic_rope_update's dynamic_frequency_update: past the cached
// length the frequencies are recomputed for the new length; back within the original
// context they are reset.
func (r *RotaryEmbedding) dynamicUpdate(positions *torch.Tensor) {
	seqLen := positions.Max().ItemInt() + 1
	var next []float32
	if seqLen > r.maxSeqLen {
		torch.WithScope(func() { next = r.computeInvFreq(seqLen).Float32s() })
		r.maxSeqLen = seqLen
	}
	if seqLen < r.maxPos && r.maxSeqLen > r.maxPos {
		next = r.original
		r.maxSeqLen = r.maxPos
	}
	if next != nil {
		r.invFreq = next
		torch.NoGrad(func() { r.InvFreq.SetData(torch.FromSlice(next).To(r.InvFreq.Device(), false)) })
	}
}

// ApplyRotary is transformers' apply_rotary_pos_emb: q·cos + rotate_half(q)·sin and the
// same for k, with q, k [B, H, T, D] and cos, sin [B or 1, T, D], returned in q's and
// k's dtypes (float32 cosines promote the products, as in OLMo's).
func ApplyRotary(q, k, cos, sin *torch.Tensor) (*torch.Tensor, *torch.Tensor) {
	cos, sin = cos.Unsqueeze(1), sin.Unsqueeze(1)
	qe, ke := q.Mul(cos).Add(rotateHalf(q).Mul(sin)), k.Mul(cos).Add(rotateHalf(k).Mul(sin))
	if qe.DType() != q.DType() {
		qe, ke = qe.ToDType(q.DType()), ke.ToDType(k.DType())
	}
	return qe, ke
}

// rotateHalf is transformers' rotate_half: (x1, x2) -> (-x2, x1) over the halves of the
// last dimension.
func rotateHalf(x *torch.Tensor) *torch.Tensor {
	h := x.Size(-1) / 2
	return torch.Cat([]*torch.Tensor{x.Narrow(-1, h, h).Neg(), x.Narrow(-1, 0, h)}, -1)
}
