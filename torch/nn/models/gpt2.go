package models

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// GPT2Config is Hugging Face transformers' GPT2Config, with the keys of its config.json.
// Start from DefaultGPT2Config (GPT-2 small) and change what differs.
type GPT2Config struct {
	VocabSize                  int64    `json:"vocab_size"`
	NPositions                 int64    `json:"n_positions"`
	NEmbd                      int64    `json:"n_embd"`
	NLayer                     int64    `json:"n_layer"`
	NHead                      int64    `json:"n_head"`
	NInner                     *int64   `json:"n_inner"` // nil: 4·n_embd
	ActivationFunction         string   `json:"activation_function"`
	ResidPdrop                 float64  `json:"resid_pdrop"`
	EmbdPdrop                  float64  `json:"embd_pdrop"`
	AttnPdrop                  float64  `json:"attn_pdrop"`
	LayerNormEpsilon           float64  `json:"layer_norm_epsilon"`
	InitializerRange           float64  `json:"initializer_range"`
	ScaleAttnWeights           bool     `json:"scale_attn_weights"`
	ScaleAttnByInverseLayerIdx bool     `json:"scale_attn_by_inverse_layer_idx"`
	ReorderAndUpcastAttn       bool     `json:"reorder_and_upcast_attn"`
	TieWordEmbeddings          bool     `json:"tie_word_embeddings"`
	BOSTokenID                 *int64   `json:"bos_token_id"`
	EOSTokenID                 *int64   `json:"eos_token_id"`
	ModelType                  string   `json:"model_type"`
	Architectures              []string `json:"architectures,omitempty"`
}

// DefaultGPT2Config returns GPT2Config()'s defaults: GPT-2 small (124M parameters,
// 50257 tokens, 1024 positions, 12 layers of width 768 with 12 heads).
func DefaultGPT2Config() GPT2Config {
	eos := int64(50256)
	return GPT2Config{
		VocabSize: 50257, NPositions: 1024, NEmbd: 768, NLayer: 12, NHead: 12,
		ActivationFunction: "gelu_new", ResidPdrop: 0.1, EmbdPdrop: 0.1, AttnPdrop: 0.1,
		LayerNormEpsilon: 1e-5, InitializerRange: 0.02, ScaleAttnWeights: true,
		TieWordEmbeddings: true, BOSTokenID: &eos, EOSTokenID: &eos, ModelType: "gpt2",
	}
}

func (c GPT2Config) inner() int64 {
	if c.NInner != nil {
		return *c.NInner
	}
	return 4 * c.NEmbd
}

func (c GPT2Config) validate() error {
	const cfg = "GPT2Config"
	err := checkSizes(cfg,
		configSize{"vocab_size", c.VocabSize, 1, maxVocab}, configSize{"n_positions", c.NPositions, 1, maxPositions},
		configSize{"n_embd", c.NEmbd, 1, maxHidden}, configSize{"n_layer", c.NLayer, 0, maxLayers},
		configSize{"n_head", c.NHead, 1, maxHidden}, configSize{"n_inner", c.inner(), 1, maxIntermediate})
	if err != nil {
		return err
	}
	err = checkProbability(cfg, probability{"resid_pdrop", c.ResidPdrop}, probability{"embd_pdrop", c.EmbdPdrop},
		probability{"attn_pdrop", c.AttnPdrop})
	if err != nil {
		return err
	}
	e, in := c.NEmbd, c.inner()
	block := 4*e + (3*e*e + 3*e) + (e*e + e) + (e*in + in) + (in*e + e)
	if err := checkFits(cfg, (c.VocabSize+c.NPositions)*e+c.NLayer*block+2*e); err != nil {
		return err
	}
	switch {
	case c.NEmbd%c.NHead != 0:
		return fmt.Errorf("models: GPT2Config: n_embd %d is not divisible by n_head %d", c.NEmbd, c.NHead)
	case c.ReorderAndUpcastAttn:
		return fmt.Errorf("models: GPT2Config: reorder_and_upcast_attn is not supported")
	}
	_, err = gpt2Activation(c.ActivationFunction)
	return err
}

// gpt2Activation is transformers' ACT2FN for the names GPT-2 configs use: the
// decoders' (decoderActivation) and tanh.
func gpt2Activation(name string) (func(*torch.Tensor) *torch.Tensor, error) {
	if name == "tanh" {
		return (*torch.Tensor).Tanh, nil
	}
	if act, err := decoderActivation(name); err == nil {
		return act, nil
	}
	return nil, fmt.Errorf("models: GPT-2 activation %q is not supported", name)
}

