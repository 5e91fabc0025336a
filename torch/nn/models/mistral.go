package models

import (
	"fmt"

	"github.com/gotrain/gotrain/torch/nn"
)

// MistralConfig is transformers' MistralConfig, with the keys of its config.json (the
// v5 form; ParseMistralConfig reads the v4 form too). Start from DefaultMistralConfig
// and change what differs.
type MistralConfig struct {
	VocabSize         int64 `json:"vocab_size"`
	HiddenSize        int64 `json:"hidden_size"`
	IntermediateSize  int64 `json:"intermediate_size"`
	NumHiddenLayers   int64 `json:"num_hidden_layers"`
	NumAttentionHeads int64 `json:"num_attention_heads"`
	// NumKeyValueHeads is the number of key/value heads; 0 means num_attention_heads.
	NumKeyValueHeads int64 `json:"num_key_value_heads"`
	// HeadDim is each head's width; 0 means hidden_size / num_attention_heads.
	HeadDim               int64          `json:"head_dim"`
	HiddenAct             string         `json:"hidden_act"`
	MaxPositionEmbeddings int64          `json:"max_position_embeddings"`
	InitializerRange      float64        `json:"initializer_range"`
	RMSNormEps            float64        `json:"rms_norm_eps"`
	TieWordEmbeddings     bool           `json:"tie_word_embeddings"`
	AttentionDropout      float64        `json:"attention_dropout"`
	RopeParameters        RopeParameters `json:"rope_parameters"`
	// SlidingWindow is every layer's sliding window; nil (null in config.json, as in
	// recent releases) is full attention.
	SlidingWindow *int64   `json:"sliding_window"`
	PadTokenID    *int64   `json:"pad_token_id"`
	BOSTokenID    *int64   `json:"bos_token_id"`
	EOSTokenID    TokenIDs `json:"eos_token_id"`
	DType         string   `json:"dtype,omitempty"`
	ModelType     string   `json:"model_type"`
	Architectures []string `json:"architectures,omitempty"`
}

// DefaultMistralConfig returns MistralConfig()'s defaults (Mistral 7B: 32000 tokens,
// 32 layers of width 4096, 32 heads over 8 key/value heads, a 4096-token sliding
// window).
func DefaultMistralConfig() MistralConfig {
	bos, window := int64(1), int64(4096)
	return MistralConfig{
		VocabSize: 32000, HiddenSize: 4096, IntermediateSize: 14336, NumHiddenLayers: 32,
		NumAttentionHeads: 32, NumKeyValueHeads: 8, HiddenAct: "silu", MaxPositionEmbeddings: 4096 * 32,
		InitializerRange: 0.02, RMSNormEps: 1e-6, BOSTokenID: &bos, EOSTokenID: TokenIDs{2},
		SlidingWindow:  &window,
		RopeParameters: RopeParameters{RopeType: RopeDefault, RopeTheta: defaultRopeTheta},
		ModelType:      "mistral",
	}
}

// ParseMistralConfig reads a Mistral config.json in either form transformers writes
// (see ParseLlamaConfig).
func ParseMistralConfig(raw []byte) (MistralConfig, error) {
	c := DefaultMistralConfig()
	rope, err := parseConfigJSON(raw, &c, func() int64 { return c.MaxPositionEmbeddings })
	if err != nil {
		return MistralConfig{}, err
	}
	if c.ModelType != "mistral" {
		return MistralConfig{}, fmt.Errorf("models: %s: model_type %q is not mistral", ConfigFile, c.ModelType)
	}
	c.RopeParameters, c.DType = rope, dtypeField(raw)
	return c.withDefaults(), nil
}

func (c MistralConfig) withDefaults() MistralConfig {
	if c.HeadDim == 0 && c.NumAttentionHeads > 0 && c.HiddenSize%c.NumAttentionHeads == 0 {
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

func (c MistralConfig) spec() (decoderSpec, error) {
	const cfg = "MistralConfig"
	if err := checkSizes(cfg, configSize{"num_attention_heads", c.NumAttentionHeads, 1, maxHeads}); err != nil {
		return decoderSpec{}, err
	}
	if err := checkSizes(cfg, configSize{"num_hidden_layers", c.NumHiddenLayers, 1, maxLayers}); err != nil {
		return decoderSpec{}, err
	}
	if c.HeadDim == 0 {
		return decoderSpec{}, fmt.Errorf("%s: hidden_size %d is not divisible by num_attention_heads %d (and no head_dim is given)", cfg, c.HiddenSize, c.NumAttentionHeads)
	}
	var w []int64
	if c.SlidingWindow != nil {
		if err := checkSizes(cfg, configSize{"sliding_window", *c.SlidingWindow, 1, maxPositions}); err != nil {
			return decoderSpec{}, err
		}
		w = make([]int64, c.NumHiddenLayers)
		for i := range w {
			w[i] = *c.SlidingWindow
		}
	}
	return decoderSpec{
		vocab: c.VocabSize, hidden: c.HiddenSize, intermediate: c.IntermediateSize, layers: c.NumHiddenLayers,
		heads: c.NumAttentionHeads, kvHeads: c.NumKeyValueHeads, headDim: c.HeadDim, maxPos: c.MaxPositionEmbeddings,
		eps: c.RMSNormEps, initStd: c.InitializerRange, attnDropout: c.AttentionDropout, act: c.HiddenAct,
		tie: c.TieWordEmbeddings, padIdx: c.PadTokenID, rope: c.RopeParameters, windows: w,
	}, nil
}

// MistralForCausalLM is transformers' MistralForCausalLM: LlamaForCausalLM's modules
// and names, no biases, and the config's sliding window on every layer.
type MistralForCausalLM struct {
	nn.Base
	Config MistralConfig
	Model  *DecoderModel
	LMHead *nn.Linear
	decoderLM
}

// NewMistralForCausalLM returns MistralForCausalLM(config) initialised as transformers
// does, in float32 on the CPU; a config out of range is an error naming the field.
func NewMistralForCausalLM(c MistralConfig) (*MistralForCausalLM, error) {
	c = c.withDefaults()
	s, err := c.spec()
	if err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	m := &MistralForCausalLM{Config: c}
	if m.decoderLM, err = buildDecoder(&m.Base, "MistralConfig", s); err != nil {
		return nil, err
	}
	m.Model, m.LMHead = m.model, m.lmHead
	return m, nil
}

func init() {
	RegisterArchitecture(Architecture{ModelType: "mistral", Class: "MistralForCausalLM", New: newMistralFromJSON, Rename: decoderCheckpointKey})
}

// newMistralFromJSON builds a MistralForCausalLM from config.json's bytes (the
// registry's constructor).
func newMistralFromJSON(raw []byte) (CausalLM, error) {
	c, err := ParseMistralConfig(raw)
	if err != nil {
		return nil, err
	}
	return NewMistralForCausalLM(c)
}

// DecoderConfig returns the vocabulary, max_position_embeddings and the special tokens
// (CausalLM).
func (m *MistralForCausalLM) DecoderConfig() DecoderConfig {
	return decoderConfig(m.Config.VocabSize, m.Config.MaxPositionEmbeddings, m.Config.BOSTokenID, m.Config.EOSTokenID)
}

// PretrainedConfig returns the config as save_pretrained writes it (the v5 form), with
// model_type and architectures set.
func (m *MistralForCausalLM) PretrainedConfig() any {
	c := m.Config
	c.ModelType, c.Architectures = "mistral", []string{"MistralForCausalLM"}
	return c
}
