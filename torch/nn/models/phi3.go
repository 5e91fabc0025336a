package models

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// Phi3Config is transformers' Phi3Config, with the keys of its config.json (the v5
// form; ParsePhi3Config reads the v4 form too): those of LlamaFamilyConfig and Phi-3's
// own. head_dim is hidden_size / num_attention_heads unless config.json names one.
// The rotary embedding is "default" or "longrope" (v4's "su" and "yarn" are read as
// longrope, as transformers does), and may rotate only part of each head
// (rope_parameters.partial_rotary_factor, or the v4 top-level key). Start from
// DefaultPhi3Config and change what differs.
type Phi3Config struct {
	LlamaFamilyConfig
	// OriginalMaxPositionEmbeddings is the pretraining context: longrope takes its long
	// factors past it, and it overrides rope_parameters' own, as in transformers.
	OriginalMaxPositionEmbeddings int64 `json:"original_max_position_embeddings"`
	// ResidPdrop is the dropout on the attention's and the MLP's outputs before each is
	// added to the residual stream (training only).
	ResidPdrop float64 `json:"resid_pdrop"`
	// EmbdPdrop is kept for config.json; transformers' Phi3Model does not apply it.
	EmbdPdrop float64 `json:"embd_pdrop"`
	// SlidingWindow is every layer's sliding window; nil is full attention.
	SlidingWindow *int64 `json:"sliding_window"`
}

// DefaultPhi3Config returns Phi3Config()'s defaults (Phi-3 mini 4k: 32064 tokens, 32
// layers of width 3072, 32 heads, 4096 positions, BOS 1, EOS and padding 32000).
func DefaultPhi3Config() Phi3Config {
	c := Phi3Config{LlamaFamilyConfig: llamaFamilyDefaults("phi3", 32064, 8192, 4096), OriginalMaxPositionEmbeddings: 4096}
	c.HiddenSize, c.RMSNormEps = 3072, 1e-5
	bos, eos := int64(1), int64(32000)
	c.BOSTokenID, c.EOSTokenID, c.PadTokenID = &bos, TokenIDs{eos}, &eos
	c.RopeParameters.PartialRotaryFactor = 1
	return c
}