// Conv1D is transformers' Conv1D: a linear layer with the weight stored transposed,
// "weight" [in, out] and "bias" [out], computed as addmm(bias, x, weight).
type Conv1D struct {
	nn.Base
	Weight, Bias *torch.Tensor
}

// NewConv1D returns Conv1D(nf=out, nx=in) with weights from N(0, std²) and zero bias.
func NewConv1D(in, out int64, std float64) *Conv1D {
	c := &Conv1D{}
	c.Weight = c.RegisterParameter("weight", torch.Empty([]int64{in, out}, torch.Float32, torch.CPU))
	c.Bias = c.RegisterParameter("bias", torch.Zeros([]int64{out}, torch.Float32, torch.CPU))
	nn.InitNormal(c.Weight, 0, std)
	return c
}

// Forward returns x·weight + bias over the last dimension of x.
func (c *Conv1D) Forward(x *torch.Tensor) *torch.Tensor {
	shape := x.Shape()
	in := shape[len(shape)-1]
	shape[len(shape)-1] = c.Weight.Size(1)
	return c.Bias.Addmm(x.Reshape(-1, in), c.Weight, 1, 1).View(shape...)
}

// GPT2Attention is transformers' GPT2Attention (self-attention only): "c_attn" projects
// to queries, keys and values, "c_proj" back; causal, through
// torch.ScaledDotProductAttention.
type GPT2Attention struct {
	nn.Base
	CAttn, CProj        *Conv1D
	heads, dim          int64
	scale               float64
	attnDrop, residDrop *nn.Dropout
}

// attention is how a forward's queries see the keys: the mask and causal flag of
// DecoderInput.AttentionMask, and the cache.
type attention struct {
	mask   *torch.Tensor
	causal bool
	cache  *KVCache
}

func (a *GPT2Attention) forward(x *torch.Tensor, at attention, layer int) *torch.Tensor {
	shape := x.Shape()
	b, t, e := shape[0], shape[1], shape[2]
	qkv := a.CAttn.Forward(x).Split(e, 2)
	heads := func(y *torch.Tensor) *torch.Tensor { return y.View(b, t, a.heads, a.dim).Transpose(1, 2) }
	q, k, v := heads(qkv[0]), heads(qkv[1]), heads(qkv[2])
	if at.cache != nil {
		k, v = at.cache.Update(layer, k, v)
	}
	dropout := 0.0
	if a.Training() {
		dropout = a.attnDrop.P
	}
	y := torch.ScaledDotProductAttention(q, k, v, at.mask, dropout, at.causal, a.scale)
	y = y.Transpose(1, 2).Reshape(b, t, e)
	return a.residDrop.Forward(a.CProj.Forward(y))
}

// GPT2MLP is transformers' GPT2MLP: "c_fc", the activation, "c_proj", dropout.
type GPT2MLP struct {
	nn.Base
	CFc, CProj *Conv1D
	act        func(*torch.Tensor) *torch.Tensor
	drop       *nn.Dropout
}

// Forward applies the feed-forward block.
func (m *GPT2MLP) Forward(x *torch.Tensor) *torch.Tensor {
	return m.drop.Forward(m.CProj.Forward(m.act(m.CFc.Forward(x))))
}

// GPT2Block is transformers' GPT2Block: pre-norm attention ("ln_1", "attn") and MLP
// ("ln_2", "mlp"), each with a residual connection.
type GPT2Block struct {
	nn.Base
	Ln1, Ln2 *nn.LayerNorm
	Attn     *GPT2Attention
	MLP      *GPT2MLP
	index    int
}

func (b *GPT2Block) forward(x *torch.Tensor, at attention) *torch.Tensor {
	x = x.Add(b.Attn.forward(b.Ln1.Forward(x), at, b.index))
	return x.Add(b.MLP.Forward(b.Ln2.Forward(x)))
}

// GPT2Model is transformers' GPT2Model: token and position embeddings "wte" and "wpe",
// blocks "h.0", "h.1", ..., and the final LayerNorm "ln_f".
type GPT2Model struct {
	nn.Base
	Wte, Wpe *nn.Embedding
	H        []*GPT2Block
	LnF      *nn.LayerNorm
	drop     *nn.Dropout
	// checkpointing recomputes each block's activations in backward (GradientCheckpointer).
	checkpointing bool
	// unitHooks run around each block (nn.UnitHooker).
	unitHooks nn.UnitHooks
}

// SetGradientCheckpointing makes each block recompute its activations in the backward
// pass of training instead of keeping them (GradientCheckpointer).
func (g *GPT2Model) SetGradientCheckpointing(on bool) { g.checkpointing = on }

