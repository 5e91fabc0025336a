package models

import (
	"fmt"
	"math"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// ViTConfig holds torchvision's VisionTransformer arguments. InChannels (default 3, as
// torchvision always has) lets a ViT take grey images such as Fashion-MNIST's.
type ViTConfig struct {
	ImageSize, PatchSize int64
	NumLayers, NumHeads  int64
	HiddenDim, MLPDim    int64
	Dropout              float64
	AttentionDropout     float64
	NumClasses           int64 // default 1000
	InChannels           int64 // default 3
}

// ViTEncoderBlock is torchvision's EncoderBlock: pre-norm self-attention ("ln_1",
// "self_attention") and MLP ("ln_2", "mlp.0" and "mlp.3" the two Linears, GELU between).
type ViTEncoderBlock struct {
	nn.Base
	Ln1, Ln2      *nn.LayerNorm
	SelfAttention *nn.MultiheadAttention
	MLP           *nn.Sequential
	dropout       *nn.Dropout
}

// Forward applies the block to x [N, S, D].
func (b *ViTEncoderBlock) Forward(x *torch.Tensor) *torch.Tensor {
	y := b.Ln1.Forward(x)
	x = b.dropout.Forward(b.SelfAttention.Attend(y, y, y, nn.AttentionMasks{})).Add(x)
	return x.Add(b.MLP.Forward(b.Ln2.Forward(x)))
}

// ViTEncoder is torchvision's Encoder: "pos_embedding" [1, S, D], the blocks
// "layers.encoder_layer_0", ..., and the final LayerNorm "ln".
type ViTEncoder struct {
	nn.Base
	PosEmbedding *torch.Tensor
	Layers       []*ViTEncoderBlock
	Ln           *nn.LayerNorm
	dropout      *nn.Dropout
}

// Forward adds the position embedding and runs the blocks and the norm.
func (e *ViTEncoder) Forward(x *torch.Tensor) *torch.Tensor {
	x = e.dropout.Forward(x.Add(e.PosEmbedding))
	for _, l := range e.Layers {
		// Each block's temporaries that autograd did not save (the attention projection's
		// and the MLP's outputs before the residual adds, a LayerNorm's output cast for a
		// bf16 matmul) are freed when it returns, as in PyTorch: not held to the step's end.
		x = torch.Local(func() *torch.Tensor { return l.Forward(x) })
	}
	return e.Ln.Forward(x)
}

// VisionTransformer is torchvision.models.VisionTransformer with its names:
// "class_token", "conv_proj" (the patch embedding), "encoder" and "heads.head", so its
// state dict and torchvision's load into each other strictly.
type VisionTransformer struct {
	nn.Base
	Config     ViTConfig
	ClassToken *torch.Tensor
	ConvProj   *nn.Conv2d
	Encoder    *ViTEncoder
	Head       *nn.Linear
}

// validate checks every size before anything is allocated, as the Hugging Face
// configs' validate does: the sizes often come from a flag or from the data (an image's
// size, its channels, the number of classes).
func (c ViTConfig) validate() error {
	const cfg = "models: ViTConfig"
	err := checkSizes(cfg,
		configSize{"image_size", c.ImageSize, 1, maxPositions}, configSize{"patch_size", c.PatchSize, 1, c.ImageSize},
		configSize{"num_layers", c.NumLayers, 0, maxLayers}, configSize{"num_heads", c.NumHeads, 1, maxHidden},
		configSize{"hidden_dim", c.HiddenDim, 1, maxHidden}, configSize{"mlp_dim", c.MLPDim, 1, maxIntermediate},
		configSize{"num_classes", c.NumClasses, 1, maxVocab}, configSize{"in_channels", c.InChannels, 1, maxHidden})
	if err != nil {
		return err
	}
	switch {
	case c.ImageSize%c.PatchSize != 0:
		return fmt.Errorf("%s: image_size %d is not divisible by patch_size %d", cfg, c.ImageSize, c.PatchSize)
	case c.HiddenDim%c.NumHeads != 0:
		return fmt.Errorf("%s: hidden_dim %d is not divisible by num_heads %d", cfg, c.HiddenDim, c.NumHeads)
	}
	if err := checkSizes(cfg, configSize{"(image_size/patch_size)²+1 tokens", c.seq(), 1, maxPositions}); err != nil {
		return err
	}
	if err := checkProbability(cfg, probability{"dropout", c.Dropout},
		probability{"attention_dropout", c.AttentionDropout}); err != nil {
		return err
	}
	d, patch := c.HiddenDim, c.InChannels*c.PatchSize*c.PatchSize
	block := 4*d + (3*d*d + 3*d) + (d*d + d) + (d*c.MLPDim + c.MLPDim) + (c.MLPDim*d + d)
	return checkFits(cfg, d+(patch*d+d)+c.seq()*d+c.NumLayers*block+2*d+(d*c.NumClasses+c.NumClasses))
}

// seq is the encoder's sequence length: the patches and the class token.
func (c ViTConfig) seq() int64 {
	n := c.ImageSize / c.PatchSize
	return n*n + 1
}

// NewVisionTransformer returns VisionTransformer(image_size, patch_size, num_layers,
// num_heads, hidden_dim, mlp_dim, ...) initialised as torchvision does (the patch
// projection from a plain rather than truncated normal; the head zero). It returns an
// error naming the field for a size torchvision rejects (an image size not divisible
// by the patch size, a width not divisible by the heads) or one out of range.
func NewVisionTransformer(c ViTConfig) (*VisionTransformer, error) {
	if c.NumClasses == 0 {
		c.NumClasses = 1000
	}
	if c.InChannels == 0 {
		c.InChannels = 3
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	d := c.HiddenDim
	seq := c.seq()
	v := &VisionTransformer{Config: c}
	v.ClassToken = v.RegisterParameter("class_token", torch.Zeros([]int64{1, 1, d}, torch.Float32, torch.CPU))
	v.ConvProj = nn.Register(&v.Base, "conv_proj", nn.NewConv2d(c.InChannels, d, c.PatchSize, nn.Stride(c.PatchSize)))
	nn.InitNormal(v.ConvProj.Weight, 0, math.Sqrt(1/float64(c.InChannels*c.PatchSize*c.PatchSize)))
	nn.InitConstant(v.ConvProj.Bias, 0)

	e := &ViTEncoder{}
	e.PosEmbedding = e.RegisterParameter("pos_embedding", torch.Empty([]int64{1, seq, d}, torch.Float32, torch.CPU))
	nn.InitNormal(e.PosEmbedding, 0, 0.02)
	e.dropout = nn.Register(&e.Base, "dropout", nn.NewDropout(c.Dropout))
	layers := nn.Register(&e.Base, "layers", &viTLayers{})
	for i := int64(0); i < c.NumLayers; i++ {
		b := &ViTEncoderBlock{}
		b.Ln1 = nn.Register(&b.Base, "ln_1", nn.NewLayerNorm([]int64{d}, nn.Eps(1e-6)))
		b.SelfAttention = nn.Register(&b.Base, "self_attention", nn.NewMultiheadAttention(d, c.NumHeads,
			nn.MultiheadAttentionConfig{Dropout: c.AttentionDropout, BatchFirst: true}))
		b.dropout = nn.Register(&b.Base, "dropout", nn.NewDropout(c.Dropout))
		b.Ln2 = nn.Register(&b.Base, "ln_2", nn.NewLayerNorm([]int64{d}, nn.Eps(1e-6)))
		fc1, fc2 := nn.NewLinear(d, c.MLPDim), nn.NewLinear(c.MLPDim, d)
		for _, l := range []*nn.Linear{fc1, fc2} {
			nn.InitXavierUniform(l.Weight, 1)
			nn.InitNormal(l.Bias, 0, 1e-6)
		}
		b.MLP = nn.Register(&b.Base, "mlp", nn.NewSequential(fc1, nn.NewGELU(), nn.NewDropout(c.Dropout), fc2, nn.NewDropout(c.Dropout)))
		layers.RegisterModule(fmt.Sprintf("encoder_layer_%d", i), b)
		e.Layers = append(e.Layers, b)
	}
	e.Ln = nn.Register(&e.Base, "ln", nn.NewLayerNorm([]int64{d}, nn.Eps(1e-6)))
	v.Encoder = nn.Register(&v.Base, "encoder", e)

	heads := nn.Register(&v.Base, "heads", &viTLayers{})
	v.Head = nn.NewLinear(d, c.NumClasses)
	nn.InitConstant(v.Head.Weight, 0)
	nn.InitConstant(v.Head.Bias, 0)
	heads.RegisterModule("head", v.Head)
	return v, nil
}

// viTLayers is a named container (torchvision's nn.Sequential over an OrderedDict); the
// owner calls its members itself.
type viTLayers struct{ nn.Base }

func (*viTLayers) Forward(x *torch.Tensor) *torch.Tensor {
	panic("models: ViT containers are run by their owner")
}

// Forward returns the logits [N, classes] for images [N, C, H, W].
func (v *VisionTransformer) Forward(x *torch.Tensor) *torch.Tensor {
	n := x.Size(0)
	if x.Size(2) != v.Config.ImageSize || x.Size(3) != v.Config.ImageSize {
		panic(&torch.Error{Op: "vit", Msg: fmt.Sprintf("expected %d×%d images, got %v", v.Config.ImageSize, v.Config.ImageSize, x.Shape())})
	}
	// The patch embedding's output is not saved by the concatenation: freed at once.
	tokens := torch.Local(func() *torch.Tensor {
		p := v.ConvProj.Forward(x)
		p = p.Reshape(n, v.Config.HiddenDim, -1).Permute(0, 2, 1)
		return torch.Cat([]*torch.Tensor{v.ClassToken.Expand(n, -1, -1), p}, 1)
	})
	return v.Head.Forward(v.Encoder.Forward(tokens).Select(1, 0))
}
