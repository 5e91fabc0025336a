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
// form; ParseQwen2Config reads the v4 form too): those of LlamaFamilyConfig and the
// sliding windows. Start from DefaultQwen2Config and change what differs.
type Qwen2Config struct {
	LlamaFamilyConfig
	// UseSlidingWindow enables SlidingWindow for the layers LayerTypes marks
	// sliding_attention; without it no layer has a window, as in transformers.
	UseSlidingWindow bool   `json:"use_sliding_window"`
	SlidingWindow    *int64 `json:"sliding_window"`
	// MaxWindowLayers: when LayerTypes is absent, the layers from this index on slide
	// (transformers' rule).
	MaxWindowLayers int64 `json:"max_window_layers"`
	// LayerTypes gives each layer's attention, FullAttention or SlidingAttention; nil
	// means derived from UseSlidingWindow and MaxWindowLayers.
	LayerTypes []string `json:"layer_types,omitempty"`
}

// DefaultQwen2Config returns Qwen2Config()'s defaults (151936 tokens, 32 layers of
// width 4096, 32 heads, 32768 positions, no sliding window, no BOS or EOS).
func DefaultQwen2Config() Qwen2Config {
	c := Qwen2Config{LlamaFamilyConfig: llamaFamilyDefaults("qwen2", 151936, 22016, 32768)}
	window := int64(4096)
	c.NumKeyValueHeads, c.SlidingWindow, c.MaxWindowLayers = 32, &window, 28
	return c
}

// ParseQwen2Config reads a Qwen2 config.json in either form transformers writes (see
// ParseLlamaConfig).
func ParseQwen2Config(raw []byte) (Qwen2Config, error) {
	return parseLlamaFamily(raw, DefaultQwen2Config())
}

// fillDefaults derives what Qwen2Config.__post_init__ derives: the key/value heads,
// head_dim, and layer_types (the layers from max_window_layers on slide when
// use_sliding_window is set).
func (c *Qwen2Config) fillDefaults() {
	c.LlamaFamilyConfig.fillDefaults()
	if c.LayerTypes == nil && c.NumHiddenLayers > 0 && c.NumHiddenLayers <= maxLayers {
		c.LayerTypes = make([]string, c.NumHiddenLayers)
		for i := range c.LayerTypes {
			c.LayerTypes[i] = FullAttention
			if c.UseSlidingWindow && c.SlidingWindow != nil && int64(i) >= c.MaxWindowLayers {
				c.LayerTypes[i] = SlidingAttention
			}
		}
	}
}

// windows returns each layer's sliding window (0: full attention); cfg names the
// config in errors.
func (c Qwen2Config) windows(cfg string) ([]int64, error) {
	if err := c.checkLayers(cfg); err != nil {
		return nil, err
	}
	window := c.SlidingWindow
	if !c.UseSlidingWindow {
		window = nil
	}
	return layerWindows(cfg, c.NumHiddenLayers, c.LayerTypes, window,
		"the sliding window is off (use_sliding_window false or sliding_window null)")
}

// Qwen2ForCausalLM is transformers' Qwen2ForCausalLM: LlamaForCausalLM's modules and
// names (its layers are LlamaDecoderLayers, as Qwen2's modular file inherits them),
// with biases on q_proj, k_proj and v_proj (none on o_proj or the MLP), and a sliding
// window on the layers the config marks sliding_attention.
type Qwen2ForCausalLM struct {
	nn.Base
	Config Qwen2Config
	Model  *DecoderModel[*LlamaDecoderLayer]
	LMHead *nn.Linear
	decoderLM[*LlamaDecoderLayer]
}

// NewQwen2ForCausalLM returns Qwen2ForCausalLM(config) initialised as transformers
// does, in float32 on the CPU; a config out of range is an error naming the field.
func NewQwen2ForCausalLM(c Qwen2Config) (*Qwen2ForCausalLM, error) {
	const cfg = "Qwen2Config"
	m := &Qwen2ForCausalLM{Config: withDefaults(c)}
	w, err := m.Config.windows(cfg)
	if err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	if m.decoderLM, err = buildLlamaLike(&m.Base, cfg, &m.Config.LlamaFamilyConfig, true, false, false, w); err != nil {
		return nil, err
	}
	m.Model, m.LMHead = m.model, m.lmHead
	return m, nil
}

func init() {
	RegisterArchitecture(Architecture{ModelType: "qwen2", Class: "Qwen2ForCausalLM", New: fromJSON(ParseQwen2Config, NewQwen2ForCausalLM), Rename: decoderCheckpointKey})
}

// PretrainedConfig returns the config as save_pretrained writes it (the v5 form, with
// layer_types), with model_type and architectures set.
func (m *Qwen2ForCausalLM) PretrainedConfig() any {
	return pretrained(m.Config, "qwen2", "Qwen2ForCausalLM")
}
