package models

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// This file holds what Llama, Qwen2 and Mistral share, as transformers' modular files
// share LlamaRMSNorm, LlamaRotaryEmbedding, LlamaAttention, LlamaMLP and
// LlamaDecoderLayer: each architecture's file only describes its config and which
// projections have a bias or a sliding window.

// The bounds of the sizes sizes.go does not cover, far above every released model.
const (
	maxHeads   = 1 << 12
	maxHeadDim = 1 << 14
)

// decoderSpec is what builds a Llama-family decoder, whichever config it came from.
type decoderSpec struct {
	vocab, hidden, intermediate, layers, heads, kvHeads, headDim, maxPos int64
	eps, initStd, attnDropout                                            float64
	act                                                                  string
	qkvBias, oBias, mlpBias, tie                                         bool
	padIdx                                                               *int64
	rope                                                                 RopeParameters
	// windows holds each layer's sliding window, 0 for full attention.
	windows []int64
}

// validate checks every size before anything is allocated; errors name the config
// (cfg, "LlamaConfig") and the config.json field.
func (s decoderSpec) validate(cfg string) error {
	err := checkSizes(cfg,
		configSize{"vocab_size", s.vocab, 1, maxVocab}, configSize{"hidden_size", s.hidden, 1, maxHidden},
		configSize{"intermediate_size", s.intermediate, 1, maxIntermediate},
		configSize{"num_hidden_layers", s.layers, 1, maxLayers},
		configSize{"num_attention_heads", s.heads, 1, maxHeads}, configSize{"num_key_value_heads", s.kvHeads, 1, maxHeads},
		configSize{"head_dim", s.headDim, 2, maxHeadDim}, configSize{"max_position_embeddings", s.maxPos, 1, maxPositions})
	if err != nil {
		return err
	}
	if s.padIdx != nil {
		if err := checkSizes(cfg, configSize{"pad_token_id", *s.padIdx, 0, s.vocab - 1}); err != nil {
			return err
		}
	}
	for i, w := range s.windows {
		if err := checkSizes(cfg, configSize{fmt.Sprintf("sliding_window (layer %d)", i), w, 0, maxPositions}); err != nil {
			return err
		}
	}
	if err := checkProbability(cfg, "attention_dropout", s.attnDropout); err != nil {
		return err
	}
	switch {
	case s.heads%s.kvHeads != 0:
		return fmt.Errorf("%s: num_attention_heads %d is not divisible by num_key_value_heads %d", cfg, s.heads, s.kvHeads)
	case s.headDim%2 != 0:
		return fmt.Errorf("%s: head_dim %d must be even (rotary embeddings rotate pairs)", cfg, s.headDim)
	case math.IsNaN(s.eps) || math.IsInf(s.eps, 0) || s.eps < 0:
		return fmt.Errorf("%s: rms_norm_eps %v must be a non-negative number", cfg, s.eps)
	case math.IsNaN(s.initStd) || math.IsInf(s.initStd, 0) || s.initStd < 0:
		return fmt.Errorf("%s: initializer_range %v must be a non-negative number", cfg, s.initStd)
	}
	if _, err := decoderActivation(s.act); err != nil {
		return fmt.Errorf("%s: %w", cfg, err)
	}
	if err := s.rope.validate(); err != nil {
		return fmt.Errorf("%s: %w", cfg, err)
	}
	// With the sizes bounded above, none of these products overflows.
	h, q, kv := s.hidden, s.heads*s.headDim, s.kvHeads*s.headDim
	attn := h*(q+2*kv) + q*h
	if s.qkvBias {
		attn += q + 2*kv
	}
	if s.oBias {
		attn += h
	}
	mlp := 3 * h * s.intermediate
	if s.mlpBias {
		mlp += 2*s.intermediate + h
	}
	params := s.vocab*h + s.layers*(attn+mlp+2*h) + h
	if !s.tie {
		params += s.vocab * h
	}
	return checkFits(cfg, params)
}

// decoderActivation is transformers' ACT2FN for the hidden_act names Llama-family
// configs use.
func decoderActivation(name string) (func(*torch.Tensor) *torch.Tensor, error) {
	switch name {
	case "silu", "swish":
		return (*torch.Tensor).SiLU, nil
	case "gelu":
		return func(x *torch.Tensor) *torch.Tensor { return x.GELU(false) }, nil
	case "gelu_new", "gelu_pytorch_tanh", "gelu_fast":
		return func(x *torch.Tensor) *torch.Tensor { return x.GELU(true) }, nil
	case "relu":
		return (*torch.Tensor).ReLU, nil
	}
	return nil, fmt.Errorf("hidden_act %q is not supported (silu, gelu, gelu_pytorch_tanh, relu)", name)
}

