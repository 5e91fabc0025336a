package models

import (
	"fmt"

	"github.com/gotrain/gotrain/torch/nn"
)

// LlamaConfig is transformers' LlamaConfig, with the keys of its config.json (the v5
// form; ParseLlamaConfig reads the v4 form too). Start from DefaultLlamaConfig and
// change what differs; zero NumKeyValueHeads and HeadDim are derived as transformers
// derives them.
type LlamaConfig struct {
	VocabSize         int64 `json:"vocab_size"`
	HiddenSize        int64 `json:"hidden_size"`
	IntermediateSize  int64 `json:"intermediate_size"`
	NumHiddenLayers   int64 `json:"num_hidden_layers"`
	NumAttentionHeads int64 `json:"num_attention_heads"`
	// NumKeyValueHeads is the number of key/value heads (grouped-query attention);
	// 0 means num_attention_heads.
	NumKeyValueHeads int64 `json:"num_key_value_heads"`
	// HeadDim is each head's width; 0 means hidden_size / num_attention_heads.
	HeadDim               int64          `json:"head_dim"`
	HiddenAct             string         `json:"hidden_act"`
	MaxPositionEmbeddings int64          `json:"max_position_embeddings"`
	InitializerRange      float64        `json:"initializer_range"`
	RMSNormEps            float64        `json:"rms_norm_eps"`
	TieWordEmbeddings     bool           `json:"tie_word_embeddings"`
	AttentionBias         bool           `json:"attention_bias"`
	AttentionDropout      float64        `json:"attention_dropout"`
	MLPBias               bool           `json:"mlp_bias"`
	RopeParameters        RopeParameters `json:"rope_parameters"`
	PadTokenID            *int64         `json:"pad_token_id"`
	BOSTokenID            *int64         `json:"bos_token_id"`
	EOSTokenID            TokenIDs       `json:"eos_token_id"`
	// DType is the dtype the weights were saved in ("float32", "bfloat16"), read from
	// dtype or v4's torch_dtype.
	DType         string   `json:"dtype,omitempty"`
	ModelType     string   `json:"model_type"`
	Architectures []string `json:"architectures,omitempty"`
}

// DefaultLlamaConfig returns LlamaConfig()'s defaults (Llama 2 7B's sizes: vocabulary
// 32000, 32 layers of width 4096, 32 heads, 2048 positions).
func DefaultLlamaConfig() LlamaConfig {
	bos := int64(1)
	return LlamaConfig{
		VocabSize: 32000, HiddenSize: 4096, IntermediateSize: 11008, NumHiddenLayers: 32,
		NumAttentionHeads: 32, HiddenAct: "silu", MaxPositionEmbeddings: 2048,
		InitializerRange: 0.02, RMSNormEps: 1e-6, BOSTokenID: &bos, EOSTokenID: TokenIDs{2},
		RopeParameters: RopeParameters{RopeType: RopeDefault, RopeTheta: defaultRopeTheta},
		ModelType:      "llama",
	}
}

// ParseLlamaConfig reads a Llama config.json in either form transformers writes: v5
// (rope_parameters, dtype) or v4 (rope_theta and rope_scaling, torch_dtype). Keys it
// does not know are ignored, as transformers keeps them as plain attributes.
func ParseLlamaConfig(raw []byte) (LlamaConfig, error) {
	c := DefaultLlamaConfig()
	rope, err := parseConfigJSON(raw, &c, func() int64 { return c.MaxPositionEmbeddings })
	if err != nil {
		return LlamaConfig{}, err
	}
	if c.ModelType != "llama" {
		return LlamaConfig{}, fmt.Errorf("models: %s: model_type %q is not llama", ConfigFile, c.ModelType)
	}
	c.RopeParameters, c.DType = rope, dtypeField(raw)
	return c.withDefaults(), nil
}