// FSDPUnits names the units of sharded training (trainer.UnitChooser): the token
// and the position embeddings (a unit each) and each block; the final norm falls to
// the root unit.
func (g *GPT2Model) FSDPUnits() []string {
	out := []string{"wte", "wpe"}
	for i := range g.H {
		out = append(out, fmt.Sprintf("h.%d", i))
	}
	return out
}

// SetUnitHooks runs h around each block's forward (nn.UnitHooker); the units are the
// blocks.
func (g *GPT2Model) SetUnitHooks(h nn.UnitHooks) []string {
	g.unitHooks = h
	return g.FSDPUnits()[2:]
}

// Forward returns the final hidden states [B, T, E] of in's tokens.
func (g *GPT2Model) Forward(in DecoderInput) *torch.Tensor {
	x := g.drop.Forward(g.Wte.Forward(in.InputIDs).Add(g.Wpe.Forward(in.Positions())))
	at := attention{cache: in.Cache}
	at.mask, at.causal = in.SDPAMask()
	for i, b := range g.H {
		if g.unitHooks != nil {
			g.unitHooks.BeforeUnit(i)
		}
		// A block's temporaries autograd did not save (the projections' outputs before
		// the residual adds) are freed when it returns, as in PyTorch. The cache's
		// buffers are its own (escaped), so they stay.
		if g.checkpointing && in.Cache == nil && b.Training() {
			x = torch.Local(func() *torch.Tensor {
				return nn.Checkpoint(b, func(x *torch.Tensor, ex []*torch.Tensor) *torch.Tensor {
					return b.forward(x, attention{mask: ex[0], causal: at.causal})
				}, x, at.mask)
			})
		} else {
			x = torch.Local(func() *torch.Tensor { return b.forward(x, at) })
		}
		if g.unitHooks != nil {
			x = g.unitHooks.AfterUnit(i, x)
		}
	}
	in.Cache.Advance(in.InputIDs.Size(1))
	return g.LnF.Forward(x)
}

// GPT2LMHeadModel is transformers' GPT2LMHeadModel: a GPT2Model "transformer" and the
// output projection "lm_head" (no bias), whose weight is transformer.wte.weight itself
// when the config ties them (the default): one parameter, listed once by
// NamedParameters and under both names in the state dict, as in PyTorch.
type GPT2LMHeadModel struct {
	nn.Base
	Config      GPT2Config
	Transformer *GPT2Model
	LMHead      *nn.Linear
}

// NewGPT2LMHeadModel returns GPT2LMHeadModel(config) initialised as transformers does:
// weights from N(0, initializer_range²), the residual projections (attn.c_proj,
// mlp.c_proj) with std initializer_range/sqrt(2·n_layer), biases zero, LayerNorms one
// and zero. It returns an error for a config it cannot build.
func NewGPT2LMHeadModel(c GPT2Config) (*GPT2LMHeadModel, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	act, _ := gpt2Activation(c.ActivationFunction)
	std := c.InitializerRange
	projStd := std / math.Sqrt(2*float64(c.NLayer))
	eps := nn.Eps(c.LayerNormEpsilon)
	m := &GPT2LMHeadModel{Config: c}
	tr := &GPT2Model{}
	m.Transformer = nn.Register(&m.Base, "transformer", tr)
	tr.Wte = nn.Register(&tr.Base, "wte", nn.NewEmbedding(c.VocabSize, c.NEmbd))
	tr.Wpe = nn.Register(&tr.Base, "wpe", nn.NewEmbedding(c.NPositions, c.NEmbd))
	nn.InitNormal(tr.Wte.Weight, 0, std)
	nn.InitNormal(tr.Wpe.Weight, 0, std)
	tr.drop = nn.Register(&tr.Base, "drop", nn.NewDropout(c.EmbdPdrop))
	h := nn.Register(&tr.Base, "h", nn.NewModuleList())
	for i := int64(0); i < c.NLayer; i++ {
		b := &GPT2Block{index: int(i)}
		b.Ln1 = nn.Register(&b.Base, "ln_1", nn.NewLayerNorm([]int64{c.NEmbd}, eps))
		a := &GPT2Attention{heads: c.NHead, dim: c.NEmbd / c.NHead, scale: 1}
		if c.ScaleAttnWeights {
			a.scale = 1 / math.Sqrt(float64(a.dim))
		}
		if c.ScaleAttnByInverseLayerIdx {
			a.scale /= float64(i + 1)
		}
		a.CAttn = nn.Register(&a.Base, "c_attn", NewConv1D(c.NEmbd, 3*c.NEmbd, std))
		a.CProj = nn.Register(&a.Base, "c_proj", NewConv1D(c.NEmbd, c.NEmbd, projStd))
		a.attnDrop = nn.Register(&a.Base, "attn_dropout", nn.NewDropout(c.AttnPdrop))
		a.residDrop = nn.Register(&a.Base, "resid_dropout", nn.NewDropout(c.ResidPdrop))
		b.Attn = nn.Register(&b.Base, "attn", a)
		b.Ln2 = nn.Register(&b.Base, "ln_2", nn.NewLayerNorm([]int64{c.NEmbd}, eps))
		mlp := &GPT2MLP{act: act}
		mlp.CFc = nn.Register(&mlp.Base, "c_fc", NewConv1D(c.NEmbd, c.inner(), std))
		mlp.CProj = nn.Register(&mlp.Base, "c_proj", NewConv1D(c.inner(), c.NEmbd, projStd))
		mlp.drop = nn.Register(&mlp.Base, "dropout", nn.NewDropout(c.ResidPdrop))
		b.MLP = nn.Register(&b.Base, "mlp", mlp)
		h.Append(b)
		tr.H = append(tr.H, b)
	}
	tr.LnF = nn.Register(&tr.Base, "ln_f", nn.NewLayerNorm([]int64{c.NEmbd}, eps))
	if c.TieWordEmbeddings {
		m.LMHead = &nn.Linear{Weight: tr.Wte.Weight}
		m.LMHead.RegisterParameter("weight", tr.Wte.Weight)
	} else {
		m.LMHead = nn.NewLinear(c.NEmbd, c.VocabSize, nn.NoBias())
		nn.InitNormal(m.LMHead.Weight, 0, std)
	}
	nn.Register(&m.Base, "lm_head", m.LMHead)
	return m, nil
}