// RMSNorm is transformers' LlamaRMSNorm: x / sqrt(mean(x²) + eps), computed in float32,
// times "weight" in x's dtype.
type RMSNorm struct {
	nn.Base
	Weight *torch.Tensor
	Eps    float64
}

// NewRMSNorm returns an RMSNorm over the last dimension of size dim, weight one.
func NewRMSNorm(dim int64, eps float64) *RMSNorm {
	n := &RMSNorm{Eps: eps}
	n.Weight = n.RegisterParameter("weight", torch.Ones([]int64{dim}, torch.Float32, torch.CPU))
	return n
}

// Forward normalises x over its last dimension.
func (n *RMSNorm) Forward(x *torch.Tensor) *torch.Tensor {
	dt := x.DType()
	h := x.ToDType(torch.Float32)
	variance := h.PowScalar(2).MeanDims([]int64{-1}, true)
	h = h.Mul(variance.AddScalar(n.Eps).Rsqrt())
	return n.Weight.Mul(h.ToDType(dt))
}

// newLinear is nn.Linear(in, out, bias) initialised as transformers' _init_weights
// does: weight N(0, std²), bias zero.
func newLinear(in, out int64, bias bool, std float64) *nn.Linear {
	l := &nn.Linear{}
	l.Weight = l.RegisterParameter("weight", torch.Empty([]int64{out, in}, torch.Float32, torch.CPU))
	nn.InitNormal(l.Weight, 0, std)
	if bias {
		l.Bias = l.RegisterParameter("bias", torch.Zeros([]int64{out}, torch.Float32, torch.CPU))
	}
	return l
}

// DecoderAttention is transformers' LlamaAttention (Qwen2Attention, MistralAttention):
// "q_proj", "k_proj", "v_proj", "o_proj"; rotary positions on queries and keys;
// grouped-query attention, each of num_key_value_heads key/value heads shared by
// num_attention_heads/num_key_value_heads query heads; causal, padding and
// sliding-window masks, through torch.ScaledDotProductAttention.
type DecoderAttention struct {
	nn.Base
	QProj, KProj, VProj, OProj *nn.Linear
	heads, kvHeads, headDim    int64
	// Window is the layer's sliding window (0: full attention): a query sees the
	// Window positions up to and including its own.
	Window  int64
	dropout float64
	layer   int
}

// forward attends x [B, T, hidden] with the rotary cos and sin of its positions.
func (a *DecoderAttention) forward(x, cos, sin *torch.Tensor, at attention) *torch.Tensor {
	shape := x.Shape()
	b, t := shape[0], shape[1]
	heads := func(l *nn.Linear, n int64) *torch.Tensor {
		return l.Forward(x).View(b, t, n, a.headDim).Transpose(1, 2)
	}
	q, k, v := heads(a.QProj, a.heads), heads(a.KProj, a.kvHeads), heads(a.VProj, a.kvHeads)
	q, k = ApplyRotary(q, k, cos, sin)
	if at.cache != nil {
		k, v = at.cache.Update(a.layer, k, v)
	}
	if n := a.heads / a.kvHeads; n > 1 {
		k, v = repeatKV(k, n), repeatKV(v, n)
	}
	dropout := 0.0
	if a.Training() {
		dropout = a.dropout
	}
	y := torch.ScaledDotProductAttention(q, k, v, at.mask, dropout, at.causal, 1/math.Sqrt(float64(a.headDim)))
	return a.OProj.Forward(y.Transpose(1, 2).Reshape(b, t, a.heads*a.headDim))
}

// repeatKV is transformers' repeat_kv: [B, KV, S, D] -> [B, KV·n, S, D], each key/value
// head repeated for the n query heads of its group.
func repeatKV(x *torch.Tensor, n int64) *torch.Tensor {
	s := x.Shape()
	return x.Unsqueeze(2).Expand(s[0], s[1], n, s[2], s[3]).Reshape(s[0], s[1]*n, s[2], s[3])
}