// ParsePhi3Config reads a Phi-3 config.json in either form transformers writes: v5
// (rope_parameters) or v4 (rope_theta, rope_scaling with its type under "type",
// partial_rotary_factor at the top level).
func ParsePhi3Config(raw []byte) (Phi3Config, error) {
	c := DefaultPhi3Config()
	rope, err := parseConfigJSON(raw, &c, &c.ModelType, &c.MaxPositionEmbeddings)
	if err != nil {
		return Phi3Config{}, err
	}
	var top struct {
		PartialRotaryFactor *float64 `json:"partial_rotary_factor"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		return Phi3Config{}, fmt.Errorf("models: %s: partial_rotary_factor: %w", ConfigFile, err)
	}
	if rope.PartialRotaryFactor == 0 && top.PartialRotaryFactor != nil {
		rope.PartialRotaryFactor = *top.PartialRotaryFactor
	}
	c.RopeParameters, c.DType = rope, dtypeField(raw)
	return withDefaults(c), nil
}

// fillDefaults derives what Phi3Config.__post_init__ and convert_rope_params_to_dict
// derive: the key/value heads, head_dim, a partial rotary factor of 1, "su" and "yarn"
// read as longrope, and longrope's original context from
// original_max_position_embeddings.
func (c *Phi3Config) fillDefaults() {
	p := &c.RopeParameters
	if p.RopeType == "su" || p.RopeType == RopeYarn {
		p.RopeType = RopeLongrope
	}
	c.LlamaFamilyConfig.fillDefaults()
	if p.PartialRotaryFactor == 0 {
		p.PartialRotaryFactor = 1
	}
	if p.RopeType == RopeLongrope {
		p.OriginalMaxPositionEmbeddings = c.OriginalMaxPositionEmbeddings
	}
}

// Phi3ForCausalLM is transformers' Phi3ForCausalLM: LlamaForCausalLM's layout with the
// queries, keys and values from one projection per layer, "self_attn.qkv_proj" (then
// "self_attn.o_proj"), the MLP's gate and up projections fused in "mlp.gate_up_proj"
// (then "mlp.down_proj"), no biases, dropout on each residual branch, rotary
// embeddings on the first partial_rotary_factor of each head (LongRoPE scaling
// optional), and an optional sliding window on every layer. LoRA targets the fused
// projections by their names ("qkv_proj", "gate_up_proj"), as PEFT does.
type Phi3ForCausalLM struct {
	nn.Base
	Config Phi3Config
	Model  *DecoderModel[*Phi3DecoderLayer]
	LMHead *nn.Linear
	decoderLM[*Phi3DecoderLayer]
}

// Phi3Attention is transformers' Phi3Attention: Attention whose queries, keys and
// values are the three parts of one projection, "qkv_proj" ([heads + 2·kv_heads]·
// head_dim outputs, in that order).
type Phi3Attention struct {
	Attention
	QKVProj *nn.Linear
}

// Project returns x's queries, keys and values, the parts of qkv_proj(x).
func (a *Phi3Attention) Project(x *torch.Tensor) (q, k, v *torch.Tensor) {
	qkv := a.QKVProj.Forward(x)
	nq, nkv := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	return qkv.Narrow(-1, 0, nq), qkv.Narrow(-1, nq, nkv), qkv.Narrow(-1, nq+nkv, nkv)
}

// Phi3MLP is transformers' Phi3MLP: down_proj(up · act(gate)), gate and up the two
// halves of "gate_up_proj".
type Phi3MLP struct {
	nn.Base
	GateUpProj, DownProj *nn.Linear
	act                  func(*torch.Tensor) *torch.Tensor
}

// Forward applies the block to x [..., hidden].
func (m *Phi3MLP) Forward(x *torch.Tensor) *torch.Tensor {
	gateUp := m.GateUpProj.Forward(x)
	n := gateUp.Size(-1) / 2
	return m.DownProj.Forward(gateUp.Narrow(-1, n, n).Mul(m.act(gateUp.Narrow(-1, 0, n))))
}

// Phi3DecoderLayer is transformers' Phi3DecoderLayer: Llama's layer with dropout
// (resid_pdrop) on the attention's and the MLP's outputs before each is added to its
// input.
type Phi3DecoderLayer struct {
	nn.Base
	SelfAttn               *Phi3Attention
	MLP                    *Phi3MLP
	InputLayernorm         *RMSNorm
	PostAttentionLayernorm *RMSNorm
	ResidPdrop             float64
}

func (l *Phi3DecoderLayer) forward(x *torch.Tensor, in layerInput) *torch.Tensor {
	a := l.SelfAttn
	q, k, v := a.Project(l.InputLayernorm.Forward(x))
	x = x.Add(l.residDropout(a.Attend(a.SplitHeads(q), a.SplitHeads(k), a.SplitHeads(v), in)))
	return x.Add(l.residDropout(l.MLP.Forward(l.PostAttentionLayernorm.Forward(x))))
}

// residDropout is resid_attn_dropout and resid_mlp_dropout.
func (l *Phi3DecoderLayer) residDropout(x *torch.Tensor) *torch.Tensor {
	if l.ResidPdrop == 0 || !l.Training() {
		return x
	}
	return torch.Dropout(x, l.ResidPdrop, true)
}

func (l *Phi3DecoderLayer) window() int64 { return l.SelfAttn.Window }

// NewPhi3ForCausalLM returns Phi3ForCausalLM(config) initialised as transformers does,
// in float32 on the CPU; a config out of range is an error naming the field.
func NewPhi3ForCausalLM(c Phi3Config) (*Phi3ForCausalLM, error) {
	const cfg = "Phi3Config"
	m := &Phi3ForCausalLM{Config: withDefaults(c)}
	c = m.Config
	if err := c.checkLayers(cfg); err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	if t := c.RopeParameters.RopeType; t != RopeDefault && t != RopeLongrope {
		return nil, fmt.Errorf("models: %s: rope_parameters.rope_type %q is not supported by phi3 (%s, %s)", cfg, t, RopeDefault, RopeLongrope)
	}
	if err := checkProbability(cfg, probability{"resid_pdrop", c.ResidPdrop},
		probability{"embd_pdrop", c.EmbdPdrop}); err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	window, err := c.slidingWindow(cfg, c.SlidingWindow)
	if err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	s := c.sizes()
	s.partialRotary = true
	m.decoderLM, err = buildDecoder(&m.Base, cfg, s, c.TieWordEmbeddings, func(i int) *Phi3DecoderLayer {
		l := &Phi3DecoderLayer{ResidPdrop: c.ResidPdrop}
		a := &Phi3Attention{Attention: Attention{Heads: s.heads, KVHeads: s.kvHeads, HeadDim: s.headDim,
			Scale: 1 / math.Sqrt(float64(s.headDim)), Dropout: s.attnDropout, Window: window, Layer: i}}
		a.OProj = nn.Register(&a.Base, "o_proj", newLinear(s.heads*s.headDim, s.hidden, false, s.initStd))
		a.QKVProj = nn.Register(&a.Base, "qkv_proj", newLinear(s.hidden, (s.heads+2*s.kvHeads)*s.headDim, false, s.initStd))
		l.SelfAttn = nn.Register(&l.Base, "self_attn", a)
		mlp := &Phi3MLP{}
		mlp.act, _ = decoderActivation(s.act)
		mlp.GateUpProj = nn.Register(&mlp.Base, "gate_up_proj", newLinear(s.hidden, 2*s.intermediate, false, s.initStd))
		mlp.DownProj = nn.Register(&mlp.Base, "down_proj", newLinear(s.intermediate, s.hidden, false, s.initStd))
		l.MLP = nn.Register(&l.Base, "mlp", mlp)
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
	RegisterArchitecture(Architecture{ModelType: "phi3", Class: "Phi3ForCausalLM", New: fromJSON(ParsePhi3Config, NewPhi3ForCausalLM), Rename: decoderCheckpointKey})
}

// InvalidatesCache reports, as Phi3ForCausalLM.prepare_inputs_for_generation decides,
// that generation must drop its KV cache and recompute every position: when the
// sequence reaches past original_max_position_embeddings while the cache does not, the
// cached keys were rotated with LongRoPE's short factors and the sequence now takes
// the long ones (CacheInvalidator). transformers decides so whatever the rope type.
func (m *Phi3ForCausalLM) InvalidatesCache(cached, length int64) bool {
	o := m.Config.OriginalMaxPositionEmbeddings
	return length > o && cached <= o
}

// PretrainedConfig returns the config as save_pretrained writes it (the v5 form), with
// model_type and architectures set.
func (m *Phi3ForCausalLM) PretrainedConfig() any {
	return pretrained(m.Config, "phi3", "Phi3ForCausalLM")
}
