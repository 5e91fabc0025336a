package models

import (
	"fmt"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// Olmo2Config is transformers' Olmo2Config, with the keys of its config.json (the v5
// form; ParseOlmo2Config reads the v4 form too): those of LlamaFamilyConfig and
// attention_bias. Start from DefaultOlmo2Config and change what differs.
type Olmo2Config struct {
	LlamaFamilyConfig
	// AttentionBias puts biases on q_proj, k_proj, v_proj and o_proj.
	AttentionBias bool `json:"attention_bias"`
}

// DefaultOlmo2Config returns Olmo2Config()'s defaults (50304 tokens, 32 layers of width
// 4096, 32 heads, 2048 positions, padding 1, EOS 50279).
func DefaultOlmo2Config() Olmo2Config {
	c := Olmo2Config{LlamaFamilyConfig: llamaFamilyDefaults("olmo2", 50304, 11008, 2048)}
	pad := int64(1)
	c.RMSNormEps, c.PadTokenID, c.EOSTokenID = 1e-5, &pad, TokenIDs{50279}
	return c
}

// ParseOlmo2Config reads an OLMo 2 config.json in either form transformers writes (see
// ParseLlamaConfig).
func ParseOlmo2Config(raw []byte) (Olmo2Config, error) {
	return parseLlamaFamily(raw, DefaultOlmo2Config())
}

// Olmo2ForCausalLM is transformers' Olmo2ForCausalLM: Llama's modules and names, except
// that each layer normalises the outputs of its attention and MLP
// ("post_attention_layernorm", "post_feedforward_layernorm") instead of their inputs,
// and its attention normalises the whole query and key projections ("self_attn.q_norm",
// "self_attn.k_norm", over all heads at once). Its RMSNorms take the weight's product in
// float32, and its rotary cosines stay in float32.
type Olmo2ForCausalLM struct {
	nn.Base
	Config Olmo2Config
	Model  *DecoderModel[*Olmo2DecoderLayer]
	LMHead *nn.Linear
	decoderLM[*Olmo2DecoderLayer]
}

// Olmo2DecoderLayer is transformers' Olmo2DecoderLayer.
type Olmo2DecoderLayer struct {
	nn.Base
	SelfAttn                 *Attention
	MLP                      *GatedMLP
	PostAttentionLayernorm   *RMSNorm
	PostFeedforwardLayernorm *RMSNorm
}

func (l *Olmo2DecoderLayer) forward(x *torch.Tensor, in layerInput) *torch.Tensor {
	a := l.SelfAttn
	q, k, v := a.Project(x)
	q, k = a.QNorm.Forward(q), a.KNorm.Forward(k)
	x = x.Add(l.PostAttentionLayernorm.Forward(a.Attend(a.SplitHeads(q), a.SplitHeads(k), a.SplitHeads(v), in)))
	return x.Add(l.PostFeedforwardLayernorm.Forward(l.MLP.Forward(x)))
}

func (l *Olmo2DecoderLayer) window() int64 { return 0 }

// newOlmo2Norm is Olmo2RMSNorm.
func newOlmo2Norm(dim int64, eps float64) *RMSNorm {
	n := NewRMSNorm(dim, eps)
	n.WeightInFloat32 = true
	return n
}

// NewOlmo2ForCausalLM returns Olmo2ForCausalLM(config) initialised as transformers
// does, in float32 on the CPU; a config out of range is an error naming the field.
func NewOlmo2ForCausalLM(c Olmo2Config) (*Olmo2ForCausalLM, error) {
	const cfg = "Olmo2Config"
	m := &Olmo2ForCausalLM{Config: withDefaults(c)}
	if err := m.Config.checkLayers(cfg); err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	s := m.Config.sizes()
	bias := m.Config.AttentionBias
	var err error
	m.decoderLM, err = buildDecoder(&m.Base, cfg, s, m.Config.TieWordEmbeddings, func(i int) *Olmo2DecoderLayer {
		l := &Olmo2DecoderLayer{}
		a := nn.Register(&l.Base, "self_attn", newAttention(s.attention(bias, bias), i))
		a.QNorm = nn.Register(&a.Base, "q_norm", newOlmo2Norm(s.heads*s.headDim, s.eps))
		a.KNorm = nn.Register(&a.Base, "k_norm", newOlmo2Norm(s.kvHeads*s.headDim, s.eps))
		l.SelfAttn = a
		l.MLP = nn.Register(&l.Base, "mlp", newGatedMLP(s.hidden, s.intermediate, s.act, false, s.initStd))
		l.PostAttentionLayernorm = nn.Register(&l.Base, "post_attention_layernorm", newOlmo2Norm(s.hidden, s.eps))
		l.PostFeedforwardLayernorm = nn.Register(&l.Base, "post_feedforward_layernorm", newOlmo2Norm(s.hidden, s.eps))
		return l
	}, func() nn.Layer { return newOlmo2Norm(s.hidden, s.eps) })
	if err != nil {
		return nil, err
	}
	m.model.RotaryEmb.Float32 = true
	m.Model, m.LMHead, m.family = m.model, m.lmHead, &m.Config.LlamaFamilyConfig
	return m, nil
}

func init() {
	RegisterArchitecture(Architecture{ModelType: "olmo2", Class: "Olmo2ForCausalLM", New: fromJSON(ParseOlmo2Config, NewOlmo2ForCausalLM), Rename: decoderCheckpointKey})
}

// PretrainedConfig returns the config as save_pretrained writes it (the v5 form), with
// model_type and architectures set.
func (m *Olmo2ForCausalLM) PretrainedConfig() any {
	return pretrained(m.Config, "olmo2", "Olmo2ForCausalLM")
}