// GatedMLP is transformers' LlamaMLP, the SwiGLU feed-forward block:
// down_proj(act(gate_proj(x)) · up_proj(x)).
type GatedMLP struct {
	nn.Base
	GateProj, UpProj, DownProj *nn.Linear
	act                        func(*torch.Tensor) *torch.Tensor
}

// Forward applies the block to x [..., hidden].
func (m *GatedMLP) Forward(x *torch.Tensor) *torch.Tensor {
	return m.DownProj.Forward(m.act(m.GateProj.Forward(x)).Mul(m.UpProj.Forward(x)))
}

// DecoderLayer is transformers' LlamaDecoderLayer: "self_attn" after "input_layernorm"
// and "mlp" after "post_attention_layernorm", each added to its input.
type DecoderLayer struct {
	nn.Base
	SelfAttn               *DecoderAttention
	MLP                    *GatedMLP
	InputLayernorm         *RMSNorm
	PostAttentionLayernorm *RMSNorm
}

func (l *DecoderLayer) forward(x, cos, sin *torch.Tensor, at attention) *torch.Tensor {
	x = x.Add(l.SelfAttn.forward(l.InputLayernorm.Forward(x), cos, sin, at))
	return x.Add(l.MLP.Forward(l.PostAttentionLayernorm.Forward(x)))
}

// DecoderModel is transformers' LlamaModel (Qwen2Model, MistralModel): "embed_tokens",
// "layers.0", "layers.1", ..., the final "norm", and "rotary_emb" (no state-dict
// entries).
type DecoderModel struct {
	nn.Base
	EmbedTokens *nn.Embedding
	Layers      []*DecoderLayer
	Norm        *RMSNorm
	RotaryEmb   *RotaryEmbedding
	// checkpointing recomputes each layer's activations in backward (GradientCheckpointer).
	checkpointing bool
}

// SetGradientCheckpointing makes each layer recompute its activations in the backward
// pass of training instead of keeping them (GradientCheckpointer).
func (d *DecoderModel) SetGradientCheckpointing(on bool) { d.checkpointing = on }

// Forward returns the final hidden states [B, T, hidden] of in's tokens.
func (d *DecoderModel) Forward(in DecoderInput) *torch.Tensor {
	x := d.EmbedTokens.Forward(in.InputIDs)
	cos, sin := d.RotaryEmb.Forward(x, in.Positions())
	full := attention{cache: in.Cache}
	full.mask, full.causal = in.SDPAMask()
	windowed := map[int64]attention{}
	for _, l := range d.Layers {
		at := full
		if w := l.SelfAttn.Window; w > 0 {
			var ok bool
			if at, ok = windowed[w]; !ok {
				at = attention{cache: in.Cache}
				at.mask, at.causal = in.slidingSDPAMask(w)
				windowed[w] = at
			}
		}
		// A layer's temporaries autograd did not save are freed when it returns, as in
		// PyTorch (the cache's buffers are its own, escaped).
		if d.checkpointing && in.Cache == nil && l.Training() {
			x = torch.Local(func() *torch.Tensor {
				return nn.Checkpoint(l, func(x *torch.Tensor, ex []*torch.Tensor) *torch.Tensor {
					return l.forward(x, ex[0], ex[1], attention{mask: ex[2], causal: at.causal})
				}, x, cos, sin, at.mask)
			})
		} else {
			x = torch.Local(func() *torch.Tensor { return l.forward(x, cos, sin, at) })
		}
	}
	in.Cache.Advance(in.InputIDs.Size(1))
	return d.Norm.Forward(x)
}

// slidingSDPAMask is SDPAMask for a layer with a sliding window: a query at position
// p (counted in the cache, padding included, as transformers'
// sliding_window_causal_mask_function does) sees the keys in (p-window, p]. When every
// query's causal keys fit in the window it is SDPAMask itself.
func (in DecoderInput) slidingSDPAMask(window int64) (mask *torch.Tensor, causal bool) {
	t := in.InputIDs.Size(1)
	past := in.Cache.Len()
	s := past + t
	if s <= window {
		return in.SDPAMask()
	}
	dev := in.InputIDs.Device()
	allowed := torch.Ones([]int64{t, s}, torch.Bool, dev).Tril(past).Triu(past - window + 1)
	if docs := in.Documents(); docs != nil {
		// Sequences are contiguous, so a window over the row is one within each sequence.
		return in.packedMask(allowed, docs), false
	}
	if in.AttentionMask == nil {
		return allowed, false
	}
	keep := in.AttentionMask.ToDType(torch.Bool).Unsqueeze(1).Unsqueeze(1) // [B, 1, 1, S]
	self := torch.Eye(s, torch.Bool, dev).Narrow(0, past, t)
	return allowed.LogicalAnd(keep).LogicalOr(self), false
}

