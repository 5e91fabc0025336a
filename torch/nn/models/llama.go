package models

import (
	"fmt"

	"github.com/gotrain/gotrain/torch/nn"
)

// LlamaConfig is transformers' LlamaConfig, with the keys of its config.json (the v5
// form; ParseLlamaConfig reads the v4 form too): those of LlamaFamilyConfig and the
// biases. Start from DefaultLlamaConfig and change what differs; zero NumKeyValueHeads
// and HeadDim are derived as transformers derives them.
type LlamaConfig struct {
	LlamaFamilyConfig
	// AttentionBias puts biases on q_proj, k_proj, v_proj and o_proj.
	AttentionBias bool `json:"attention_bias"`
	// MLPBias puts biases on gate_proj, up_proj and down_proj.
	MLPBias bool `json:"mlp_bias"`
}

// DefaultLlamaConfig returns LlamaConfig()'s defaults (Llama 2 7B's sizes: vocabulary
// 32000, 32 layers of width 4096, 32 heads, 2048 positions).
func DefaultLlamaConfig() LlamaConfig {
	c := LlamaConfig{LlamaFamilyConfig: llamaFamilyDefaults("llama", 32000, 11008, 2048)}
	bos := int64(1)
	c.BOSTokenID, c.EOSTokenID = &bos, TokenIDs{2}
	return c
}

// ParseLlamaConfig reads a Llama config.json in either form transformers writes: v5
// (rope_parameters, dtype) or v4 (rope_theta and rope_scaling, torch_dtype). Keys it
// does not know are ignored, as transformers keeps them as plain attributes.
func ParseLlamaConfig(raw []byte) (LlamaConfig, error) {
	return parseLlamaFamily(raw, DefaultLlamaConfig())
}

// withDefaults fills the sizes transformers derives; head_dim is derived even where
// num_attention_heads does not divide hidden_size (spec refuses that config).
func (c LlamaConfig) withDefaults() LlamaConfig {
	if c.HeadDim == 0 && c.NumAttentionHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	c.LlamaFamilyConfig = c.LlamaFamilyConfig.withDefaults()
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
	s := c.LlamaFamilyConfig.spec()
	s.qkvBias, s.oBias, s.mlpBias = c.AttentionBias, c.AttentionBias, c.MLPBias
	return s, nil
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
	m := &LlamaForCausalLM{Config: c.withDefaults()}
	if err := m.build(&m.Base, "LlamaConfig", m.Config.spec); err != nil {
		return nil, err
	}
	m.Model, m.LMHead = m.model, m.lmHead
	return m, nil
}

func init() {
	RegisterArchitecture(Architecture{ModelType: "llama", Class: "LlamaForCausalLM", New: fromJSON(ParseLlamaConfig, NewLlamaForCausalLM), Rename: decoderCheckpointKey})
}

// DecoderConfig returns the vocabulary, max_position_embeddings and the special tokens
// (CausalLM).
func (m *LlamaForCausalLM) DecoderConfig() DecoderConfig {
	return m.Config.decoderConfig()
}

// PretrainedConfig returns the config as save_pretrained writes it (the v5 form), with
// model_type and architectures set.
func (m *LlamaForCausalLM) PretrainedConfig() any {
	c := m.Config
	c.ModelType, c.Architectures = "llama", []string{"LlamaForCausalLM"}
	return c
}
