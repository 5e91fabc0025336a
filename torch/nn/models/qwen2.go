package models

import (
	"fmt"

	"github.com/gotrain/gotrain/torch/nn"
)

// The attention kinds of config.json's layer_types (transformers 5).
const (
	FullAttention    = "full_attention"
	SlidingAttention = "sliding_attention"
)

// Qwen2Config is transformers' Qwen2Config, with the keys of its config.json (the v5
// form; ParseQwen2Config reads the v4 form too). Start from DefaultQwen2Config and
// change what differs.
type Qwen2Config struct {
	VocabSize         int64 `json:"vocab_size"`
	HiddenSize        int64 `json:"hidden_size"`
	IntermediateSize  int64 `json:"intermediate_size"`
	NumHiddenLayers   int64 `json:"num_hidden_layers"`
	NumAttentionHeads int64 `json:"num_attention_heads"`
	// NumKeyValueHeads is the number of key/value heads; 0 means num_attention_heads.
	NumKeyValueHeads int64 `json:"num_key_value_heads"`
	// HeadDim is each head's width; 0 (Qwen2Config has no such key) means
	// hidden_size / num_attention_heads.
	HeadDim               int64          `json:"head_dim,omitempty"`
	HiddenAct             string         `json:"hidden_act"`
	MaxPositionEmbeddings int64          `json:"max_position_embeddings"`
	InitializerRange      float64        `json:"initializer_range"`
	RMSNormEps            float64        `json:"rms_norm_eps"`
	TieWordEmbeddings     bool           `json:"tie_word_embeddings"`
	AttentionDropout      float64        `json:"attention_dropout"`
	RopeParameters        RopeParameters `json:"rope_parameters"`
	// UseSlidingWindow enables SlidingWindow for the layers LayerTypes marks
	// sliding_attention; without it no layer has a window, as in transformers.
	UseSlidingWindow bool   `json:"use_sliding_window"`
	SlidingWindow    *int64 `json:"sliding_window"`
	// MaxWindowLayers: when LayerTypes is absent, the layers from this index on slide
	// (transformers' rule).
	MaxWindowLayers int64 `json:"max_window_layers"`
	// LayerTypes gives each layer's attention, FullAttention or SlidingAttention; nil
	// means derived from UseSlidingWindow and MaxWindowLayers.
	LayerTypes    []string `json:"layer_types,omitempty"`
	PadTokenID    *int64   `json:"pad_token_id"`
	BOSTokenID    *int64   `json:"bos_token_id"`
	EOSTokenID    TokenIDs `json:"eos_token_id"`
	DType         string   `json:"dtype,omitempty"`
	ModelType     string   `json:"model_type"`
	Architectures []string `json:"architectures,omitempty"`
}

// DefaultQwen2Config returns Qwen2Config()'s defaults (151936 tokens, 32 layers of
// width 4096, 32 heads, 32768 positions, no sliding window, no BOS or EOS).
func DefaultQwen2Config() Qwen2Config {
	window := int64(4096)
	return Qwen2Config{
		VocabSize: 151936, HiddenSize: 4096, IntermediateSize: 22016, NumHiddenLayers: 32,
		NumAttentionHeads: 32, NumKeyValueHeads: 32, HiddenAct: "silu", MaxPositionEmbeddings: 32768,
		InitializerRange: 0.02, RMSNormEps: 1e-6, SlidingWindow: &window, MaxWindowLayers: 28,
		RopeParameters: RopeParameters{RopeType: RopeDefault, RopeTheta: defaultRopeTheta},
		ModelType:      "qwen2",
	}
}

// ParseQwen2Config reads a Qwen2 config.json in either form transformers writes (see
// ParseLlamaConfig).
func ParseQwen2Config(raw []byte) (Qwen2Config, error) {
	c := DefaultQwen2Config()
	rope, err := parseConfigJSON(raw, &c, func() int64 { return c.MaxPositionEmbeddings })
	if err != nil {
		return Qwen2Config{}, err
	}
	if c.ModelType != "qwen2" {
		return Qwen2Config{}, fmt.Errorf("models: %s: model_type %q is not qwen2", ConfigFile, c.ModelType)
	}
	c.RopeParameters, c.DType = rope, dtypeField(raw)
	return c.withDefaults(), nil
}

