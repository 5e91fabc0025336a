package models

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// Gemma3TextConfig is transformers' Gemma3TextConfig, the text decoder of Gemma 3, with
// the keys of its config.json (the v5 form; ParseGemma3TextConfig reads the v4 form
// too): Gemma2Config's keys with the rotary embeddings given per layer type. Its
// AttnLogitSoftcapping is kept for config.json but, as in transformers'
// Gemma3Attention, not applied. Start from DefaultGemma3TextConfig and change what
// differs.
type Gemma3TextConfig struct {
	Gemma2Config
	// RopeParameters holds the rotary embedding of each layer type: full_attention's
	// (the global base, 1e6 by default, with any scaling) and sliding_attention's (the
	// local base, 1e4 by default).
	RopeParameters map[string]RopeParameters `json:"rope_parameters"`
}

// DefaultGemma3TextConfig returns Gemma3TextConfig()'s defaults (Gemma 3 1B's shape:
// 262208 tokens, 26 layers of width 2304, 8 heads of 256 over 4 key/value heads, a
// 4096-token window on five layers of six, tied embeddings, no soft-capping).
func DefaultGemma3TextConfig() Gemma3TextConfig {
	c := Gemma3TextConfig{Gemma2Config: DefaultGemma2Config()}
	c.VocabSize, c.MaxPositionEmbeddings, c.ModelType = 262208, 131072, "gemma3_text"
	c.FinalLogitSoftcapping, c.AttnLogitSoftcapping = nil, nil
	return c
}

// The bases of Gemma 3's rotary embeddings when a config names none.
const (
	gemma3GlobalTheta = 1e6
	gemma3LocalTheta  = 1e4
)

// ParseGemma3TextConfig reads a Gemma 3 text config.json in either form transformers
// writes: v5 (rope_parameters nested by layer type, layer_types) or v4 (rope_theta,
// rope_local_base_freq and rope_scaling for the global layers, sliding_window_pattern).
func ParseGemma3TextConfig(raw []byte) (Gemma3TextConfig, error) {
	const cfg = "Gemma3TextConfig"
	c := DefaultGemma3TextConfig()
	var aux struct {
		RopeParameters json.RawMessage `json:"rope_parameters"`
		RopeScaling    json.RawMessage `json:"rope_scaling"`
		RopeTheta      *float64        `json:"rope_theta"`
		LocalBase      *float64        `json:"rope_local_base_freq"`
		Pattern        *int64          `json:"sliding_window_pattern"`
	}
	if err := json.Unmarshal(raw, &aux); err != nil {
		return c, fmt.Errorf("models: %s: %w", ConfigFile, err)
	}
	// rope_parameters is read below, by layer type.
	var rest map[string]json.RawMessage
	if err := json.Unmarshal(raw, &rest); err != nil {
		return c, fmt.Errorf("models: %s: %w", ConfigFile, err)
	}
	delete(rest, "rope_parameters")
	trimmed, _ := json.Marshal(rest)
	if err := json.Unmarshal(trimmed, &c); err != nil {
		return c, fmt.Errorf("models: %s: %w", ConfigFile, jsonFieldError(trimmed, &c, err))
	}
	if c.ModelType != "gemma3_text" {
		return c, fmt.Errorf("models: %s: model_type %q is not gemma3_text", ConfigFile, c.ModelType)
	}
	// The types stay empty until read: a v4 rope_scaling names its type under "type",
	// which RopeParameters reads only where no rope_type is set.
	var full, local RopeParameters
	if isJSONObject(aux.RopeParameters) {
		var byType map[string]json.RawMessage
		if err := json.Unmarshal(aux.RopeParameters, &byType); err != nil {
			return c, fmt.Errorf("models: %s: rope_parameters: %w", ConfigFile, err)
		}
		for k, v := range byType {
			var p *RopeParameters
			switch k {
			case FullAttention:
				p = &full
			case SlidingAttention:
				p = &local
			default:
				return c, fmt.Errorf("models: %s: %s: rope_parameters must be given per layer type (%s, %s), not %q",
					ConfigFile, cfg, FullAttention, SlidingAttention, k)
			}
			if err := json.Unmarshal(v, p); err != nil {
				return c, fmt.Errorf("models: %s: rope_parameters.%s: %w", ConfigFile, k, err)
			}
		}
	}
	if isJSONObject(aux.RopeScaling) {
		if err := json.Unmarshal(aux.RopeScaling, &full); err != nil {
			return c, fmt.Errorf("models: %s: rope_scaling: %w", ConfigFile, err)
		}
	}
	full.RopeTheta = ropeTheta(full.RopeTheta, aux.RopeTheta, gemma3GlobalTheta)
	local.RopeTheta = ropeTheta(local.RopeTheta, aux.LocalBase, gemma3LocalTheta)
	c.RopeParameters = map[string]RopeParameters{FullAttention: full.withDefaults(c.MaxPositionEmbeddings),
		SlidingAttention: local.withDefaults(c.MaxPositionEmbeddings)}
	if c.LayerTypes == nil && c.NumHiddenLayers > 0 && c.NumHiddenLayers <= maxLayers {
		pattern := int64(6)
		if aux.Pattern != nil {
			pattern = *aux.Pattern
		}
		if pattern < 1 {
			return c, fmt.Errorf("models: %s: %s: sliding_window_pattern %d must be positive", ConfigFile, cfg, pattern)
		}
		c.LayerTypes = make([]string, c.NumHiddenLayers)
		for i := range c.LayerTypes {
			c.LayerTypes[i] = SlidingAttention
			if (int64(i)+1)%pattern == 0 {
				c.LayerTypes[i] = FullAttention
			}
		}
	}
	c.DType = dtypeField(raw)
	return c, nil
}