// withDefaults fills the sizes transformers derives.
func (c LlamaConfig) withDefaults() LlamaConfig {
	if c.HeadDim == 0 && c.NumAttentionHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	if c.NumKeyValueHeads == 0 {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	if c.RopeParameters.RopeType == "" {
		c.RopeParameters.RopeType = RopeDefault
	}
	if c.RopeParameters.RopeTheta == 0 {
		c.RopeParameters.RopeTheta = defaultRopeTheta
	}
	if c.RopeParameters.RopeType == RopeLlama3 && c.RopeParameters.OriginalMaxPositionEmbeddings == 0 {
		c.RopeParameters.OriginalMaxPositionEmbeddings = c.MaxPositionEmbeddings
	}
	return c
}

func (c LlamaConfig) spec() (decoderSpec, error) {
	const cfg = "LlamaConfig"
	if err := checkSizes(cfg, configSize{"num_attention_heads", c.NumAttentionHeads, 1, maxHeads}); err != nil {
		return decoderSpec{}, err
	}
	if c.HiddenSize%c.NumAttentionHeads != 0 {
		// transformers' LlamaConfig.validate_architecture refuses it too.
		return decoderSpec{}, fmt.Errorf("%s: hidden_size %d is not divisible by num_attention_heads %d", cfg, c.HiddenSize, c.NumAttentionHeads)
	}
	return decoderSpec{
		vocab: c.VocabSize, hidden: c.HiddenSize, intermediate: c.IntermediateSize, layers: c.NumHiddenLayers,
		heads: c.NumAttentionHeads, kvHeads: c.NumKeyValueHeads, headDim: c.HeadDim, maxPos: c.MaxPositionEmbeddings,
		eps: c.RMSNormEps, initStd: c.InitializerRange, attnDropout: c.AttentionDropout, act: c.HiddenAct,
		qkvBias: c.AttentionBias, oBias: c.AttentionBias, mlpBias: c.MLPBias, tie: c.TieWordEmbeddings,
		padIdx: c.PadTokenID, rope: c.RopeParameters,
	}, nil
}

// LlamaForCausalLM is transformers' LlamaForCausalLM: the decoder "model"
// (model.embed_tokens, model.layers.N.self_attn.{q,k,v,o}_proj,
// model.layers.N.mlp.{gate,up,down}_proj, model.layers.N.input_layernorm,
// model.layers.N.post_attention_layernorm, model.norm) and "lm_head" (no bias), whose
// weight is model.embed_tokens.weight itself when the config ties them: one parameter,
// listed once by NamedParameters and under both names in the state dict, as in PyTorch.
type LlamaForCausalLM struct {
	nn.Base
	Config LlamaConfig
	Model  *DecoderModel
	LMHead *nn.Linear
	decoderLM
}

// NewLlamaForCausalLM returns LlamaForCausalLM(config) initialised as transformers
// does (weights N(0, initializer_range²), biases zero, norms one), in float32 on the
// CPU. A config whose sizes are out of range or inconsistent is an error naming the
// field.
func NewLlamaForCausalLM(c LlamaConfig) (*LlamaForCausalLM, error) {
	c = c.withDefaults()
	s, err := c.spec()
	if err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	m := &LlamaForCausalLM{Config: c}
	if m.decoderLM, err = buildDecoder(&m.Base, "LlamaConfig", s); err != nil {
		return nil, err
	}
	m.Model, m.LMHead = m.model, m.lmHead
	return m, nil
}

func init() {
	RegisterArchitecture(Architecture{ModelType: "llama", Class: "LlamaForCausalLM", New: newLlamaFromJSON, Rename: decoderCheckpointKey})
}

// newLlamaFromJSON builds a LlamaForCausalLM from config.json's bytes (the registry's
// constructor).
func newLlamaFromJSON(raw []byte) (CausalLM, error) {
	c, err := ParseLlamaConfig(raw)
	if err != nil {
		return nil, err
	}
	return NewLlamaForCausalLM(c)
}

// DecoderConfig returns the vocabulary, max_position_embeddings and the special tokens
// (CausalLM).
func (m *LlamaForCausalLM) DecoderConfig() DecoderConfig {
	return decoderConfig(m.Config.VocabSize, m.Config.MaxPositionEmbeddings, m.Config.BOSTokenID, m.Config.EOSTokenID)
}

// PretrainedConfig returns the config as save_pretrained writes it (the v5 form), with
// model_type and architectures set.
func (m *LlamaForCausalLM) PretrainedConfig() any {
	c := m.Config
	c.ModelType, c.Architectures = "llama", []string{"LlamaForCausalLM"}
	return c
}
