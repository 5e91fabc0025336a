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
	// RopeYarn is YaRN: frequencies blended between the original and the interpolated
	// ones over a band of dimensions, cosines and sines scaled by an attention factor.
	RopeYarn = "yarn"
	// RopeLongrope is LongRoPE (Phi-3): per-frequency rescaling factors, short_factor
	// within the original context and long_factor past it, and an attention factor.
	RopeLongrope = "longrope"
)

// defaultRopeTheta is transformers' default_theta, used when a config names none.
const defaultRopeTheta = 10000.0

// RopeParameters is transformers' rope_parameters (config.json's v5 form): the rotary
// embedding's type, base and scaling. Reading accepts the v4 spellings too ("type" for
// "rope_type"); the v4 top-level rope_theta and rope_scaling are folded in by the
// config parsers (ParseLlamaConfig and the others).
type RopeParameters struct {
	// RopeType is one of RopeDefault, RopeLinear, RopeDynamic, RopeLlama3, RopeYarn,
	// RopeLongrope.
	RopeType string `json:"rope_type"`
	// RopeTheta is the base of the wavelengths (10000, Llama 3's 500000).
	RopeTheta float64 `json:"rope_theta"`
	// Factor scales the context: positions are divided by it (linear), the base grows
	// with it past the original context (dynamic), low frequencies are divided by it
	// (llama3, yarn). For yarn and longrope, 0 (absent or null) means
	// max_position_embeddings / original_max_position_embeddings, and the attention
	// factor derives from it.
	Factor float64 `json:"factor,omitempty"`
	// LowFreqFactor and HighFreqFactor bound llama3's smoothing band: wavelengths above
	// original/low are scaled, below original/high kept, and blended in between.
	LowFreqFactor  float64 `json:"low_freq_factor,omitempty"`
	HighFreqFactor float64 `json:"high_freq_factor,omitempty"`
	// OriginalMaxPositionEmbeddings is the pretraining context llama3, yarn and
	// longrope scaling refer to (max_position_embeddings when absent).
	OriginalMaxPositionEmbeddings int64 `json:"original_max_position_embeddings,omitempty"`
	// PartialRotaryFactor is the fraction of each head the embedding rotates: the first
	// int(head_dim·factor) dimensions, the rest pass unchanged (Phi-3's
	// partial_rotary_factor). 0 means 1; only families whose attention rotates part of
	// a head (phi3) accept another value.
	PartialRotaryFactor float64 `json:"partial_rotary_factor,omitempty"`
	// AttentionFactor (yarn, longrope) multiplies the cosines and sines; 0 (absent)
	// means the type's default, derived from factor (and mscale, mscale_all_dim).
	AttentionFactor float64 `json:"attention_factor,omitempty"`
	// BetaFast and BetaSlow (yarn) bound the band of dimensions blended between
	// extrapolation and interpolation, in rotations over the original context; 0 means
	// 32 and 1.
	BetaFast float64 `json:"beta_fast,omitempty"`
	BetaSlow float64 `json:"beta_slow,omitempty"`
	// Mscale and MscaleAllDim (yarn, DeepSeek's form): when both are set, the attention
	// factor is mscale(factor, Mscale) / mscale(factor, MscaleAllDim).
	Mscale       float64 `json:"mscale,omitempty"`
	MscaleAllDim float64 `json:"mscale_all_dim,omitempty"`
	// Truncate (yarn) rounds the blended band outwards to whole dimensions; nil means
	// true.
	Truncate *bool `json:"truncate,omitempty"`
	// ShortFactor and LongFactor (longrope) divide each of the rotary dimension/2
	// frequencies: ShortFactor while the positions stay within
	// original_max_position_embeddings, LongFactor past it.
	ShortFactor []float64 `json:"short_factor,omitempty"`
	LongFactor  []float64 `json:"long_factor,omitempty"`
}

