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
	fillDefaults()
}

// family returns f: through the configs that embed it, their LlamaFamilyConfig.
func (f *LlamaFamilyConfig) family() *LlamaFamilyConfig { return f }

// parseLlamaFamily reads config.json's raw bytes over c, an architecture's defaults, in
// either form transformers writes (see ParseLlamaConfig), and fills what transformers
// derives. config.json's model_type, if it has one, must be c's.
func parseLlamaFamily[C any, P llamaFamily[C]](raw []byte, c C) (C, error) {
	f := P(&c).family()
	rope, err := parseConfigJSON(raw, &c, &f.ModelType, &f.MaxPositionEmbeddings)
	if err != nil {
		var none C
		return none, err
	}
	f.RopeParameters, f.DType = rope, dtypeField(raw)
	return withDefaults[C, P](c), nil
}

// withDefaults returns c with what transformers derives filled (its fillDefaults).
func withDefaults[C any, P llamaFamily[C]](c C) C {
	P(&c).fillDefaults()
	return c
}

// fillDefaults fills what transformers derives: the key/value heads, head_dim where
// num_attention_heads divides hidden_size, and the rotary embedding's type, base and
// pretraining context (llama3, yarn, longrope), and yarn's factor when null.
func (c *LlamaFamilyConfig) fillDefaults() {
	if c.NumKeyValueHeads == 0 {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	if c.HeadDim == 0 && c.NumAttentionHeads > 0 && c.HiddenSize%c.NumAttentionHeads == 0 {
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	if c.RopeParameters.RopeTheta == 0 {
		c.RopeParameters.RopeTheta = defaultRopeTheta
	}
	c.RopeParameters = c.RopeParameters.withDefaults(c.MaxPositionEmbeddings)
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

// slidingWindow checks the layers (checkLayers) and returns every layer's sliding window,
// w (nil: 0, full attention).
func (c LlamaFamilyConfig) slidingWindow(cfg string, w *int64) (int64, error) {
	if err := c.checkLayers(cfg); err != nil || w == nil {
		return 0, err
	}
	return *w, checkWindow(cfg, "sliding_window", *w)
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

// newDecoderConfig is the DecoderConfig of a config's vocabulary, context and special
// tokens (bos nil: none).
func newDecoderConfig(vocab, maxPos int64, bos *int64, eos TokenIDs) DecoderConfig {
	d := DecoderConfig{VocabSize: vocab, MaxPositions: maxPos, BOS: -1, EOS: append([]int64(nil), eos...)}
	if bos != nil {
		d.BOS = *bos
	}
	return d
}

// DecoderConfig returns the vocabulary, max_position_embeddings and the special tokens
// of a Llama-family model's config (CausalLM).
func (lm decoderLM[L]) DecoderConfig() DecoderConfig {
	f := lm.family
	return newDecoderConfig(f.VocabSize, f.MaxPositionEmbeddings, f.BOSTokenID, f.EOSTokenID)
}

// namedConfig is a pointer to a config C whose model_type and architectures
// PretrainedConfig sets: one that embeds LlamaFamilyConfig or Gemma2Config.
type namedConfig[C any] interface {
	*C
	setArchitecture(modelType, class string)
}

func (f *LlamaFamilyConfig) setArchitecture(modelType, class string) {
	f.ModelType, f.Architectures = modelType, []string{class}
}

// pretrained returns c as save_pretrained writes it (PretrainedConfig), with
// model_type and the architectures of class set.
func pretrained[C any, P namedConfig[C]](c C, modelType, class string) any {
	P(&c).setArchitecture(modelType, class)
	return c
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