// decoderLM is the body the Llama-family *ForCausalLM types share: "model" and
// "lm_head", whose weight is model.embed_tokens.weight itself when the config ties
// them.
type decoderLM struct {
	model  *DecoderModel
	lmHead *nn.Linear
}

// build makes lm the decoder that spec describes (cfg names the config in errors),
// registered on base (buildDecoder), after the checks spec makes.
func (lm *decoderLM) build(base *nn.Base, cfg string, spec func() (decoderSpec, error)) error {
	s, err := spec()
	if err != nil {
		return fmt.Errorf("models: %w", err)
	}
	*lm, err = buildDecoder(base, cfg, s)
	return err
}

// buildDecoder registers "model" and "lm_head" on base as transformers'
// *ForCausalLM.__init__ does, initialised as its _init_weights: linear and embedding
// weights N(0, initializer_range²) (the padding row zero), biases zero, norms one.
// Sizes are validated first.
func buildDecoder(base *nn.Base, cfg string, s decoderSpec) (lm decoderLM, err error) {
	if err := s.validate(cfg); err != nil {
		return decoderLM{}, fmt.Errorf("models: %w", err)
	}
	act, _ := decoderActivation(s.act)
	rope, err := NewRotaryEmbedding(s.rope, s.headDim, s.maxPos)
	if err != nil {
		return decoderLM{}, err
	}
	d := &DecoderModel{}
	nn.Register(base, "model", d)
	defer func() {
		if err != nil { // free what was built before an allocation failed
			nn.Free(base)
			if d.RotaryEmb == nil {
				nn.Free(rope)
			}
		}
	}()
	defer torch.Recover(&err, "building "+cfg)
	emb := &nn.Embedding{PaddingIdx: -1}
	emb.Weight = emb.RegisterParameter("weight", torch.Empty([]int64{s.vocab, s.hidden}, torch.Float32, torch.CPU))
	nn.InitNormal(emb.Weight, 0, s.initStd)
	if s.padIdx != nil {
		emb.PaddingIdx = *s.padIdx
		torch.WithScope(func() { torch.NoGrad(func() { emb.Weight.Select(0, *s.padIdx).Zero() }) })
	}
	d.EmbedTokens = nn.Register(&d.Base, "embed_tokens", emb)
	layers := nn.Register(&d.Base, "layers", nn.NewModuleList())
	for i := range s.layers {
		l := &DecoderLayer{}
		a := &DecoderAttention{heads: s.heads, kvHeads: s.kvHeads, headDim: s.headDim, dropout: s.attnDropout, layer: int(i)}
		if int(i) < len(s.windows) {
			a.Window = s.windows[i]
		}
		a.QProj = nn.Register(&a.Base, "q_proj", newLinear(s.hidden, s.heads*s.headDim, s.qkvBias, s.initStd))
		a.KProj = nn.Register(&a.Base, "k_proj", newLinear(s.hidden, s.kvHeads*s.headDim, s.qkvBias, s.initStd))
		a.VProj = nn.Register(&a.Base, "v_proj", newLinear(s.hidden, s.kvHeads*s.headDim, s.qkvBias, s.initStd))
		a.OProj = nn.Register(&a.Base, "o_proj", newLinear(s.heads*s.headDim, s.hidden, s.oBias, s.initStd))
		l.SelfAttn = nn.Register(&l.Base, "self_attn", a)
		mlp := &GatedMLP{act: act}
		mlp.GateProj = nn.Register(&mlp.Base, "gate_proj", newLinear(s.hidden, s.intermediate, s.mlpBias, s.initStd))
		mlp.UpProj = nn.Register(&mlp.Base, "up_proj", newLinear(s.hidden, s.intermediate, s.mlpBias, s.initStd))
		mlp.DownProj = nn.Register(&mlp.Base, "down_proj", newLinear(s.intermediate, s.hidden, s.mlpBias, s.initStd))
		l.MLP = nn.Register(&l.Base, "mlp", mlp)
		l.InputLayernorm = nn.Register(&l.Base, "input_layernorm", NewRMSNorm(s.hidden, s.eps))
		l.PostAttentionLayernorm = nn.Register(&l.Base, "post_attention_layernorm", NewRMSNorm(s.hidden, s.eps))
		layers.Append(l)
		d.Layers = append(d.Layers, l)
	}
	d.Norm = nn.Register(&d.Base, "norm", NewRMSNorm(s.hidden, s.eps))
	d.RotaryEmb = nn.Register(&d.Base, "rotary_emb", rope)
	var head *nn.Linear
	if s.tie {
		head = &nn.Linear{Weight: emb.Weight}
		head.RegisterParameter("weight", emb.Weight)
	} else {
		head = newLinear(s.hidden, s.vocab, false, s.initStd)
	}
	nn.Register(base, "lm_head", head)
	return decoderLM{model: d, lmHead: head}, nil
}

