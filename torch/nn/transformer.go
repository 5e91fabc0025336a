package nn

import (
	"fmt"

	"github.com/gotrain/gotrain/torch"
)

// TransformerLayerConfig holds the keyword arguments of nn.TransformerEncoderLayer and
// nn.TransformerDecoderLayer after d_model and nhead. Zero values mean PyTorch's defaults
// except Dropout, whose zero value is no dropout (PyTorch's default is 0.1).
type TransformerLayerConfig struct {
	DimFeedforward int64   // default 2048
	Dropout        float64 // default 0 here; PyTorch's is 0.1
	Activation     string  // "relu" (default) or "gelu"
	LayerNormEps   float64 // default 1e-5
	BatchFirst     bool    // [N, L, E] instead of [L, N, E]
	NormFirst      bool    // pre-norm: x + f(norm(x)) instead of norm(x + f(x))
	NoBias         bool    // bias=False in every Linear, LayerNorm and the attention
}

func (c TransformerLayerConfig) withDefaults() TransformerLayerConfig {
	if c.DimFeedforward == 0 {
		c.DimFeedforward = 2048
	}
	if c.LayerNormEps == 0 {
		c.LayerNormEps = 1e-5
	}
	if c.Activation == "" {
		c.Activation = "relu"
	}
	return c
}

func (c TransformerLayerConfig) activation() func(*torch.Tensor) *torch.Tensor {
	switch c.Activation {
	case "relu":
		return (*torch.Tensor).ReLU
	case "gelu":
		return func(x *torch.Tensor) *torch.Tensor { return x.GELU(false) }
	}
	panic(fmt.Sprintf("nn: transformer layer: activation should be relu or gelu, not %q", c.Activation))
}

func (c TransformerLayerConfig) linear(in, out int64) *Linear {
	return NewLinear(in, out, noBiasIf(c.NoBias)...)
}

func (c TransformerLayerConfig) norm(d int64) *LayerNorm {
	return NewLayerNorm([]int64{d}, append(noBiasIf(c.NoBias), Eps(c.LayerNormEps))...)
}

func (c TransformerLayerConfig) attention(d, heads int64) *MultiheadAttention {
	return NewMultiheadAttention(d, heads, MultiheadAttentionConfig{Dropout: c.Dropout, NoBias: c.NoBias, BatchFirst: c.BatchFirst})
}

// feedForward is the linear1 → activation → dropout → linear2 → dropout block both layer
// kinds share.
type feedForward struct {
	Linear1, Linear2 *Linear
	dropout, out     *Dropout
	act              func(*torch.Tensor) *torch.Tensor
}

func (f *feedForward) forward(x *torch.Tensor) *torch.Tensor {
	return f.out.Forward(f.Linear2.Forward(f.dropout.Forward(f.act(f.Linear1.Forward(x)))))
}

// TransformerEncoderLayer is nn.TransformerEncoderLayer: self-attention ("self_attn")
// and a feed-forward block ("linear1", "linear2"), each with a residual connection and a
// LayerNorm ("norm1", "norm2"), applied after (default) or before (NormFirst) the block.
type TransformerEncoderLayer struct {
	Base
	SelfAttn     *MultiheadAttention
	Norm1, Norm2 *LayerNorm
	NormFirst    bool
	feedForward
	dropout1 *Dropout
}

// NewTransformerEncoderLayer returns nn.TransformerEncoderLayer(dModel, nhead, ...).
func NewTransformerEncoderLayer(dModel, nhead int64, c TransformerLayerConfig) *TransformerEncoderLayer {
	c = c.withDefaults()
	l := &TransformerEncoderLayer{NormFirst: c.NormFirst}
	l.act = c.activation()
	l.SelfAttn = Register(&l.Base, "self_attn", c.attention(dModel, nhead))
	l.Linear1 = Register(&l.Base, "linear1", c.linear(dModel, c.DimFeedforward))
	l.feedForward.dropout = Register(&l.Base, "dropout", NewDropout(c.Dropout))
	l.Linear2 = Register(&l.Base, "linear2", c.linear(c.DimFeedforward, dModel))
	l.Norm1 = Register(&l.Base, "norm1", c.norm(dModel))
	l.Norm2 = Register(&l.Base, "norm2", c.norm(dModel))
	l.dropout1 = Register(&l.Base, "dropout1", NewDropout(c.Dropout))
	l.out = Register(&l.Base, "dropout2", NewDropout(c.Dropout))
	return l
}

// Forward runs the layer on src without masks.
func (l *TransformerEncoderLayer) Forward(src *torch.Tensor) *torch.Tensor {
	return l.ForwardMasked(src, AttentionMasks{})
}