// withDefaults derives what Qwen2Config.__post_init__ derives: the key/value heads,
// head_dim, and layer_types (the layers from max_window_layers on slide when
// use_sliding_window is set).
func (c Qwen2Config) withDefaults() Qwen2Config {
	if c.NumKeyValueHeads == 0 {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	if c.HeadDim == 0 && c.NumAttentionHeads > 0 && c.HiddenSize%c.NumAttentionHeads == 0 {
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
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
	if c.LayerTypes == nil && c.NumHiddenLayers > 0 && c.NumHiddenLayers <= maxLayers {
		c.LayerTypes = make([]string, c.NumHiddenLayers)
		for i := range c.LayerTypes {
			c.LayerTypes[i] = FullAttention
			if c.UseSlidingWindow && c.SlidingWindow != nil && int64(i) >= c.MaxWindowLayers {
				c.LayerTypes[i] = SlidingAttention
			}
		}
	}
	return c
}

// windows returns each layer's sliding window (0: full attention).
func (c Qwen2Config) windows() ([]int64, error) {
	const cfg = "Qwen2Config"
	if int64(len(c.LayerTypes)) != c.NumHiddenLayers {
		return nil, fmt.Errorf("%s: layer_types has %d entries for %d layers (num_hidden_layers)", cfg, len(c.LayerTypes), c.NumHiddenLayers)
	}
	w := make([]int64, len(c.LayerTypes))
	for i, t := range c.LayerTypes {
		switch t {
		case FullAttention:
		case SlidingAttention:
			if !c.UseSlidingWindow || c.SlidingWindow == nil {
				return nil, fmt.Errorf("%s: layer_types[%d] is %q but the sliding window is off (use_sliding_window false or sliding_window null)", cfg, i, t)
			}
			if err := checkSizes(cfg, configSize{"sliding_window", *c.SlidingWindow, 1, maxPositions}); err != nil {
				return nil, err
			}
			w[i] = *c.SlidingWindow
		default:
			return nil, fmt.Errorf("%s: layer_types[%d] %q is not supported (%s, %s)", cfg, i, t, FullAttention, SlidingAttention)
		}
	}
	return w, nil
}

func (c Qwen2Config) spec() (decoderSpec, error) {
	const cfg = "Qwen2Config"
	if err := checkSizes(cfg, configSize{"num_attention_heads", c.NumAttentionHeads, 1, maxHeads}); err != nil {
		return decoderSpec{}, err
	}
	if err := checkSizes(cfg, configSize{"num_hidden_layers", c.NumHiddenLayers, 1, maxLayers}); err != nil {
		return decoderSpec{}, err
	}
	if c.HeadDim == 0 {
		return decoderSpec{}, fmt.Errorf("%s: hidden_size %d is not divisible by num_attention_heads %d (and no head_dim is given)", cfg, c.HiddenSize, c.NumAttentionHeads)
	}
	w, err := c.windows()
	if err != nil {
		return decoderSpec{}, err
	}
	return decoderSpec{
		vocab: c.VocabSize, hidden: c.HiddenSize, intermediate: c.IntermediateSize, layers: c.NumHiddenLayers,
		heads: c.NumAttentionHeads, kvHeads: c.NumKeyValueHeads, headDim: c.HeadDim, maxPos: c.MaxPositionEmbeddings,
		eps: c.RMSNormEps, initStd: c.InitializerRange, attnDropout: c.AttentionDropout, act: c.HiddenAct,
		qkvBias: true, tie: c.TieWordEmbeddings, padIdx: c.PadTokenID, rope: c.RopeParameters, windows: w,
	}, nil
}

// Qwen2ForCausalLM is transformers' Qwen2ForCausalLM: LlamaForCausalLM's modules and
// names, with biases on q_proj, k_proj and v_proj (none on o_proj or the MLP), and a
// sliding window on the layers the config marks sliding_attention.
type Qwen2ForCausalLM struct {
	nn.Base
	Config Qwen2Config
	Model  *DecoderModel
	LMHead *nn.Linear
	decoderLM
}

// NewQwen2ForCausalLM returns Qwen2ForCausalLM(config) initialised as transformers
// does, in float32 on the CPU; a config out of range is an error naming the field.
func NewQwen2ForCausalLM(c Qwen2Config) (*Qwen2ForCausalLM, error) {
	c = c.withDefaults()
	s, err := c.spec()
	if err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	m := &Qwen2ForCausalLM{Config: c}
	if m.decoderLM, err = buildDecoder(&m.Base, "Qwen2Config", s); err != nil {
		return nil, err
	}
	m.Model, m.LMHead = m.model, m.lmHead
	return m, nil
}

func init() {
	RegisterArchitecture(Architecture{ModelType: "qwen2", Class: "Qwen2ForCausalLM", New: newQwen2FromJSON, Rename: decoderCheckpointKey})
}

// newQwen2FromJSON builds a Qwen2ForCausalLM from config.json's bytes (the registry's
// constructor).
func newQwen2FromJSON(raw []byte) (CausalLM, error) {
	c, err := ParseQwen2Config(raw)
	if err != nil {
		return nil, err
	}
	return NewQwen2ForCausalLM(c)
}

// DecoderConfig returns the vocabulary, max_position_embeddings and the special tokens
// (CausalLM).
func (m *Qwen2ForCausalLM) DecoderConfig() DecoderConfig {
	return decoderConfig(m.Config.VocabSize, m.Config.MaxPositionEmbeddings, m.Config.BOSTokenID, m.Config.EOSTokenID)
}

// PretrainedConfig returns the config as save_pretrained writes it (the v5 form, with
// layer_types), with model_type and architectures set.
func (m *Qwen2ForCausalLM) PretrainedConfig() any {
	c := m.Config
	c.ModelType, c.Architectures = "qwen2", []string{"Qwen2ForCausalLM"}
	return c
}