// Gemma3ForCausalLM is transformers' Gemma3ForCausalLM: Gemma2ForCausalLM's modules
// and names, with each layer's queries and keys normalised per head ("self_attn.q_norm",
// "self_attn.k_norm", GemmaRMSNorms) and its sliding layers on the local rotary base;
// no soft-capped attention.
type Gemma3ForCausalLM struct {
	nn.Base
	Config Gemma3TextConfig
	Model  *DecoderModel[*Gemma3DecoderLayer]
	LMHead *nn.Linear
	gemmaLM[*Gemma3DecoderLayer]
}

// Gemma3DecoderLayer is transformers' Gemma3DecoderLayer: the attention and the MLP each
// between a pre-norm and a post-norm, each added to its input.
type Gemma3DecoderLayer struct {
	nn.Base
	SelfAttn                 *Attention
	MLP                      *GatedMLP
	InputLayernorm           *GemmaRMSNorm
	PostAttentionLayernorm   *GemmaRMSNorm
	PreFeedforwardLayernorm  *GemmaRMSNorm
	PostFeedforwardLayernorm *GemmaRMSNorm
}

func (l *Gemma3DecoderLayer) forward(x *torch.Tensor, in layerInput) *torch.Tensor {
	a := l.SelfAttn
	q, k, v := a.Project(l.InputLayernorm.Forward(x))
	q, k = a.QNorm.Forward(a.SplitHeads(q)), a.KNorm.Forward(a.SplitHeads(k))
	x = x.Add(l.PostAttentionLayernorm.Forward(a.Attend(q, k, a.SplitHeads(v), in)))
	return x.Add(l.PostFeedforwardLayernorm.Forward(l.MLP.Forward(l.PreFeedforwardLayernorm.Forward(x))))
}

func (l *Gemma3DecoderLayer) window() int64 { return l.SelfAttn.Window }

// NewGemma3ForCausalLM returns Gemma3ForCausalLM(config) initialised as transformers
// does, in float32 on the CPU; a config out of range is an error naming the field.
func NewGemma3ForCausalLM(c Gemma3TextConfig) (*Gemma3ForCausalLM, error) {
	const cfg = "Gemma3TextConfig"
	// transformers' yarn reads truncate from the top of rope_parameters, which for Gemma 3
	// holds the layer types: the nested truncate is never seen, and the band is truncated.
	full, lp := c.RopeParameters[FullAttention], c.RopeParameters[SlidingAttention]
	full.Truncate, lp.Truncate = nil, nil
	s, windows, err := c.Gemma2Config.sizes(cfg, full)
	if err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	if f := lp.PartialRotaryFactor; f != 0 && f != 1 {
		return nil, fmt.Errorf("models: %s: rope_parameters.%s.partial_rotary_factor %v is not supported (only 1)", cfg, SlidingAttention, f)
	}
	local, err := NewRotaryEmbedding(lp, c.HeadDim, c.MaxPositionEmbeddings)
	if err != nil {
		return nil, fmt.Errorf("%w (rope_parameters.%s)", err, SlidingAttention)
	}
	m := &Gemma3ForCausalLM{Config: c}
	lm, err := buildDecoder(&m.Base, cfg, s, c.TieWordEmbeddings, func(i int) *Gemma3DecoderLayer {
		l := &Gemma3DecoderLayer{}
		a := nn.Register(&l.Base, "self_attn", newAttention(s.attention(c.AttentionBias, c.AttentionBias), i))
		a.QNorm = nn.Register(&a.Base, "q_norm", NewGemmaRMSNorm(s.headDim, s.eps))
		a.KNorm = nn.Register(&a.Base, "k_norm", NewGemmaRMSNorm(s.headDim, s.eps))
		a.Scale, a.Window = 1/math.Sqrt(c.QueryPreAttnScalar), windows[i]
		l.SelfAttn = a
		l.MLP = nn.Register(&l.Base, "mlp", newGatedMLP(s.hidden, s.intermediate, s.act, false, s.initStd))
		l.InputLayernorm, l.PostAttentionLayernorm, l.PreFeedforwardLayernorm, l.PostFeedforwardLayernorm = gemmaNorms(&l.Base, s)
		return l
	}, func() nn.Layer { return NewGemmaRMSNorm(s.hidden, s.eps) })
	if err != nil {
		nn.Free(local)
		return nil, err
	}
	m.gemmaLM = newGemmaLM(lm, c.Gemma2Config)
	m.Model, m.LMHead = lm.model, lm.lmHead
	m.Model.LocalRotaryEmb = nn.Register(&m.Model.Base, "rotary_emb_local", local)
	return m, nil
}