// Forward returns the logits [B, T, vocab] of in's tokens (CausalLM).
func (lm decoderLM) Forward(in DecoderInput) *torch.Tensor {
	return lm.OutputHead().Logits(lm.HiddenStates(in))
}

// HiddenStates returns the final hidden states [B, T, hidden_size] of in's tokens,
// after the final norm (HiddenStateLM).
func (lm decoderLM) HiddenStates(in DecoderInput) *torch.Tensor { return lm.model.Forward(in) }

// OutputHead returns lm_head (HiddenStateLM).
func (lm decoderLM) OutputHead() LMHead { return LMHead{Layer: lm.lmHead} }

// Loss returns the language-modelling loss transformers computes for labels=ids,
// chunked for vocabularies of ChunkedLossMinVocab tokens and more (LMLoss, LossAuto).
func (lm decoderLM) Loss(ids *torch.Tensor) *torch.Tensor {
	return lmLoss(lm, chunked(lm, LossAuto), DecoderInput{InputIDs: ids}, ids)
}

// parseConfigJSON unmarshals config.json's raw bytes into c with errors that name the
// file, and reads the rotary settings in either form (ropeFields).
func parseConfigJSON(raw []byte, c any, maxPos func() int64) (RopeParameters, error) {
	if err := json.Unmarshal(raw, c); err != nil {
		return RopeParameters{}, fmt.Errorf("models: %s: %w", ConfigFile, jsonFieldError(raw, c, err))
	}
	p, err := ropeFields(raw, maxPos())
	if err != nil {
		return RopeParameters{}, fmt.Errorf("models: %w", err)
	}
	return p, nil
}

// jsonFieldError names the config.json key whose value err is about, when err does not
// (a custom unmarshaler's error, such as a token id that is not a number): it decodes
// each top-level key alone into a fresh copy of c's type.
func jsonFieldError(raw []byte, c any, err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		// The path has the embedded struct's name, which config.json does not have.
		typeErr.Field = strings.TrimPrefix(typeErr.Field, "LlamaFamilyConfig.")
		return err
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil {
		return err
	}
	for k, v := range fields {
		one, _ := json.Marshal(map[string]json.RawMessage{k: v})
		fresh := reflect.New(reflect.TypeOf(c).Elem()).Interface()
		if ferr := json.Unmarshal(one, fresh); ferr != nil {
			return fmt.Errorf("%s: %w", k, ferr)
		}
	}
	return err
}

// dtypeField reads config.json's dtype, or torch_dtype as transformers 4 wrote it.
func dtypeField(raw []byte) string {
	var d struct {
		DType      string `json:"dtype"`
		TorchDType string `json:"torch_dtype"`
	}
	if json.Unmarshal(raw, &d) != nil {
		return ""
	}
	if d.DType != "" {
		return d.DType
	}
	return d.TorchDType
}

// decoderCheckpointKey maps a Hugging Face checkpoint key of a Llama-family model to its
// state-dict key: the rotary inv_freq buffers older transformers saved are dropped, and
// the keys of a checkpoint saved from the bare model (no "model." prefix) get it.
func decoderCheckpointKey(key string) string {
	if strings.HasSuffix(key, "rotary_emb.inv_freq") {
		return ""
	}
	if !strings.HasPrefix(key, "model.") && !strings.HasPrefix(key, "lm_head.") {
		return "model." + key
	}
	return key
}