// ForwardMasked runs the layer with src_mask (masks.AttnMask), src_key_padding_mask
// and is_causal (masks.Causal).
func (l *TransformerEncoderLayer) ForwardMasked(src *torch.Tensor, masks AttentionMasks) *torch.Tensor {
	sa := func(x *torch.Tensor) *torch.Tensor { return l.dropout1.Forward(l.SelfAttn.Attend(x, x, x, masks)) }
	x := src
	if l.NormFirst {
		x = x.Add(sa(l.Norm1.Forward(x)))
		return x.Add(l.forward(l.Norm2.Forward(x)))
	}
	x = l.Norm1.Forward(x.Add(sa(x)))
	return l.Norm2.Forward(x.Add(l.forward(x)))
}

// TransformerDecoderLayer is nn.TransformerDecoderLayer: self-attention ("self_attn"),
// attention over the encoder's output ("multihead_attn") and a feed-forward block
// ("linear1", "linear2"), with LayerNorms "norm1", "norm2", "norm3".
type TransformerDecoderLayer struct {
	Base
	SelfAttn, MultiheadAttn *MultiheadAttention
	Norm1, Norm2, Norm3     *LayerNorm
	NormFirst               bool
	feedForward
	dropout1, dropout2 *Dropout
}

// NewTransformerDecoderLayer returns nn.TransformerDecoderLayer(dModel, nhead, ...).
func NewTransformerDecoderLayer(dModel, nhead int64, c TransformerLayerConfig) *TransformerDecoderLayer {
	c = c.withDefaults()
	l := &TransformerDecoderLayer{NormFirst: c.NormFirst}
	l.act = c.activation()
	l.SelfAttn = Register(&l.Base, "self_attn", c.attention(dModel, nhead))
	l.MultiheadAttn = Register(&l.Base, "multihead_attn", c.attention(dModel, nhead))
	l.Linear1 = Register(&l.Base, "linear1", c.linear(dModel, c.DimFeedforward))
	l.feedForward.dropout = Register(&l.Base, "dropout", NewDropout(c.Dropout))
	l.Linear2 = Register(&l.Base, "linear2", c.linear(c.DimFeedforward, dModel))
	l.Norm1 = Register(&l.Base, "norm1", c.norm(dModel))
	l.Norm2 = Register(&l.Base, "norm2", c.norm(dModel))
	l.Norm3 = Register(&l.Base, "norm3", c.norm(dModel))
	l.dropout1 = Register(&l.Base, "dropout1", NewDropout(c.Dropout))
	l.dropout2 = Register(&l.Base, "dropout2", NewDropout(c.Dropout))
	l.out = Register(&l.Base, "dropout3", NewDropout(c.Dropout))
	return l
}

// Forward panics: a decoder layer needs the encoder's output; call Decode.
func (l *TransformerDecoderLayer) Forward(*torch.Tensor) *torch.Tensor {
	panic("nn: TransformerDecoderLayer needs memory; call Decode(tgt, memory, tgtMasks, memoryMasks)")
}

// Decode runs the layer on tgt attending to memory, as layer(tgt, memory, tgt_mask,
// memory_mask, tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal,
// memory_is_causal) with the masks grouped per attention.
func (l *TransformerDecoderLayer) Decode(tgt, memory *torch.Tensor, tgtMasks, memoryMasks AttentionMasks) *torch.Tensor {
	sa := func(x *torch.Tensor) *torch.Tensor { return l.dropout1.Forward(l.SelfAttn.Attend(x, x, x, tgtMasks)) }
	mha := func(x *torch.Tensor) *torch.Tensor {
		return l.dropout2.Forward(l.MultiheadAttn.Attend(x, memory, memory, memoryMasks))
	}
	x := tgt
	if l.NormFirst {
		x = x.Add(sa(l.Norm1.Forward(x)))
		x = x.Add(mha(l.Norm2.Forward(x)))
		return x.Add(l.forward(l.Norm3.Forward(x)))
	}
	x = l.Norm1.Forward(x.Add(sa(x)))
	x = l.Norm2.Forward(x.Add(mha(x)))
	return l.Norm3.Forward(x.Add(l.forward(x)))
}

// TransformerEncoder is nn.TransformerEncoder: encoder layers "layers.0", "layers.1", ...
// applied in order, then an optional LayerNorm "norm".
type TransformerEncoder struct {
	Base
	Layers []*TransformerEncoderLayer
	Norm   *LayerNorm // nil for none
}

// NewTransformerEncoder returns nn.TransformerEncoder(layer, numLayers, norm) with
// numLayers layers made by newLayer. PyTorch deep-copies one layer, so its layers start
// with equal weights; here each starts with its own draw. norm may be nil.
func NewTransformerEncoder(numLayers int, newLayer func() *TransformerEncoderLayer, norm *LayerNorm) *TransformerEncoder {
	e := &TransformerEncoder{}
	e.Layers, e.Norm = stack(&e.Base, numLayers, newLayer, norm)
	return e
}

// Forward runs every layer on src without masks.
func (e *TransformerEncoder) Forward(src *torch.Tensor) *torch.Tensor {
	return e.ForwardMasked(src, AttentionMasks{})
}

