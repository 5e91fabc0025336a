package models

import "fmt"

// LlamaFamilyConfig holds the config.json keys that LlamaConfig, MistralConfig and
// Qwen2Config share, as transformers' Mistral and Qwen2 configs are Llama's with keys
// added. Each of them embeds it: its fields are theirs (c.HiddenSize), at the top level
// of config.json ("hidden_size").
type LlamaFamilyConfig struct {
	VocabSize         int64 `json:"vocab_size"`
	HiddenSize        int64 `json:"hidden_size"`
	IntermediateSize  int64 `json:"intermediate_size"`
	NumHiddenLayers   int64 `json:"num_hidden_layers"`
	NumAttentionHeads int64 `json:"num_attention_heads"`
	// NumKeyValueHeads is the number of key/value heads (grouped-query attention);
	// 0 means num_attention_heads.
	NumKeyValueHeads int64 `json:"num_key_value_heads"`
	// HeadDim is each head's width; 0 means hidden_size / num_attention_heads, and is
	// left out of config.json, as transformers would take a head_dim of 0 literally.
	HeadDim               int64          `json:"head_dim,omitempty"`
	HiddenAct             string         `json:"hidden_act"`
	MaxPositionEmbeddings int64          `json:"max_position_embeddings"`
	InitializerRange      float64        `json:"initializer_range"`
	RMSNormEps            float64        `json:"rms_norm_eps"`
	TieWordEmbeddings     bool           `json:"tie_word_embeddings"`
	AttentionDropout      float64        `json:"attention_dropout"`
	RopeParameters        RopeParameters `json:"rope_parameters"`
	PadTokenID            *int64         `json:"pad_token_id"`
	BOSTokenID            *int64         `json:"bos_token_id"`
	EOSTokenID            TokenIDs       `json:"eos_token_id"`
	// DType is the dtype the weights were saved in ("float32", "bfloat16"), read from
	// dtype or v4's torch_dtype.
	DType         string   `json:"dtype,omitempty"`
	ModelType     string   `json:"model_type"`
	Architectures []string `json:"architectures,omitempty"`
}

// llamaFamilyDefaults returns the defaults the three configs share, those of a 7B
// model (32 layers of width 4096 with 32 heads, SiLU, the default rotary embedding, no
// special tokens), with the model_type, vocabulary, MLP width and positions given.
func llamaFamilyDefaults(modelType string, vocab, intermediate, maxPos int64) LlamaFamilyConfig {
	return LlamaFamilyConfig{
		VocabSize: vocab, HiddenSize: 4096, IntermediateSize: intermediate, NumHiddenLayers: 32,
		NumAttentionHeads: 32, HiddenAct: "silu", MaxPositionEmbeddings: maxPos,
		InitializerRange: 0.02, RMSNormEps: 1e-6,
		RopeParameters: RopeParameters{RopeType: RopeDefault, RopeTheta: defaultRopeTheta},
		ModelType:      modelType,
	}
}

// llamaFamily is a pointer to a config C that embeds LlamaFamilyConfig: LlamaConfig,
// MistralConfig or Qwen2Config.
type llamaFamily[C any] interface {
	*C
	family() *LlamaFamilyConfig
	withDefaults() C
}

// family returns f: through the configs that embed it, their LlamaFamilyConfig.
func (f *LlamaFamilyConfig) family() *LlamaFamilyConfig { return f }

// parseLlamaFamily reads config.json's raw bytes over c, an architecture's defaults, in
// either form transformers writes (see ParseLlamaConfig), and fills what transformers
// derives. config.json's model_type, if it has one, must be c's.
func parseLlamaFamily[C any, P llamaFamily[C]](raw []byte, c C) (C, error) {
	var none C
	f := P(&c).family()
	want := f.ModelType
	rope, err := parseConfigJSON(raw, &c, func() int64 { return f.MaxPositionEmbeddings })
	if err != nil {
		return none, err
	}
	if f.ModelType != want {
		return none, fmt.Errorf("models: %s: model_type %q is not %s", ConfigFile, f.ModelType, want)
	}
	f.RopeParameters, f.DType = rope, dtypeField(raw)
	return P(&c).withDefaults(), nil
}