// Forward returns the logits [B, T, vocab] of in's tokens (CausalLM).
func (m *GPT2LMHeadModel) Forward(in DecoderInput) *torch.Tensor {
	return m.OutputHead().Logits(m.HiddenStates(in))
}

// HiddenStates returns the final hidden states [B, T, n_embd] of in's tokens, after
// ln_f (HiddenStateLM).
func (m *GPT2LMHeadModel) HiddenStates(in DecoderInput) *torch.Tensor {
	return m.Transformer.Forward(in)
}

// OutputHead returns lm_head (HiddenStateLM).
func (m *GPT2LMHeadModel) OutputHead() LMHead { return LMHead{Layer: m.LMHead} }

// DecoderConfig returns the vocabulary, n_positions and the special tokens (CausalLM).
func (m *GPT2LMHeadModel) DecoderConfig() DecoderConfig {
	var eos TokenIDs
	if m.Config.EOSTokenID != nil {
		eos = TokenIDs{*m.Config.EOSTokenID}
	}
	return newDecoderConfig(m.Config.VocabSize, m.Config.NPositions, m.Config.BOSTokenID, eos)
}

// Loss returns the language-modelling loss transformers computes for labels=ids: the
// mean cross-entropy of the logits at each position against the next token, with
// -100 labels ignored, chunked for vocabularies of ChunkedLossMinVocab tokens and more
// (LMLoss, LossAuto).
func (m *GPT2LMHeadModel) Loss(ids *torch.Tensor) *torch.Tensor {
	return LMLoss(m, DecoderInput{InputIDs: ids}, ids, LossAuto)
}

// PretrainedConfig returns the model's config as config.json holds it (Pretrained).
func (m *GPT2LMHeadModel) PretrainedConfig() any {
	c := m.Config
	c.ModelType, c.Architectures = "gpt2", []string{"GPT2LMHeadModel"}
	return c
}

func init() {
	RegisterArchitecture(Architecture{ModelType: "gpt2", Class: "GPT2LMHeadModel",
		New: func(raw []byte) (CausalLM, error) {
			c := DefaultGPT2Config()
			if err := json.Unmarshal(raw, &c); err != nil {
				return nil, err
			}
			return NewGPT2LMHeadModel(c)
		},
		Rename: gpt2Name})
}

// gpt2Name maps the names of GPT-2 checkpoints to GPT2LMHeadModel's: the Hub's "gpt2"
// has no "transformer." prefix, and older transformers versions saved the causal-mask
// buffers attn.bias and attn.masked_bias, which the model computes instead.
func gpt2Name(name string) string {
	if strings.HasSuffix(name, ".attn.bias") || strings.HasSuffix(name, ".attn.masked_bias") {
		return ""
	}
	if !strings.HasPrefix(name, "transformer.") && !strings.HasPrefix(name, "lm_head.") {
		return "transformer." + name
	}
	return name
}

// SavePretrained is SavePretrained(dir, m, SaveOptions{}): one model.safetensors.
func (m *GPT2LMHeadModel) SavePretrained(dir string) error {
	return SavePretrained(dir, m, SaveOptions{})
}
