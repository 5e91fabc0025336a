package models

import (
	"fmt"
	"slices"

	"github.com/gotrain/gotrain/torch/nn"
)

// MistralConfig is transformers' MistralConfig, with the keys of its config.json (the
// v5 form; ParseMistralConfig reads the v4 form too): those of LlamaFamilyConfig and
// the sliding window. Start from DefaultMistralConfig and change what differs.
type MistralConfig struct {
	LlamaFamilyConfig
	// SlidingWindow is every layer's sliding window; nil (null in config.json, as in
	// recent releases) is full attention.
	SlidingWindow *int64 `json:"sliding_window"`
}

// DefaultMistralConfig returns MistralConfig()'s defaults (Mistral 7B: 32000 tokens,
// 32 layers of width 4096, 32 heads over 8 key/value heads, a 4096-token sliding
// window).
func DefaultMistralConfig() MistralConfig {
	c := MistralConfig{LlamaFamilyConfig: llamaFamilyDefaults("mistral", 32000, 14336, 4096*32)}
	bos, window := int64(1), int64(4096)
	c.NumKeyValueHeads, c.BOSTokenID, c.EOSTokenID, c.SlidingWindow = 8, &bos, TokenIDs{2}, &window
	return c
}

// ParseMistralConfig reads a Mistral config.json in either form transformers writes
// (see ParseLlamaConfig).
func ParseMistralConfig(raw []byte) (MistralConfig, error) {
	return parseLlamaFamily(raw, DefaultMistralConfig())
}

// MistralForCausalLM is transformers' MistralForCausalLM: LlamaForCausalLM's modules
// and names (its layers are LlamaDecoderLayers, as Mistral's modular file inherits
// them), no biases, and the config's sliding window on every layer.
type MistralForCausalLM struct {
	nn.Base
	Config MistralConfig
	Model  *DecoderModel[*LlamaDecoderLayer]
	LMHead *nn.Linear
	decoderLM[*LlamaDecoderLayer]
}

// NewMistralForCausalLM returns MistralForCausalLM(config) initialised as transformers
// does, in float32 on the CPU; a config out of range is an error naming the field.
func NewMistralForCausalLM(c MistralConfig) (*MistralForCausalLM, error) {
	const cfg = "MistralConfig"
	m := &MistralForCausalLM{Config: withDefaults(c)}
	w, err := m.Config.slidingWindow(cfg, m.Config.SlidingWindow)
	if err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	windows := slices.Repeat([]int64{w}, int(m.Config.NumHiddenLayers))
	if m.decoderLM, err = buildLlamaLike(&m.Base, cfg, &m.Config.LlamaFamilyConfig, false, false, false, windows); err != nil {
		return nil, err
	}
	m.Model, m.LMHead = m.model, m.lmHead
	return m, nil
}

func init() {
	RegisterArchitecture(Architecture{ModelType: "mistral", Class: "MistralForCausalLM", New: fromJSON(ParseMistralConfig, NewMistralForCausalLM), Rename: decoderCheckpointKey})
}

// PretrainedConfig returns the config as save_pretrained writes it (the v5 form), with
// model_type and architectures set.
func (m *MistralForCausalLM) PretrainedConfig() any {
	return pretrained(m.Config, "mistral", "MistralForCausalLM")
}