// withDefaults fills what transformers derives: the key/value heads, head_dim where
// num_attention_heads divides hidden_size, and the rotary embedding's type, base and
// pretraining context (llama3, yarn, longrope), and yarn's factor when null.
func (c LlamaFamilyConfig) withDefaults() LlamaFamilyConfig {
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
	p := &c.RopeParameters
	switch p.RopeType {
	case RopeLlama3, RopeYarn, RopeLongrope:
		if p.OriginalMaxPositionEmbeddings == 0 {
			p.OriginalMaxPositionEmbeddings = c.MaxPositionEmbeddings
		}
	}
	if p.RopeType == RopeYarn && p.Factor == 0 && p.OriginalMaxPositionEmbeddings > 0 {
		// A null factor is the ratio of the contexts; written out, so that a saved
		// config has the key transformers requires.
		p.Factor = float64(c.MaxPositionEmbeddings) / float64(p.OriginalMaxPositionEmbeddings)
	}
	return c
}

// checkLayers checks, for the configs with sliding windows (cfg names the config), what
// their spec needs before it counts the layers' windows: the heads and layers within
// their bounds and a head_dim.
func (c LlamaFamilyConfig) checkLayers(cfg string) error {
	err := checkSizes(cfg, configSize{"num_attention_heads", c.NumAttentionHeads, 1, maxHeads},
		configSize{"num_hidden_layers", c.NumHiddenLayers, 1, maxLayers})
	if err != nil {
		return err
	}
	if c.HeadDim == 0 {
		return fmt.Errorf("%s: hidden_size %d is not divisible by num_attention_heads %d (and no head_dim is given)", cfg, c.HiddenSize, c.NumAttentionHeads)
	}
	return nil
}

// sizes are the decoderSizes of the shared fields.
func (c LlamaFamilyConfig) sizes() decoderSizes {
	return decoderSizes{
		vocab: c.VocabSize, hidden: c.HiddenSize, intermediate: c.IntermediateSize, layers: c.NumHiddenLayers,
		heads: c.NumAttentionHeads, kvHeads: c.NumKeyValueHeads, headDim: c.HeadDim, maxPos: c.MaxPositionEmbeddings,
		eps: c.RMSNormEps, initStd: c.InitializerRange, attnDropout: c.AttentionDropout, act: c.HiddenAct,
		padIdx: c.PadTokenID, rope: c.RopeParameters,
	}
}

// attention returns the sizes of an Attention block of s, with biases on the q, k
// and v projections (qkvBias) and on o_proj (oBias).
func (s decoderSizes) attention(qkvBias, oBias bool) attentionSizes {
	return attentionSizes{hidden: s.hidden, heads: s.heads, kvHeads: s.kvHeads, headDim: s.headDim,
		qkvBias: qkvBias, oBias: oBias, initStd: s.initStd, dropout: s.attnDropout}
}

// decoderConfig is DecoderConfig for a model of this config: the vocabulary,
// max_position_embeddings and the special tokens.
func (c LlamaFamilyConfig) decoderConfig() DecoderConfig {
	d := DecoderConfig{VocabSize: c.VocabSize, MaxPositions: c.MaxPositionEmbeddings, BOS: -1, EOS: append([]int64(nil), c.EOSTokenID...)}
	if c.BOSTokenID != nil {
		d.BOS = *c.BOSTokenID
	}
	return d
}

// fromJSON is a registry constructor (Architecture.New) of a config parser and the
// model constructor it feeds.
func fromJSON[C any, M CausalLM](parse func([]byte) (C, error), build func(C) (M, error)) func([]byte) (CausalLM, error) {
	return func(raw []byte) (CausalLM, error) {
		c, err := parse(raw)
		if err != nil {
			return nil, err
		}
		return build(c)
	}
}
