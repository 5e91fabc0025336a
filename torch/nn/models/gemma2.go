package models

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// Gemma2Config is transformers' Gemma2Config, with the keys of its config.json (the v5
// form; ParseGemma2Config reads the v4 form too). Start from DefaultGemma2Config and
// change what differs.
type Gemma2Config struct {
	VocabSize         int64 `json:"vocab_size"`
	HiddenSize        int64 `json:"hidden_size"`
	IntermediateSize  int64 `json:"intermediate_size"`
	NumHiddenLayers   int64 `json:"num_hidden_layers"`
	NumAttentionHeads int64 `json:"num_attention_heads"`
	NumKeyValueHeads  int64 `json:"num_key_value_heads"`
	HeadDim           int64 `json:"head_dim"`
	// HiddenActivation is the GeGLU's activation, the tanh GELU.
	HiddenActivation      string  `json:"hidden_activation"`
	MaxPositionEmbeddings int64   `json:"max_position_embeddings"`
	InitializerRange      float64 `json:"initializer_range"`
	RMSNormEps            float64 `json:"rms_norm_eps"`
	TieWordEmbeddings     bool    `json:"tie_word_embeddings"`
	// AttentionBias puts biases on q_proj, k_proj, v_proj and o_proj.
	AttentionBias    bool    `json:"attention_bias"`
	AttentionDropout float64 `json:"attention_dropout"`
	// QueryPreAttnScalar s scales the attention scores by s^-0.5 (not head_dim^-0.5).
	QueryPreAttnScalar float64 `json:"query_pre_attn_scalar"`
	// SlidingWindow is the window of the layers LayerTypes marks sliding_attention.
	SlidingWindow *int64 `json:"sliding_window"`
	// LayerTypes gives each layer's attention; without it, the layers alternate,
	// sliding first.
	LayerTypes     []string       `json:"layer_types"`
	RopeParameters RopeParameters `json:"rope_parameters"`
	// FinalLogitSoftcapping and AttnLogitSoftcapping soft-cap the logits and the
	// attention scores (nil: none).
	FinalLogitSoftcapping *float64 `json:"final_logit_softcapping"`
	AttnLogitSoftcapping  *float64 `json:"attn_logit_softcapping"`
	// UseBidirectionalAttention (encoders built on Gemma) is not supported.
	UseBidirectionalAttention bool     `json:"use_bidirectional_attention,omitempty"`
	PadTokenID                *int64   `json:"pad_token_id"`
	BOSTokenID                *int64   `json:"bos_token_id"`
	EOSTokenID                TokenIDs `json:"eos_token_id"`
	DType                     string   `json:"dtype,omitempty"`
	ModelType                 string   `json:"model_type"`
	Architectures             []string `json:"architectures,omitempty"`
}

// DefaultGemma2Config returns Gemma2Config()'s defaults (256000 tokens, 26 layers of
// width 2304, 8 heads of 256 over 4 key/value heads, 8192 positions, a 4096-token window
// on every other layer, soft-capping at 50 (attention) and 30 (logits), tied).
func DefaultGemma2Config() Gemma2Config {
	pad, bos, window := int64(0), int64(2), int64(4096)
	final, attn := 30.0, 50.0
	return Gemma2Config{
		VocabSize: 256000, HiddenSize: 2304, IntermediateSize: 9216, NumHiddenLayers: 26,
		NumAttentionHeads: 8, NumKeyValueHeads: 4, HeadDim: 256, HiddenActivation: "gelu_pytorch_tanh",
		MaxPositionEmbeddings: 8192, InitializerRange: 0.02, RMSNormEps: 1e-6, TieWordEmbeddings: true,
		QueryPreAttnScalar: 256, SlidingWindow: &window,
		RopeParameters:        RopeParameters{RopeType: RopeDefault, RopeTheta: defaultRopeTheta},
		FinalLogitSoftcapping: &final, AttnLogitSoftcapping: &attn,
		PadTokenID: &pad, BOSTokenID: &bos, EOSTokenID: TokenIDs{1}, ModelType: "gemma2",
	}
}

// ParseGemma2Config reads a Gemma 2 config.json in either form transformers writes (see
// ParseLlamaConfig).
func ParseGemma2Config(raw []byte) (Gemma2Config, error) {
	c := DefaultGemma2Config()
	rope, err := parseConfigJSON(raw, &c, &c.ModelType, &c.MaxPositionEmbeddings)
	if err != nil {
		return c, err
	}
	c.RopeParameters, c.DType = rope, dtypeField(raw)
	if c.LayerTypes == nil && c.NumHiddenLayers > 0 && c.NumHiddenLayers <= maxLayers {
		c.LayerTypes = make([]string, c.NumHiddenLayers)
		for i := range c.LayerTypes {
			c.LayerTypes[i] = []string{SlidingAttention, FullAttention}[i%2]
		}
	}
	return c, nil
}

