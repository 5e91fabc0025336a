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

// This file holds the blocks decoder architectures are put together from, as
// transformers' modular files share LlamaRMSNorm, LlamaRotaryEmbedding (rope.go),
// LlamaAttention, LlamaMLP and LlamaModel: RMSNorm and GemmaRMSNorm, Attention (with
// the queries' scale, soft-capping and a sliding window), GatedMLP, and DecoderModel,
// the embeddings, layers and final norm around a family's own decoder layer. Each
// architecture's file holds its config, its decoder layer with its forward, and its
// registration.

// The bounds of the sizes sizes.go does not cover, far above every released model.
const (
	maxHeads   = 1 << 12
	maxHeadDim = 1 << 14
)

// decoderSizes are the sizes and settings every decoder built on DecoderModel has,
// whichever config they came from.
type decoderSizes struct {
	vocab, hidden, intermediate, layers, heads, kvHeads, headDim, maxPos int64
	eps, initStd, attnDropout                                            float64
	act                                                                  string
	padIdx                                                               *int64
	rope                                                                 RopeParameters
	// partialRotary: the family's attention rotates part of each head when
	// rope.PartialRotaryFactor says so (Phi-3); the others refuse a factor other than 1.
	partialRotary bool
}

// validate checks every size before anything is allocated; errors name the config
// (cfg, "LlamaConfig") and the config.json field. The memory check counts the
// projections and embeddings (untied unless tied), not the biases and norms.
func (s decoderSizes) validate(cfg string, tied bool) error {
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
	if err := checkProbability(cfg, probability{"attention_dropout", s.attnDropout}); err != nil {
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
	if err := s.rope.validate(s.headDim); err != nil {
		return fmt.Errorf("%s: %w", cfg, err)
	}
	if f := s.rope.PartialRotaryFactor; !s.partialRotary && f != 0 && f != 1 {
		return fmt.Errorf("%s: rope_parameters.partial_rotary_factor %v is not supported (only 1: this family's attention rotates whole heads)", cfg, f)
	}
	// With the sizes bounded above, none of these products overflows.
	h, q, kv := s.hidden, s.heads*s.headDim, s.kvHeads*s.headDim
	params := s.vocab*h + s.layers*(h*(q+2*kv)+q*h+3*h*s.intermediate)
	if !tied {
		params += s.vocab * h
	}
	return checkFits(cfg, params)
}

// checkWindow checks a sliding window of config field name.
func checkWindow(cfg, name string, w int64) error {
	return checkSizes(cfg, configSize{name, w, 1, maxPositions})
}

// layerWindows returns each of the layers' sliding window (0: full attention) from
// layer_types, the sliding layers' being window; off says why they have none when
// window is nil. cfg names the config in errors.
func layerWindows(cfg string, layers int64, types []string, window *int64, off string) ([]int64, error) {
	if err := checkSizes(cfg, configSize{"num_hidden_layers", layers, 1, maxLayers}); err != nil {
		return nil, err
	}
	if int64(len(types)) != layers {
		return nil, fmt.Errorf("%s: layer_types has %d entries for %d layers (num_hidden_layers)", cfg, len(types), layers)
	}
	w := make([]int64, layers)
	for i, t := range types {
		switch t {
		case FullAttention:
		case SlidingAttention:
			if window == nil {
				return nil, fmt.Errorf("%s: layer_types[%d] is %q but %s", cfg, i, t, off)
			}
			if err := checkWindow(cfg, "sliding_window", *window); err != nil {
				return nil, err
			}
			w[i] = *window
		default:
			return nil, fmt.Errorf("%s: layer_types[%d] %q is not supported (%s, %s)", cfg, i, t, FullAttention, SlidingAttention)
		}
	}
	return w, nil
}

// decoderActivation is transformers' ACT2FN for the hidden_act names decoder configs
// use.
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
// times "weight". Llama's form rounds the normalised x to x's dtype before the product;
// with WeightInFloat32 (OLMo 2's Olmo2RMSNorm) the product is taken in float32 and then
// rounded.
type RMSNorm struct {
	nn.Base
	Weight          *torch.Tensor
	Eps             float64
	WeightInFloat32 bool
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
	h := rms(x.ToDType(torch.Float32), n.Eps)
	if n.WeightInFloat32 {
		return n.Weight.Mul(h).ToDType(dt)
	}
	return n.Weight.Mul(h.ToDType(dt))
}

// rms is x / sqrt(mean(x²) + eps) over the last dimension.
func rms(x *torch.Tensor, eps float64) *torch.Tensor {
	return x.Mul(x.PowScalar(2).MeanDims([]int64{-1}, true).AddScalar(eps).Rsqrt())
}

// GemmaRMSNorm is transformers' GemmaRMSNorm (Gemma 2 and 3): the normalised x times
// (1 + weight), all in float32, then rounded to x's dtype. Its weight starts at zero.
type GemmaRMSNorm struct {
	nn.Base
	Weight *torch.Tensor
	Eps    float64
}

// NewGemmaRMSNorm returns a GemmaRMSNorm over the last dimension of size dim, weight
// zero (a scale of one).
func NewGemmaRMSNorm(dim int64, eps float64) *GemmaRMSNorm {
	n := &GemmaRMSNorm{Eps: eps}
	n.Weight = n.RegisterParameter("weight", torch.Zeros([]int64{dim}, torch.Float32, torch.CPU))
	return n
}

// Forward normalises x over its last dimension.
func (n *GemmaRMSNorm) Forward(x *torch.Tensor) *torch.Tensor {
	return rms(x.ToDType(torch.Float32), n.Eps).Mul(n.Weight.ToDType(torch.Float32).AddScalar(1)).ToDType(x.DType())
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

// Attention is transformers' LlamaAttention and the attention of the families built on
// it: "q_proj", "k_proj", "v_proj", "o_proj"; rotary positions on queries and keys;
// grouped-query attention, each of num_key_value_heads key/value heads shared by
// num_attention_heads/num_key_value_heads query heads; causal, padding and
// sliding-window masks. A family's decoder layer calls Project, shapes and normalises
// the queries and keys as its model does, and calls Attend. QNorm and KNorm are the
// "q_norm" and "k_norm" of the families that have them (nil otherwise); the layer's
// forward says where they apply.
type Attention struct {
	nn.Base
	QProj, KProj, VProj, OProj *nn.Linear
	QNorm, KNorm               nn.Layer
	Heads, KVHeads, HeadDim    int64
	// Scale multiplies the queries' dot products: 1/sqrt(head_dim), or Gemma's
	// query_pre_attn_scalar^-0.5.
	Scale float64
	// SoftCap is attn_logit_softcapping (Gemma 2): the scores become
	// tanh(scores/SoftCap)·SoftCap before the mask. 0: none. Soft-capped attention is
	// computed as transformers' eager_attention_forward does, not through SDPA.
	SoftCap float64
	// Window is the layer's sliding window (0: full attention): a query sees the
	// Window positions up to and including its own.
	Window  int64
	Dropout float64
	// Layer is the layer's index in the KV cache.
	Layer int
}

// attentionSizes are newAttention's arguments.
type attentionSizes struct {
	hidden, heads, kvHeads, headDim int64
	qkvBias, oBias                  bool
	initStd, dropout                float64
}

// newAttention returns the projections "q_proj", "k_proj", "v_proj" and "o_proj" for
// layer, initialised as transformers does, with the scale 1/sqrt(head_dim).
func newAttention(s attentionSizes, layer int) *Attention {
	a := &Attention{Heads: s.heads, KVHeads: s.kvHeads, HeadDim: s.headDim, Scale: 1 / math.Sqrt(float64(s.headDim)), Dropout: s.dropout, Layer: layer}
	a.QProj = nn.Register(&a.Base, "q_proj", newLinear(s.hidden, s.heads*s.headDim, s.qkvBias, s.initStd))
	a.KProj = nn.Register(&a.Base, "k_proj", newLinear(s.hidden, s.kvHeads*s.headDim, s.qkvBias, s.initStd))
	a.VProj = nn.Register(&a.Base, "v_proj", newLinear(s.hidden, s.kvHeads*s.headDim, s.qkvBias, s.initStd))
	a.OProj = nn.Register(&a.Base, "o_proj", newLinear(s.heads*s.headDim, s.hidden, s.oBias, s.initStd))
	return a
}

// Project returns x's queries, keys and values [B, T, heads·head_dim] (keys and values
// with the key/value heads).
func (a *Attention) Project(x *torch.Tensor) (q, k, v *torch.Tensor) {
	return a.QProj.Forward(x), a.KProj.Forward(x), a.VProj.Forward(x)
}

// SplitHeads views x [B, T, n·head_dim] as heads: [B, n, T, head_dim].
func (a *Attention) SplitHeads(x *torch.Tensor) *torch.Tensor {
	s := x.Shape()
	return x.View(s[0], s[1], s[2]/a.HeadDim, a.HeadDim).Transpose(1, 2)
}

// Attend rotates the queries and keys q, k [B, H, T, D] by in's positions, adds k and
// v to the cache, attends and returns o_proj of the heads' outputs, [B, T, hidden].
func (a *Attention) Attend(q, k, v *torch.Tensor, in layerInput) *torch.Tensor {
	b, t := q.Size(0), q.Size(2)
	q, k = ApplyRotary(q, k, in.cos, in.sin)
	if in.cache != nil {
		k, v = in.cache.Update(a.Layer, k, v)
	}
	if n := a.Heads / a.KVHeads; n > 1 {
		k, v = repeatKV(k, n), repeatKV(v, n)
	}
	dropout := 0.0
	if a.Training() {
		dropout = a.Dropout
	}
	var y *torch.Tensor
	if a.SoftCap > 0 {
		y = softCappedAttention(q, k, v, in.attention, dropout, a.Scale, a.SoftCap, a.Training())
	} else {
		y = torch.ScaledDotProductAttention(q, k, v, in.mask, dropout, in.causal, a.Scale)
	}
	return a.OProj.Forward(y.Transpose(1, 2).Reshape(b, t, a.Heads*a.HeadDim))
}

// softCappedAttention is transformers' eager_attention_forward with softcap: the
// scores q·kᵀ·scale soft-capped, masked, a softmax in float32 rounded to q's dtype,
// dropout, times v. [B, H, T, D].
func softCappedAttention(q, k, v *torch.Tensor, at attention, dropout, scale, softCap float64, training bool) *torch.Tensor {
	w := q.Matmul(k.Transpose(2, 3)).MulScalar(scale).DivScalar(softCap).Tanh().MulScalar(softCap)
	mask := at.mask
	if mask == nil && at.causal {
		t, s := q.Size(2), k.Size(2)
		mask = torch.Ones([]int64{t, s}, torch.Bool, q.Device()).Tril(s - t)
	}
	if mask != nil {
		w = w.MaskedFill(mask.LogicalNot(), math.Inf(-1))
	}
	p := w.ToDType(torch.Float32).Softmax(-1).ToDType(q.DType())
	if dropout > 0 {
		p = torch.Dropout(p, dropout, training)
	}
	return p.Matmul(v)
}

// repeatKV is transformers' repeat_kv: [B, KV, S, D] -> [B, KV·n, S, D], each key/value
// head repeated for the n query heads of its group.
func repeatKV(x *torch.Tensor, n int64) *torch.Tensor {
	s := x.Shape()
	return x.Unsqueeze(2).Expand(s[0], s[1], n, s[2], s[3]).Reshape(s[0], s[1]*n, s[2], s[3])
}

// GatedMLP is transformers' LlamaMLP, the gated feed-forward block:
// down_proj(act(gate_proj(x)) · up_proj(x)) — SwiGLU with SiLU, GeGLU with Gemma's
// tanh GELU.
type GatedMLP struct {
	nn.Base
	GateProj, UpProj, DownProj *nn.Linear
	act                        func(*torch.Tensor) *torch.Tensor
}

// newGatedMLP returns the block's "gate_proj", "up_proj" and "down_proj", initialised
// as transformers does; act names the activation (validated by decoderSizes).
func newGatedMLP(hidden, intermediate int64, act string, bias bool, std float64) *GatedMLP {
	m := &GatedMLP{}
	m.act, _ = decoderActivation(act)
	m.GateProj = nn.Register(&m.Base, "gate_proj", newLinear(hidden, intermediate, bias, std))
	m.UpProj = nn.Register(&m.Base, "up_proj", newLinear(hidden, intermediate, bias, std))
	m.DownProj = nn.Register(&m.Base, "down_proj", newLinear(intermediate, hidden, bias, std))
	return m
}

// Forward applies the block to x [..., hidden].
func (m *GatedMLP) Forward(x *torch.Tensor) *torch.Tensor {
	return m.DownProj.Forward(m.act(m.GateProj.Forward(x)).Mul(m.UpProj.Forward(x)))
}

// layerInput is what DecoderModel gives each layer's forward besides the hidden
// states: the rotary cosines and sines of the positions, the layer's mask and the
// cache.
type layerInput struct {
	cos, sin *torch.Tensor
	attention
}

// decoderLayer is a family's decoder layer ("layers.N"): its forward over the hidden
// states [B, T, hidden], and its sliding window (0: full attention), which chooses its
// mask.
type decoderLayer interface {
	nn.Module
	forward(x *torch.Tensor, in layerInput) *torch.Tensor
	window() int64
}

// DecoderModel is transformers' LlamaModel and the bodies of the families built like
// it: "embed_tokens", the family's decoder layers "layers.0", "layers.1", ..., the
// final "norm", and "rotary_emb" (no state-dict entries). LocalRotaryEmb, when set
// (Gemma 3's local base), gives the sliding layers their positions.
type DecoderModel[L decoderLayer] struct {
	nn.Base
	EmbedTokens    *nn.Embedding
	Layers         []L
	Norm           nn.Layer
	RotaryEmb      *RotaryEmbedding
	LocalRotaryEmb *RotaryEmbedding
	// checkpointing recomputes each layer's activations in backward (GradientCheckpointer).
	checkpointing bool
	// unitHooks run around each layer (nn.UnitHooker).
	unitHooks nn.UnitHooks
}

// SetGradientCheckpointing makes each layer recompute its activations in the backward
// pass of training instead of keeping them (GradientCheckpointer).
func (d *DecoderModel[L]) SetGradientCheckpointing(on bool) { d.checkpointing = on }

// FSDPUnits names the units of sharded training (trainer.UnitChooser), as torchtune's
// FSDP2 recipes wrap a decoder: the embeddings and each decoder layer; the final norm
// (and a head outside the body) fall to the root unit.
func (d *DecoderModel[L]) FSDPUnits() []string {
	return append([]string{"embed_tokens"}, d.layerPaths()...)
}

func (d *DecoderModel[L]) layerPaths() []string {
	out := make([]string, len(d.Layers))
	for i := range d.Layers {
		out[i] = fmt.Sprintf("layers.%d", i)
	}
	return out
}

// SetUnitHooks runs h around each decoder layer's forward (nn.UnitHooker); the units
// are the layers. A mixture of experts' router logits, when its loss records them,
// leave a layer beside its output (moe.go), but the backward of the router that made
// them still starts after the layer's output's: the logits also weight the layer's
// experts (TopKRouter), so the router's backward waits for the experts' gradients,
// which come through the output.
func (d *DecoderModel[L]) SetUnitHooks(h nn.UnitHooks) []string {
	d.unitHooks = h
	return d.layerPaths()
}

// Forward returns the final hidden states [B, T, hidden] of in's tokens.
func (d *DecoderModel[L]) Forward(in DecoderInput) *torch.Tensor {
	return d.ForwardEmbeddings(d.EmbedTokens.Forward(in.InputIDs), in)
}

// ForwardEmbeddings returns the final hidden states [B, T, hidden] of the input
// embeddings x of in's tokens (a family that scales its embeddings scales them
// first).
func (d *DecoderModel[L]) ForwardEmbeddings(x *torch.Tensor, in DecoderInput) *torch.Tensor {
	pos := in.Positions()
	cos, sin := d.RotaryEmb.Forward(x, pos)
	var localCos, localSin *torch.Tensor
	if d.LocalRotaryEmb != nil {
		localCos, localSin = d.LocalRotaryEmb.Forward(x, pos)
	}
	full := attention{cache: in.Cache}
	full.mask, full.causal = in.SDPAMask()
	windowed := map[int64]attention{}
	for i, l := range d.Layers {
		if d.unitHooks != nil {
			d.unitHooks.BeforeUnit(i)
		}
		li := layerInput{cos: cos, sin: sin, attention: full}
		if w := l.window(); w > 0 {
			at, ok := windowed[w]
			if !ok {
				at = attention{cache: in.Cache}
				at.mask, at.causal = in.slidingSDPAMask(w)
				windowed[w] = at
			}
			li.attention = at
			if localCos != nil {
				li.cos, li.sin = localCos, localSin
			}
		}
		// A layer's temporaries autograd did not save are freed when it returns, as in
		// PyTorch (the cache's buffers are its own, escaped).
		if d.checkpointing && in.Cache == nil && l.ModuleBase().Training() {
			causal := li.causal
			f := func(x *torch.Tensor, ex []*torch.Tensor) *torch.Tensor {
				return l.forward(x, layerInput{cos: ex[0], sin: ex[1], attention: attention{mask: ex[2], causal: causal}})
			}
			if r, ok := any(l).(routedLayer); ok && r.routers().recording() {
				// The router logits a loss records leave the checkpoint as outputs, with
				// their graph (moe.go).
				x = checkpointRouted(l, r.routers(), f, x, li.cos, li.sin, li.mask)
			} else {
				x = torch.Local(func() *torch.Tensor { return nn.Checkpoint(l, f, x, li.cos, li.sin, li.mask) })
			}
		} else {
			x = torch.Local(func() *torch.Tensor { return l.forward(x, li) })
		}
		if d.unitHooks != nil {
			x = d.unitHooks.AfterUnit(i, x)
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
	if past+t <= window {
		return in.SDPAMask()
	}
	allowed := torch.Ones([]int64{t, past + t}, torch.Bool, in.InputIDs.Device()).Tril(past).Triu(past - window + 1)
	// Packed sequences are contiguous, so a window over the row is one within each.
	return in.restrictMask(allowed, in.Documents()), false
}

// decoderLM is the body the *ForCausalLM types built on DecoderModel share: "model"
// and "lm_head", whose weight is model.embed_tokens.weight itself when the config
// ties them.
type decoderLM[L decoderLayer] struct {
	model  *DecoderModel[L]
	lmHead *nn.Linear
	// family is a Llama-family model's config, for DecoderConfig (nil in Gemma's,
	// whose gemmaLM has its own).
	family *LlamaFamilyConfig
	// embedScale, when not 0, multiplies the embeddings, rounded to their dtype
	// (Gemma's √hidden_size); softCap is final_logit_softcapping (Gemma 2; 0: none).
	embedScale, softCap float64
}

// buildDecoder registers "model" (a DecoderModel of the layers newLayer returns, the
// final norm newNorm returns) and "lm_head" on base as transformers'
// *ForCausalLM.__init__ does, initialised as its _init_weights: linear and embedding
// weights N(0, initializer_range²) (the padding row zero), biases zero, norms as the
// norm's constructor makes them. The sizes are validated first; cfg names the config in
// errors.
func buildDecoder[L decoderLayer](base *nn.Base, cfg string, s decoderSizes, tie bool, newLayer func(i int) L, newNorm func() nn.Layer) (lm decoderLM[L], err error) {
	if err := s.validate(cfg, tie); err != nil {
		return decoderLM[L]{}, fmt.Errorf("models: %w", err)
	}
	rope, err := NewRotaryEmbedding(s.rope, s.headDim, s.maxPos)
	if err != nil {
		return decoderLM[L]{}, err
	}
	d := &DecoderModel[L]{}
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
	for i := range int(s.layers) {
		l := newLayer(i)
		layers.Append(l)
		d.Layers = append(d.Layers, l)
	}
	d.Norm = nn.Register(&d.Base, "norm", newNorm())
	d.RotaryEmb = nn.Register(&d.Base, "rotary_emb", rope)
	var head *nn.Linear
	if tie {
		head = &nn.Linear{Weight: emb.Weight}
		head.RegisterParameter("weight", emb.Weight)
	} else {
		head = newLinear(s.hidden, s.vocab, false, s.initStd)
	}
	nn.Register(base, "lm_head", head)
	return decoderLM[L]{model: d, lmHead: head}, nil
}

// Forward returns the logits [B, T, vocab] of in's tokens (CausalLM).
func (lm decoderLM[L]) Forward(in DecoderInput) *torch.Tensor {
	return lm.OutputHead().Logits(lm.HiddenStates(in))
}

// HiddenStates returns the final hidden states [B, T, hidden_size] of in's tokens,
// after the final norm (HiddenStateLM).
func (lm decoderLM[L]) HiddenStates(in DecoderInput) *torch.Tensor {
	if lm.embedScale == 0 {
		return lm.model.Forward(in)
	}
	x := lm.model.EmbedTokens.Forward(in.InputIDs)
	return lm.model.ForwardEmbeddings(x.Mul(torch.Full([]int64{}, lm.embedScale, x.DType(), x.Device())), in)
}

// OutputHead returns lm_head, with final_logit_softcapping if any (HiddenStateLM).
func (lm decoderLM[L]) OutputHead() LMHead { return LMHead{Layer: lm.lmHead, SoftCap: lm.softCap} }

// Loss returns the language-modelling loss transformers computes for labels=ids,
// chunked for vocabularies of ChunkedLossMinVocab tokens and more (LMLoss, LossAuto).
func (lm decoderLM[L]) Loss(ids *torch.Tensor) *torch.Tensor {
	return lmLoss(lm, chunked(lm, LossAuto), DecoderInput{InputIDs: ids}, ids)
}

// parseConfigJSON unmarshals config.json's raw bytes over c, an architecture's
// defaults, with errors that name the file, and reads the rotary settings in either
// form (ropeFields, with the *maxPos read). config.json's model_type, if it has one,
// must be c's, *modelType.
func parseConfigJSON(raw []byte, c any, modelType *string, maxPos *int64) (RopeParameters, error) {
	want := *modelType
	if err := json.Unmarshal(raw, c); err != nil {
		return RopeParameters{}, fmt.Errorf("models: %s: %w", ConfigFile, jsonFieldError(raw, c, err))
	}
	p, err := ropeFields(raw, *maxPos)
	if err != nil {
		return RopeParameters{}, fmt.Errorf("models: %w", err)
	}
	if *modelType != want {
		return RopeParameters{}, fmt.Errorf("models: %s: model_type %q is not %s", ConfigFile, *modelType, want)
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