// ForwardMasked runs every layer with the same masks (mask, src_key_padding_mask,
// is_causal), then the final norm.
func (e *TransformerEncoder) ForwardMasked(src *torch.Tensor, masks AttentionMasks) *torch.Tensor {
	x := src
	for _, l := range e.Layers {
		x = l.ForwardMasked(x, masks)
	}
	if e.Norm != nil {
		x = e.Norm.Forward(x)
	}
	return x
}

// TransformerDecoder is nn.TransformerDecoder: decoder layers "layers.0", "layers.1", ...
// applied in order, then an optional LayerNorm "norm".
type TransformerDecoder struct {
	Base
	Layers []*TransformerDecoderLayer
	Norm   *LayerNorm // nil for none
}

// NewTransformerDecoder returns nn.TransformerDecoder(layer, numLayers, norm) with
// numLayers layers made by newLayer (each with its own initial weights). norm may be nil.
func NewTransformerDecoder(numLayers int, newLayer func() *TransformerDecoderLayer, norm *LayerNorm) *TransformerDecoder {
	d := &TransformerDecoder{}
	d.Layers, d.Norm = stack(&d.Base, numLayers, newLayer, norm)
	return d
}

// Forward panics: a decoder needs the encoder's output; call Decode.
func (d *TransformerDecoder) Forward(*torch.Tensor) *torch.Tensor {
	panic("nn: TransformerDecoder needs memory; call Decode(tgt, memory, tgtMasks, memoryMasks)")
}

// Decode runs every layer on tgt attending to memory with the same masks, then the
// final norm.
func (d *TransformerDecoder) Decode(tgt, memory *torch.Tensor, tgtMasks, memoryMasks AttentionMasks) *torch.Tensor {
	x := tgt
	for _, l := range d.Layers {
		x = l.Decode(x, memory, tgtMasks, memoryMasks)
	}
	if d.Norm != nil {
		x = d.Norm.Forward(x)
	}
	return x
}

// stack registers numLayers layers from newLayer as "layers.0", "layers.1", ... and norm
// (when not nil) as "norm" in b, the layout of nn.TransformerEncoder and -Decoder.
func stack[L Module](b *Base, numLayers int, newLayer func() L, norm *LayerNorm) ([]L, *LayerNorm) {
	list := Register(b, "layers", NewModuleList())
	var layers []L
	for i := 0; i < numLayers; i++ {
		l := newLayer()
		list.Append(l)
		layers = append(layers, l)
	}
	if norm != nil {
		Register(b, "norm", norm)
	}
	return layers, norm
}

// Transformer is nn.Transformer: a TransformerEncoder "encoder" and a TransformerDecoder
// "decoder", each ending in a LayerNorm ("encoder.norm", "decoder.norm").
type Transformer struct {
	Base
	Encoder *TransformerEncoder
	Decoder *TransformerDecoder
}

// NewTransformer returns nn.Transformer(dModel, nhead, numEncoderLayers,
// numDecoderLayers, ...) with the layers' configuration c, initialised as PyTorch does:
// every weight matrix Xavier-uniform.
func NewTransformer(dModel, nhead int64, numEncoderLayers, numDecoderLayers int, c TransformerLayerConfig) *Transformer {
	c = c.withDefaults()
	t := &Transformer{}
	t.Encoder = Register(&t.Base, "encoder", NewTransformerEncoder(numEncoderLayers,
		func() *TransformerEncoderLayer { return NewTransformerEncoderLayer(dModel, nhead, c) }, c.norm(dModel)))
	t.Decoder = Register(&t.Base, "decoder", NewTransformerDecoder(numDecoderLayers,
		func() *TransformerDecoderLayer { return NewTransformerDecoderLayer(dModel, nhead, c) }, c.norm(dModel)))
	for _, p := range NamedParameters(t) {
		if p.Tensor.Dim() > 1 {
			InitXavierUniform(p.Tensor, 1)
		}
	}
	return t
}

// Forward panics: a transformer takes a source and a target; call Transduce.
func (t *Transformer) Forward(*torch.Tensor) *torch.Tensor {
	panic("nn: Transformer takes src and tgt; call Transduce(src, tgt, srcMasks, tgtMasks, memoryMasks)")
}

// Transduce encodes src (with src_mask and src_key_padding_mask in srcMasks) and decodes
// tgt against it (tgt_mask, tgt_key_padding_mask in tgtMasks; memory_mask,
// memory_key_padding_mask in memoryMasks), as transformer(src, tgt, ...).
func (t *Transformer) Transduce(src, tgt *torch.Tensor, srcMasks, tgtMasks, memoryMasks AttentionMasks) *torch.Tensor {
	return t.Decoder.Decode(tgt, t.Encoder.ForwardMasked(src, srcMasks), tgtMasks, memoryMasks)
}