// Gemma2ForCausalLM is transformers' Gemma2ForCausalLM: "model" (embed_tokens, scaled by
// √hidden_size; layers; the final norm) and "lm_head", tied by default, whose logits are
// soft-capped (final_logit_softcapping). Its norms are GemmaRMSNorms ((1 + weight), in
// float32), four per layer; its MLP is a GeGLU with the tanh GELU; its attention scores
// are scaled by query_pre_attn_scalar^-0.5 and soft-capped (attn_logit_softcapping,
// computed as transformers' eager attention, the only one it allows), and every other
// layer slides.
type Gemma2ForCausalLM struct {
	nn.Base
	Config Gemma2Config
	Model  *DecoderModel[*Gemma2DecoderLayer]
	LMHead *nn.Linear
	gemmaLM[*Gemma2DecoderLayer]
}

// Gemma2DecoderLayer is transformers' Gemma2DecoderLayer: the attention and the MLP each
// between a pre-norm and a post-norm, each added to its input.
type Gemma2DecoderLayer struct {
	nn.Base
	SelfAttn                 *Attention
	MLP                      *GatedMLP
	InputLayernorm           *GemmaRMSNorm
	PostAttentionLayernorm   *GemmaRMSNorm
	PreFeedforwardLayernorm  *GemmaRMSNorm
	PostFeedforwardLayernorm *GemmaRMSNorm
}

func (l *Gemma2DecoderLayer) forward(x *torch.Tensor, in layerInput) *torch.Tensor {
	a := l.SelfAttn
	q, k, v := a.Project(l.InputLayernorm.Forward(x))
	x = x.Add(l.PostAttentionLayernorm.Forward(a.Attend(a.SplitHeads(q), a.SplitHeads(k), a.SplitHeads(v), in)))
	return x.Add(l.PostFeedforwardLayernorm.Forward(l.MLP.Forward(l.PreFeedforwardLayernorm.Forward(x))))
}

func (l *Gemma2DecoderLayer) window() int64 { return l.SelfAttn.Window }

// NewGemma2ForCausalLM returns Gemma2ForCausalLM(config) initialised as transformers
// does, in float32 on the CPU; a config out of range is an error naming the field.
func NewGemma2ForCausalLM(c Gemma2Config) (*Gemma2ForCausalLM, error) {
	const cfg = "Gemma2Config"
	s, windows, err := c.sizes(cfg, c.RopeParameters)
	if err == nil {
		_, err = softCap(cfg, "attn_logit_softcapping", c.AttnLogitSoftcapping)
	}
	if err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	m := &Gemma2ForCausalLM{Config: c}
	lm, err := buildDecoder(&m.Base, cfg, s, c.TieWordEmbeddings, func(i int) *Gemma2DecoderLayer {
		l := &Gemma2DecoderLayer{}
		a := nn.Register(&l.Base, "self_attn", newAttention(s.attention(c.AttentionBias, c.AttentionBias), i))
		a.Scale, a.Window = 1/math.Sqrt(c.QueryPreAttnScalar), windows[i]
		a.SoftCap, _ = softCap(cfg, "attn_logit_softcapping", c.AttnLogitSoftcapping)
		l.SelfAttn = a
		l.MLP = nn.Register(&l.Base, "mlp", newGatedMLP(s.hidden, s.intermediate, s.act, false, s.initStd))
		l.InputLayernorm, l.PostAttentionLayernorm, l.PreFeedforwardLayernorm, l.PostFeedforwardLayernorm = gemmaNorms(&l.Base, s)
		return l
	}, func() nn.Layer { return NewGemmaRMSNorm(s.hidden, s.eps) })
	if err != nil {
		return nil, err
	}
	m.gemmaLM = newGemmaLM(lm, c)
	m.Model, m.LMHead = lm.model, lm.lmHead
	return m, nil
}

func init() {
	RegisterArchitecture(Architecture{ModelType: "gemma2", Class: "Gemma2ForCausalLM",
		New: fromJSON(ParseGemma2Config, NewGemma2ForCausalLM), Rename: decoderCheckpointKey})
}