// UnmarshalJSON reads a rope_parameters or v4 rope_scaling object: "rope_type", or
// "type" as older files spell it. Keys of rope types gotrain does not implement are an
// error naming them, not ignored: a model would silently compute other numbers.
func (r *RopeParameters) UnmarshalJSON(b []byte) error {
	type plain RopeParameters
	var aux struct {
		plain
		Type    *string         `json:"type"`
		Full    json.RawMessage `json:"full_attention"`
		Sliding json.RawMessage `json:"sliding_attention"`
	}
	aux.plain = plain(*r)
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	if aux.Full != nil || aux.Sliding != nil {
		return fmt.Errorf("rope parameters given per layer type are not supported")
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
// else maxPos; yarn's and longrope's to maxPos, as standardize_rope_params sets them
// (families with an original_max_position_embeddings of their own, Phi-3, override it).
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
	// Either key of another JSON type ("rope_scaling": "linear") is an error, not a
	// default rotary embedding run in its place.
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"rope_parameters", top.RopeParameters}, {"rope_scaling", top.RopeScaling}} {
		if f.raw != nil && !isJSONObject(f.raw) && !bytes.Equal(bytes.TrimSpace(f.raw), []byte("null")) {
			return RopeParameters{}, fmt.Errorf("%s: %s must be an object or null, not %s", ConfigFile, f.name, cutJSON(f.raw))
		}
	}
	field, obj := "rope_parameters", top.RopeParameters
	if isJSONObject(top.RopeScaling) {
		field, obj = "rope_scaling", top.RopeScaling
	}
	if isJSONObject(obj) {
		if err := json.Unmarshal(obj, &p); err != nil {
			return RopeParameters{}, fmt.Errorf("%s: %s: %w", ConfigFile, field, err)
		}
		// A rope_theta given inside the object must be a base, as at the top level:
		// 0 there is not "absent".
		var given struct {
			RopeTheta *float64 `json:"rope_theta"`
		}
		if json.Unmarshal(obj, &given) == nil && given.RopeTheta != nil && !(*given.RopeTheta > 0) {
			return RopeParameters{}, fmt.Errorf("%s: %s.rope_theta %v must be a positive number", ConfigFile, field, *given.RopeTheta)
		}
	}
	if p.RopeType == "" {
		p.RopeType = RopeDefault
	}
	p.RopeTheta = ropeTheta(p.RopeTheta, top.RopeTheta, defaultRopeTheta)
	if p.RopeType == RopeLlama3 && p.OriginalMaxPositionEmbeddings == 0 {
		p.OriginalMaxPositionEmbeddings = maxPos
		if top.OriginalMax != nil {
			p.OriginalMaxPositionEmbeddings = *top.OriginalMax
		}
	}
	if (p.RopeType == RopeYarn || p.RopeType == RopeLongrope) && p.OriginalMaxPositionEmbeddings == 0 {
		p.OriginalMaxPositionEmbeddings = maxPos
	}
	return p, nil
}

// withDefaults fills what transformers derives of p in a model of maxPos positions
// (max_position_embeddings): the type when none is given, the pretraining context of
// llama3, yarn and longrope, and yarn's factor when null.
func (p RopeParameters) withDefaults(maxPos int64) RopeParameters {
	if p.RopeType == "" {
		p.RopeType = RopeDefault
	}
	switch p.RopeType {
	case RopeLlama3, RopeYarn, RopeLongrope:
		if p.OriginalMaxPositionEmbeddings == 0 {
			p.OriginalMaxPositionEmbeddings = maxPos
		}
	}
	if p.RopeType == RopeYarn && p.Factor == 0 && p.OriginalMaxPositionEmbeddings > 0 {
		// A null factor is the ratio of the contexts; written out, so that a saved
		// config has the key transformers requires.
		p.Factor = float64(maxPos) / float64(p.OriginalMaxPositionEmbeddings)
	}
	return p
}