func init() {
	RegisterArchitecture(Architecture{ModelType: "gemma3_text", Class: "Gemma3ForCausalLM",
		New: fromJSON(ParseGemma3TextConfig, NewGemma3ForCausalLM), Rename: decoderCheckpointKey})
}

// PretrainedConfig returns the config as save_pretrained writes it (the v5 form), with
// model_type and architectures set.
func (m *Gemma3ForCausalLM) PretrainedConfig() any {
	return pretrained(m.Config, "gemma3_text", "Gemma3ForCausalLM")
}

// MarshalJSON writes the config as config.json holds it: Gemma2Config's keys (the
// soft-capping values as floats) and rope_parameters by layer type.
func (c Gemma3TextConfig) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		gemma2JSON
		RopeParameters map[string]RopeParameters `json:"rope_parameters"`
	}{c.Gemma2Config.configJSON(), c.RopeParameters})
}

// Gemma 3 from 4B up ships as Gemma3ForConditionalGeneration (model_type "gemma3"): a
// SigLIP vision tower and a projector beside the text decoder, whose config is the
// directory's text_config. gotrain opens such a directory as its text decoder, a
// Gemma3ForCausalLM with the same weights, and leaves the vision tower and the projector
// out (LoadOptions.Notice says so); saved, it is a gemma3_text directory.

// gemma3LeftOut names what a multimodal Gemma 3 directory holds that is not loaded.
const gemma3LeftOut = "the vision tower and the multimodal projector are left out"

// ParseGemma3Config reads a multimodal Gemma 3 config.json (model_type "gemma3") as its
// text decoder's config: text_config in either form ParseGemma3TextConfig reads, with
// the special tokens (bos, eos and pad ids) of the top level where text_config has
// none, as the Hub's checkpoints give eos_token_id.
func ParseGemma3Config(raw []byte) (Gemma3TextConfig, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return Gemma3TextConfig{}, fmt.Errorf("models: %s: %w", ConfigFile, err)
	}
	var modelType string
	if err := json.Unmarshal(top["model_type"], &modelType); err != nil || modelType != "gemma3" {
		return Gemma3TextConfig{}, fmt.Errorf("models: %s: model_type %s is not gemma3", ConfigFile, top["model_type"])
	}
	var text map[string]json.RawMessage
	if !isJSONObject(top["text_config"]) {
		return Gemma3TextConfig{}, fmt.Errorf("models: %s: Gemma3Config: text_config must be an object (the text decoder's config)", ConfigFile)
	}
	if err := json.Unmarshal(top["text_config"], &text); err != nil {
		return Gemma3TextConfig{}, fmt.Errorf("models: %s: text_config: %w", ConfigFile, err)
	}
	if _, ok := text["model_type"]; !ok {
		text["model_type"] = json.RawMessage(`"gemma3_text"`)
	}
	for _, k := range []string{"bos_token_id", "eos_token_id", "pad_token_id", "dtype", "torch_dtype"} {
		if _, ok := text[k]; !ok && top[k] != nil {
			text[k] = top[k]
		}
	}
	inner, err := json.Marshal(text)
	if err != nil {
		return Gemma3TextConfig{}, fmt.Errorf("models: %s: text_config: %w", ConfigFile, err)
	}
	c, err := ParseGemma3TextConfig(inner)
	if err != nil {
		return c, fmt.Errorf("%w (in text_config)", err)
	}
	return c, nil
}

// gemma3CheckpointKey maps a multimodal Gemma 3 checkpoint's tensor names to the text
// decoder's: transformers 5's (model.language_model.*, lm_head.*) and the Hub's older
// ones (language_model.model.*, language_model.lm_head.*); the vision tower's and the
// projector's tensors are dropped.
func gemma3CheckpointKey(key string) string {
	for _, p := range []string{"model.vision_tower.", "vision_tower.", "model.multi_modal_projector.", "multi_modal_projector."} {
		if strings.HasPrefix(key, p) {
			return ""
		}
	}
	switch {
	case strings.HasPrefix(key, "model.language_model."):
		key = "model." + strings.TrimPrefix(key, "model.language_model.")
	case strings.HasPrefix(key, "language_model.model."):
		key = "model." + strings.TrimPrefix(key, "language_model.model.")
	case strings.HasPrefix(key, "language_model.lm_head."):
		key = "lm_head." + strings.TrimPrefix(key, "language_model.lm_head.")
	}
	return decoderCheckpointKey(key)
}

func init() {
	RegisterArchitecture(Architecture{ModelType: "gemma3", Class: "Gemma3ForConditionalGeneration",
		New: fromJSON(ParseGemma3Config, NewGemma3ForCausalLM), Rename: gemma3CheckpointKey,
		LeftOut: gemma3LeftOut})
}