// sizes checks what Gemma 2 and 3 configs share beyond decoderSizes and returns their
// sizes with rope for the global layers, and each layer's sliding window.
func (c Gemma2Config) sizes(cfg string, rope RopeParameters) (decoderSizes, []int64, error) {
	if c.UseBidirectionalAttention {
		return decoderSizes{}, nil, fmt.Errorf("%s: use_bidirectional_attention is not supported", cfg)
	}
	windows, err := layerWindows(cfg, c.NumHiddenLayers, c.LayerTypes, c.SlidingWindow, "sliding_window is null")
	if err != nil {
		return decoderSizes{}, nil, err
	}
	if _, err := softCap(cfg, "final_logit_softcapping", c.FinalLogitSoftcapping); err != nil {
		return decoderSizes{}, nil, err
	}
	if !(c.QueryPreAttnScalar > 0 && !math.IsInf(c.QueryPreAttnScalar, 0)) {
		return decoderSizes{}, nil, fmt.Errorf("%s: query_pre_attn_scalar %v must be a positive number", cfg, c.QueryPreAttnScalar)
	}
	kv := c.NumKeyValueHeads
	if kv == 0 {
		kv = c.NumAttentionHeads
	}
	return decoderSizes{
		vocab: c.VocabSize, hidden: c.HiddenSize, intermediate: c.IntermediateSize, layers: c.NumHiddenLayers,
		heads: c.NumAttentionHeads, kvHeads: kv, headDim: c.HeadDim, maxPos: c.MaxPositionEmbeddings,
		eps: c.RMSNormEps, initStd: c.InitializerRange, attnDropout: c.AttentionDropout, act: c.HiddenActivation,
		padIdx: c.PadTokenID, rope: rope,
	}, windows, nil
}

// gemmaNorms registers a Gemma layer's four norms on base, in transformers' order.
func gemmaNorms(base *nn.Base, s decoderSizes) (input, postAttention, preFeedforward, postFeedforward *GemmaRMSNorm) {
	norm := func(name string) *GemmaRMSNorm { return nn.Register(base, name, NewGemmaRMSNorm(s.hidden, s.eps)) }
	return norm("input_layernorm"), norm("post_attention_layernorm"), norm("pre_feedforward_layernorm"), norm("post_feedforward_layernorm")
}

// softCap returns a soft-capping value of config field name (nil: 0, none).
func softCap(cfg, name string, v *float64) (float64, error) {
	if v == nil {
		return 0, nil
	}
	if math.IsNaN(*v) || math.IsInf(*v, 0) || *v <= 0 {
		return 0, fmt.Errorf("%s: %s %v must be a positive number or null", cfg, name, *v)
	}
	return *v, nil
}

// gemmaLM is the body Gemma2ForCausalLM and Gemma3ForCausalLM share: decoderLM with the
// embeddings scaled by √hidden_size and the logits soft-capped, and the config's
// special tokens.
type gemmaLM[L decoderLayer] struct {
	decoderLM[L]
	config Gemma2Config
}

func newGemmaLM[L decoderLayer](lm decoderLM[L], c Gemma2Config) gemmaLM[L] {
	lm.embedScale = math.Sqrt(float64(c.HiddenSize))
	lm.softCap, _ = softCap("", "", c.FinalLogitSoftcapping)
	return gemmaLM[L]{decoderLM: lm, config: c}
}

// DecoderConfig returns the vocabulary, max_position_embeddings and the special tokens
// (CausalLM).
func (m gemmaLM[L]) DecoderConfig() DecoderConfig {
	c := m.config
	return newDecoderConfig(c.VocabSize, c.MaxPositionEmbeddings, c.BOSTokenID, c.EOSTokenID)
}

func (c *Gemma2Config) setArchitecture(modelType, class string) {
	c.ModelType, c.Architectures = modelType, []string{class}
}

// PretrainedConfig returns the config as save_pretrained writes it (the v5 form, with
// layer_types), with model_type and architectures set.
func (m *Gemma2ForCausalLM) PretrainedConfig() any {
	return pretrained(m.Config, "gemma2", "Gemma2ForCausalLM")
}

// MarshalJSON writes the config as config.json holds it, the soft-capping values as
// floats (30.0, not 30): transformers' strict Gemma configs refuse an integer there.
func (c Gemma2Config) MarshalJSON() ([]byte, error) { return json.Marshal(c.configJSON()) }

// gemma2JSON is Gemma2Config with its float-only keys written as floats.
type gemma2JSON struct {
	gemma2Plain
	FinalLogitSoftcapping *PyFloat `json:"final_logit_softcapping"`
	AttnLogitSoftcapping  *PyFloat `json:"attn_logit_softcapping"`
}

// gemma2Plain is Gemma2Config without its MarshalJSON.
type gemma2Plain Gemma2Config

func (c Gemma2Config) configJSON() gemma2JSON {
	return gemma2JSON{gemma2Plain(c), (*PyFloat)(c.FinalLogitSoftcapping), (*PyFloat)(c.AttnLogitSoftcapping)}
}