// ropeTheta is a base given in rope_parameters, else the v4 top-level one, else def.
func ropeTheta(inner float64, top *float64, def float64) float64 {
	switch {
	case inner != 0:
		return inner
	case top != nil:
		return *top
	}
	return def
}

// cutJSON is a JSON value for a message: at most 40 bytes of it.
func cutJSON(b json.RawMessage) string {
	b = bytes.TrimSpace(b)
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

func isJSONObject(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{'
}

// rotaryDim is the number of each head's dimensions the embedding rotates:
// int(head_dim · partial_rotary_factor), as transformers computes it.
func (r RopeParameters) rotaryDim(headDim int64) int64 {
	if r.PartialRotaryFactor == 0 || r.PartialRotaryFactor == 1 {
		return headDim
	}
	return int64(float64(headDim) * r.PartialRotaryFactor)
}

// validate checks the parameters for a rotary embedding over heads of headDim; errors
// name the field.
func (r RopeParameters) validate(headDim int64) error {
	const field = "rope_parameters"
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	if !finite(r.RopeTheta) || r.RopeTheta <= 0 {
		return fmt.Errorf("%s.rope_theta %v must be a positive number", field, r.RopeTheta)
	}
	if f := r.PartialRotaryFactor; !finite(f) || f < 0 || f > 1 {
		return fmt.Errorf("%s.partial_rotary_factor %v must be in (0, 1]", field, f)
	}
	if d := r.rotaryDim(headDim); d < 2 || d%2 != 0 {
		return fmt.Errorf("%s.partial_rotary_factor %v rotates %d of head_dim %d dimensions: it must be an even number, at least 2",
			field, r.PartialRotaryFactor, d, headDim)
	}
	switch r.RopeType {
	case RopeDefault:
		return nil
	case RopeLinear, RopeDynamic, RopeLlama3:
		if !finite(r.Factor) || r.Factor <= 0 {
			return fmt.Errorf("%s.factor %v must be a positive number for rope_type %q", field, r.Factor, r.RopeType)
		}
	case RopeYarn, RopeLongrope:
		// factor 0 is transformers' null: max_position_embeddings / original.
		if !finite(r.Factor) || r.Factor < 0 {
			return fmt.Errorf("%s.factor %v must be a positive number for rope_type %q", field, r.Factor, r.RopeType)
		}
		if !finite(r.AttentionFactor) || r.AttentionFactor < 0 {
			return fmt.Errorf("%s.attention_factor %v must be a positive number", field, r.AttentionFactor)
		}
	default:
		return fmt.Errorf("%s.rope_type %q is not supported (supported: %s, %s, %s, %s, %s, %s)",
			field, r.RopeType, RopeDefault, RopeLinear, RopeDynamic, RopeLlama3, RopeYarn, RopeLongrope)
	}
	if r.RopeType == RopeLinear || r.RopeType == RopeDynamic {
		return nil
	}
	if r.OriginalMaxPositionEmbeddings <= 0 || r.OriginalMaxPositionEmbeddings > maxPositions {
		return fmt.Errorf("%s.original_max_position_embeddings %d is outside [1, %d]", field, r.OriginalMaxPositionEmbeddings, int64(maxPositions))
	}
	switch r.RopeType {
	case RopeLlama3:
		switch {
		case !finite(r.LowFreqFactor) || r.LowFreqFactor <= 0:
			return fmt.Errorf("%s.low_freq_factor %v must be a positive number", field, r.LowFreqFactor)
		case !finite(r.HighFreqFactor) || r.HighFreqFactor <= r.LowFreqFactor:
			return fmt.Errorf("%s.high_freq_factor %v must be a number above low_freq_factor %v", field, r.HighFreqFactor, r.LowFreqFactor)
		}
	case RopeYarn:
		for _, f := range []struct {
			name string
			v    float64
		}{{"beta_fast", r.BetaFast}, {"beta_slow", r.BetaSlow}, {"mscale", r.Mscale}, {"mscale_all_dim", r.MscaleAllDim}} {
			if !finite(f.v) {
				return fmt.Errorf("%s.%s %v must be a number", field, f.name, f.v)
			}
		}
	case RopeLongrope:
		half := r.rotaryDim(headDim) / 2
		for _, f := range []struct {
			name string
			v    []float64
		}{{"short_factor", r.ShortFactor}, {"long_factor", r.LongFactor}} {
			if int64(len(f.v)) != half {
				return fmt.Errorf("%s.%s has %d values; rope_type %q needs one per rotated pair of dimensions, %d",
					field, f.name, len(f.v), r.RopeType, half)
			}
			for i, v := range f.v {
				if !finite(v) || v <= 0 {
					return fmt.Errorf("%s.%s[%d] %v must be a positive number", field, f.name, i, v)
				}
			}
		}
	}
	return nil
}

// RotaryEmbedding is transformers' LlamaRotaryEmbedding (shared by Qwen2 and Mistral):
// the inverse frequencies "inv_freq" (a non-persistent float32 buffer, so not in the
// state dict) from which each forward computes the cosines and sines of its positions,
// times the type's attention factor (yarn, longrope; 1 otherwise). The "dynamic" type
// changes inv_freq when a forward's positions pass the original context and restores
// it when they return within it, as transformers' dynamic_rope_update does; "longrope"
// takes the long factors for a forward whose positions pass
// original_max_position_embeddings and the short ones otherwise.
type RotaryEmbedding struct {
	nn.Base
	InvFreq *torch.Tensor
	// Float32 keeps the cosines and sines in float32 whatever the model's dtype, as
	// OlmoRotaryEmbedding does (ApplyRotary then rounds the rotated queries and keys).
	Float32 bool
	params  RopeParameters
	// dim is the rotated dimensions of a head (head_dim with no partial rotation).
	dim    int64
	maxPos int64
	// scaling is transformers' attention_scaling.
	scaling float64
	// invFreq is the current inverse frequencies on the host, original those of the
	// original context (longrope: the short factors'), long longrope's long factors'
	// (computed when first needed); maxSeqLen is transformers' max_seq_len_cached.
	invFreq, original, long []float32
	maxSeqLen               int64
}

// NewRotaryEmbedding returns the rotary embedding of p for heads of headDim dimensions
// in a model of maxPositions positions (max_position_embeddings).
func NewRotaryEmbedding(p RopeParameters, headDim, maxPositions int64) (r *RotaryEmbedding, err error) {
	if headDim < 2 || headDim%2 != 0 || headDim > maxHeadDim {
		return nil, fmt.Errorf("models: rotary embedding: head_dim %d must be even, in [2, %d]", headDim, maxHeadDim)
	}
	if err := p.validate(headDim); err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	defer torch.Recover(&err, "rotary embedding")
	r = &RotaryEmbedding{params: p, dim: p.rotaryDim(headDim), maxPos: maxPositions, maxSeqLen: maxPositions, scaling: p.attentionScaling(maxPositions)}
	torch.WithScope(func() { r.original = r.computeInvFreq(0).Float32s() })
	r.invFreq = r.original
	r.InvFreq = r.RegisterNonPersistentBuffer("inv_freq", torch.FromSlice(r.original))
	return r, nil
}

// AttentionScaling returns the factor the cosines and sines are multiplied by:
// transformers' attention_scaling (yarn's and longrope's attention factor, 1 for the
// other types).
func (r *RotaryEmbedding) AttentionScaling() float64 { return r.scaling }

// factor is yarn's and longrope's factor: the configured one, else
// max_position_embeddings / original_max_position_embeddings.
func (p RopeParameters) factor(maxPos int64) float64 {
	if p.Factor != 0 {
		return p.Factor
	}
	return float64(maxPos) / float64(p.OriginalMaxPositionEmbeddings)
}

// attentionScaling is the attention factor the cosines and sines are multiplied by:
// attention_factor if set, else yarn's 0.1·ln(factor)+1 (or the ratio of the mscale
// forms) and longrope's sqrt(1 + ln(factor)/ln(original)), 1 for a factor up to 1 and
// for the other types.
func (p RopeParameters) attentionScaling(maxPos int64) float64 {
	if p.RopeType != RopeYarn && p.RopeType != RopeLongrope {
		return 1
	}
	if p.AttentionFactor != 0 {
		return p.AttentionFactor
	}
	factor := p.factor(maxPos)
	if p.RopeType == RopeLongrope {
		if factor <= 1 {
			return 1
		}
		return math.Sqrt(1 + math.Log(factor)/math.Log(float64(p.OriginalMaxPositionEmbeddings)))
	}
	mscale := func(scale, m float64) float64 {
		if scale <= 1 {
			return 1
		}
		return 0.1*m*math.Log(scale) + 1
	}
	if p.Mscale != 0 && p.MscaleAllDim != 0 {
		return mscale(factor, p.Mscale) / mscale(factor, p.MscaleAllDim)
	}
	return mscale(factor, 1)
}

// computeInvFreq is transformers' ROPE_INIT_FUNCTIONS[rope_type](config, seq_len) with
// the same float32 tensor operations in the same order, so the frequencies are the
// same bits. seqLen > 0 is the dynamic type's current length (a tensor in transformers,
// so its arithmetic is float32 too), or longrope's (long factors past the original
// context).
func (r *RotaryEmbedding) computeInvFreq(seqLen int64) *torch.Tensor {
	p, dim := r.params, r.dim
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
	powers := base.Pow(exponent)
	switch p.RopeType {
	case RopeLinear:
		return powers.Reciprocal().DivScalar(p.Factor)
	case RopeLlama3:
		return llama3InvFreq(powers.Reciprocal(), p)
	case RopeYarn:
		return yarnInvFreq(powers, p, dim, r.maxPos)
	case RopeLongrope:
		factors := p.ShortFactor
		if seqLen > p.OriginalMaxPositionEmbeddings {
			factors = p.LongFactor
		}
		return torch.FromSlice(factors).ToDType(torch.Float32).Mul(powers).Reciprocal()
	}
	return powers.Reciprocal()
}

// yarnInvFreq is transformers' _compute_yarn_parameters after base^(2i/dim) (powers):
// the interpolated frequencies (divided by factor) and the original ones, blended by a
// linear ramp over the dimensions between the corrections for beta_fast and beta_slow
// rotations in the original context.
func yarnInvFreq(powers *torch.Tensor, p RopeParameters, dim, maxPos int64) *torch.Tensor {
	factor := p.factor(maxPos)
	betaFast, betaSlow := p.BetaFast, p.BetaSlow
	if betaFast == 0 {
		betaFast = 32
	}
	if betaSlow == 0 {
		betaSlow = 1
	}
	original := float64(p.OriginalMaxPositionEmbeddings)
	correction := func(rotations float64) float64 {
		return float64(dim) * math.Log(original/(rotations*2*math.Pi)) / (2 * math.Log(p.RopeTheta))
	}
	low, high := correction(betaFast), correction(betaSlow)
	if p.Truncate == nil || *p.Truncate {
		low, high = math.Floor(low), math.Ceil(high)
	}
	low, high = max(low, 0), min(high, float64(dim-1))
	if low == high {
		high += 0.001 // as transformers, against a division by zero
	}
	ramp := torch.Arange(0, float64(dim/2), 1, torch.Int64, torch.CPU).ToDType(torch.Float32).SubScalar(low).DivScalar(high-low).Clamp(0, 1)
	extrapolation := ramp.RSubScalar(1)
	interpolated := powers.MulScalar(factor).Reciprocal()
	return interpolated.Mul(extrapolation.RSubScalar(1)).Add(powers.Reciprocal().Mul(extrapolation))
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

// Forward returns the cosines and sines [B or 1, T, rotated dims] of positions [B or 1,
// T] (int64) in x's dtype (float32 with Float32), as LlamaRotaryEmbedding.forward(x,
// position_ids).
func (r *RotaryEmbedding) Forward(x, positions *torch.Tensor) (cos, sin *torch.Tensor) {
	switch r.params.RopeType {
	case RopeDynamic:
		r.dynamicUpdate(positions)
	case RopeLongrope:
		r.longropeUpdate(positions)
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
		c, s := emb.Cos(), emb.Sin()
		if r.scaling != 1 {
			c, s = c.MulScalar(r.scaling), s.MulScalar(r.scaling)
		}
		dt := x.DType()
		if r.Float32 {
			dt = torch.Float32
		}
		out = [2]*torch.Tensor{c.ToDType(dt), s.ToDType(dt)}
	})
	return out[0], out[1]
}

// setInvFreq makes next the current frequencies.
func (r *RotaryEmbedding) setInvFreq(next []float32) {
	r.invFreq = next
	torch.NoGrad(func() { r.InvFreq.SetData(torch.FromSlice(next).To(r.InvFreq.Device(), false)) })
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
		r.setInvFreq(next)
	}
}

// longropeUpdate is dynamic_rope_update's longrope_frequency_update: the long factors'
// frequencies for a forward whose positions pass original_max_position_embeddings,
// the short factors' otherwise. Keys cached under the other factors are not
// recomputed here: a model that generates with a cache across the switch drops its
// cache there (Phi3ForCausalLM, CacheInvalidator), as transformers does.
func (r *RotaryEmbedding) longropeUpdate(positions *torch.Tensor) {
	seqLen := positions.Max().ItemInt() + 1
	next := r.original
	if seqLen > r.params.OriginalMaxPositionEmbeddings {
		if r.long == nil {
			torch.WithScope(func() { r.long = r.computeInvFreq(r.params.OriginalMaxPositionEmbeddings + 1).Float32s() })
		}
		next = r.long
	}
	if &next[0] != &r.invFreq[0] {
		r.setInvFreq(next)
	}
}

// ApplyRotary is transformers' apply_rotary_pos_emb: q·cos + rotate_half(q)·sin and the
// same for k, with q, k [B, H, T, D] and cos, sin [B or 1, T, R], returned in q's and
// k's dtypes (float32 cosines promote the products, as in OLMo's). With R < D (a
// partial rotary factor, Phi-3's) the first R dimensions of each head are rotated and
// the others pass unchanged.
func ApplyRotary(q, k, cos, sin *torch.Tensor) (*torch.Tensor, *torch.Tensor) {
	cos, sin = cos.Unsqueeze(1), sin.Unsqueeze(1)
	rotate := func(x *torch.Tensor) *torch.Tensor {
		d, r := x.Size(-1), cos.Size(-1)
		part := x
		if r < d {
			part = x.Narrow(-1, 0, r)
		}
		y := part.Mul(cos).Add(rotateHalf(part).Mul(sin))
		if y.DType() != x.DType() {
			y = y.ToDType(x.DType())
		}
		if r < d {
			y = torch.Cat([]*torch.Tensor{y, x.Narrow(-1, r, d-r)}, -1)
		}
		return y
	}
	return rotate(q), rotate(k)
}

// rotateHalf is transformers' rotate_half: (x1, x2) -> (-x2, x1) over the halves of the
// last dimension.
func rotateHalf(x *torch.Tensor) *torch.Tensor {
	h := x.Size(-1) / 2
	return torch.Cat([]*torch.Tensor{x.Narrow(-1, h, h).Neg(), x.Narrow(-1, 0, h)}, -1)
}
