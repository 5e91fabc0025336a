package models

import (
	"fmt"

	"github.com/gotrain/gotrain/torch"

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

// fillDefaults fills the sizes transformers derives; head_dim is derived even where
// num_attention_heads does not divide hidden_size (spec refuses that config).
func (c *LlamaConfig) fillDefaults() {
	if c.HeadDim == 0 && c.NumAttentionHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	c.LlamaFamilyConfig.fillDefaults()
}

// check refuses what transformers' LlamaConfig.validate_architecture refuses: heads
// that do not divide hidden_size.
func (c LlamaConfig) check() error {
	const cfg = "LlamaConfig"
	if err := checkSizes(cfg, configSize{"num_attention_heads", c.NumAttentionHeads, 1, maxHeads}); err != nil {
		return err
	}
	if c.HiddenSize%c.NumAttentionHeads != 0 {
		return fmt.Errorf("%s: hidden_size %d is not divisible by num_attention_heads %d", cfg, c.HiddenSize, c.NumAttentionHeads)
	}
	return nil
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
	Model  *DecoderModel[*LlamaDecoderLayer]
	LMHead *nn.Linear
	decoderLM[*LlamaDecoderLayer]
}

// LlamaDecoderLayer is transformers' LlamaDecoderLayer, which Qwen2's and Mistral's
// modular files inherit: "self_attn" after "input_layernorm" and "mlp" after
// "post_attention_layernorm", each added to its input.
type LlamaDecoderLayer struct {
	nn.Base
	SelfAttn               *Attention
	MLP                    *GatedMLP
	InputLayernorm         *RMSNorm
	PostAttentionLayernorm *RMSNorm
}

func (l *LlamaDecoderLayer) forward(x *torch.Tensor, in layerInput) *torch.Tensor {
	a := l.SelfAttn
	q, k, v := a.Project(l.InputLayernorm.Forward(x))
	x = x.Add(a.Attend(a.SplitHeads(q), a.SplitHeads(k), a.SplitHeads(v), in))
	return x.Add(l.MLP.Forward(l.PostAttentionLayernorm.Forward(x)))
}

func (l *LlamaDecoderLayer) window() int64 { return l.SelfAttn.Window }

// newLlamaDecoderLayer returns layer i of sizes s, its attention of sizes a sliding
// over window positions (0: full attention), its MLP with biases if mlpBias.
func newLlamaDecoderLayer(s decoderSizes, a attentionSizes, mlpBias bool, i int, window int64) *LlamaDecoderLayer {
	l := &LlamaDecoderLayer{}
	l.SelfAttn = nn.Register(&l.Base, "self_attn", newAttention(a, i))
	l.SelfAttn.Window = window
	l.MLP = nn.Register(&l.Base, "mlp", newGatedMLP(s.hidden, s.intermediate, s.act, mlpBias, s.initStd))
	l.InputLayernorm = nn.Register(&l.Base, "input_layernorm", NewRMSNorm(s.hidden, s.eps))
	l.PostAttentionLayernorm = nn.Register(&l.Base, "post_attention_layernorm", NewRMSNorm(s.hidden, s.eps))
	return l
}

// buildLlamaLike registers on base the decoder of LlamaDecoderLayers that f describes,
// with biases on the q, k, v projections (qkvBias), o_proj (oBias) and the MLP
// (mlpBias), layer i sliding over windows[i] positions (none if windows is nil); cfg
// names the config in errors.
func buildLlamaLike(base *nn.Base, cfg string, f *LlamaFamilyConfig, qkvBias, oBias, mlpBias bool, windows []int64) (decoderLM[*LlamaDecoderLayer], error) {
	s := f.sizes()
	a := s.attention(qkvBias, oBias)
	lm, err := buildDecoder(base, cfg, s, f.TieWordEmbeddings, func(i int) *LlamaDecoderLayer {
		var w int64
		if windows != nil {
			w = windows[i]
		}
		return newLlamaDecoderLayer(s, a, mlpBias, i, w)
	}, func() nn.Layer { return NewRMSNorm(s.hidden, s.eps) })
	lm.family = f
	return lm, err
}

// NewLlamaForCausalLM returns LlamaForCausalLM(config) initialised as transformers
// does (weights N(0, initializer_range²), biases zero, norms one), in float32 on the
// CPU. A config whose sizes are out of range or inconsistent is an error naming the
// field.
func NewLlamaForCausalLM(c LlamaConfig) (*LlamaForCausalLM, error) {
	m := &LlamaForCausalLM{Config: withDefaults(c)}
	if err := m.Config.check(); err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	bias := m.Config.AttentionBias
	var err error
	if m.decoderLM, err = buildLlamaLike(&m.Base, "LlamaConfig", &m.Config.LlamaFamilyConfig, bias, bias, m.Config.MLPBias, nil); err != nil {
		return nil, err
	}
	m.Model, m.LMHead = m.model, m.lmHead
	return m, nil
}

func init() {
	RegisterArchitecture(Architecture{ModelType: "llama", Class: "LlamaForCausalLM", New: fromJSON(ParseLlamaConfig, NewLlamaForCausalLM), Rename: decoderCheckpointKey})
}

// PretrainedConfig returns the config as save_pretrained writes it (the v5 form), with
// model_type and architectures set.
func (m *LlamaForCausalLM) PretrainedConfig() any {
	return pretrained(m.Config, "llama", "LlamaForCausalLM")
}
