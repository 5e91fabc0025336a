package models

import (
	"fmt"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// Qwen3Config is transformers' Qwen3Config, with the keys of its config.json (the v5
// form; ParseQwen3Config reads the v4 form too): Qwen2Config's keys and attention_bias.
// Unlike Qwen2, head_dim is a key of its own (128 by default), not derived from
// hidden_size. Start from DefaultQwen3Config and change what differs.
type Qwen3Config struct {
	Qwen2Config
	// AttentionBias puts biases on q_proj, k_proj, v_proj and o_proj.
	AttentionBias bool `json:"attention_bias"`
}

// DefaultQwen3Config returns Qwen3Config()'s defaults (151936 tokens, 32 layers of
// width 4096, 32 heads of 128, 32768 positions, no sliding window, no BOS or EOS).
func DefaultQwen3Config() Qwen3Config {
	c := Qwen3Config{Qwen2Config: DefaultQwen2Config()}
	c.ModelType, c.HeadDim = "qwen3", 128
	return c
}

// ParseQwen3Config reads a Qwen3 config.json in either form transformers writes (see
// ParseLlamaConfig).
func ParseQwen3Config(raw []byte) (Qwen3Config, error) {
	return parseLlamaFamily(raw, DefaultQwen3Config())
}

// Qwen3ForCausalLM is transformers' Qwen3ForCausalLM: Qwen2ForCausalLM's modules and
// names, with attention_bias on all four projections and each layer's
// "self_attn.q_norm" and "self_attn.k_norm", RMSNorms over head_dim applied to every
// query and key head before the rotary embedding.
type Qwen3ForCausalLM struct {
	nn.Base
	Config Qwen3Config
	Model  *DecoderModel[*Qwen3DecoderLayer]
	LMHead *nn.Linear
	decoderLM[*Qwen3DecoderLayer]
}

// Qwen3DecoderLayer is transformers' Qwen3DecoderLayer: Llama's layer whose attention
// normalises each query and key head.
type Qwen3DecoderLayer struct {
	nn.Base
	SelfAttn               *Attention
	MLP                    *GatedMLP
	InputLayernorm         *RMSNorm
	PostAttentionLayernorm *RMSNorm
}

func (l *Qwen3DecoderLayer) forward(x *torch.Tensor, in layerInput) *torch.Tensor {
	a := l.SelfAttn
	q, k, v := a.Project(l.InputLayernorm.Forward(x))
	q, k = a.QNorm.Forward(a.SplitHeads(q)), a.KNorm.Forward(a.SplitHeads(k))
	x = x.Add(a.Attend(q, k, a.SplitHeads(v), in))
	return x.Add(l.MLP.Forward(l.PostAttentionLayernorm.Forward(x)))
}

func (l *Qwen3DecoderLayer) window() int64 { return l.SelfAttn.Window }

// NewQwen3ForCausalLM returns Qwen3ForCausalLM(config) initialised as transformers
// does, in float32 on the CPU; a config out of range is an error naming the field.
func NewQwen3ForCausalLM(c Qwen3Config) (*Qwen3ForCausalLM, error) {
	const cfg = "Qwen3Config"
	m := &Qwen3ForCausalLM{Config: withDefaults(c)}
	windows, err := m.Config.windows(cfg)
	if err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	s := m.Config.sizes()
	bias := m.Config.AttentionBias
	m.decoderLM, err = buildDecoder(&m.Base, cfg, s, m.Config.TieWordEmbeddings, func(i int) *Qwen3DecoderLayer {
		l := &Qwen3DecoderLayer{}
		a := nn.Register(&l.Base, "self_attn", newAttention(s.attention(bias, bias), i))
		a.QNorm = nn.Register(&a.Base, "q_norm", NewRMSNorm(s.headDim, s.eps))
		a.KNorm = nn.Register(&a.Base, "k_norm", NewRMSNorm(s.headDim, s.eps))
		a.Window = windows[i]
		l.SelfAttn = a
		l.MLP = nn.Register(&l.Base, "mlp", newGatedMLP(s.hidden, s.intermediate, s.act, false, s.initStd))
		l.InputLayernorm = nn.Register(&l.Base, "input_layernorm", NewRMSNorm(s.hidden, s.eps))
		l.PostAttentionLayernorm = nn.Register(&l.Base, "post_attention_layernorm", NewRMSNorm(s.hidden, s.eps))
		return l
	}, func() nn.Layer { return NewRMSNorm(s.hidden, s.eps) })
	if err != nil {
		return nil, err
	}
	m.Model, m.LMHead, m.family = m.model, m.lmHead, &m.Config.LlamaFamilyConfig
	return m, nil
}

func init() {
	RegisterArchitecture(Architecture{ModelType: "qwen3", Class: "Qwen3ForCausalLM", New: fromJSON(ParseQwen3Config, NewQwen3ForCausalLM), Rename: decoderCheckpointKey})
}

// PretrainedConfig returns the config as save_pretrained writes it (the v5 form, with
// layer_types), with model_type and architectures set.
func (m *Qwen3ForCausalLM) PretrainedConfig() any {
	return pretrained(m.Config, "qwen3", "Qwen3ForCausalLM")
}
