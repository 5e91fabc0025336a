package models

import (
	"fmt"
	"slices"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// Qwen3MoeConfig is transformers' Qwen3MoeConfig, with the keys of its config.json (the
// v5 form; ParseQwen3MoeConfig reads the v4 form too): those of LlamaFamilyConfig,
// attention_bias, the sliding window and the experts. IntermediateSize is the width of
// the dense layers' MLP, MoeIntermediateSize each expert's. Start from
// DefaultQwen3MoeConfig and change what differs.
type Qwen3MoeConfig struct {
	LlamaFamilyConfig
	// AttentionBias puts biases on q_proj, k_proj, v_proj and o_proj.
	AttentionBias bool `json:"attention_bias"`
	// UseSlidingWindow gives every layer SlidingWindow; without it SlidingWindow is
	// null, as transformers' __post_init__ sets it.
	UseSlidingWindow bool   `json:"use_sliding_window"`
	SlidingWindow    *int64 `json:"sliding_window"`
	// NumLocalExperts (num_experts in the v4 form) is the number of experts of each
	// sparse layer, NumExpertsPerTok the number each token is sent to.
	NumLocalExperts     int64 `json:"num_local_experts"`
	NumExpertsPerTok    int64 `json:"num_experts_per_tok"`
	MoeIntermediateSize int64 `json:"moe_intermediate_size"`
	// NormTopKProb renormalises the routing weights over each token's experts.
	NormTopKProb bool `json:"norm_topk_prob"`
	// DecoderSparseStep: layer i is sparse when (i+1) is a multiple of it and i is not
	// in MLPOnlyLayers; the other layers have a dense MLP of IntermediateSize.
	DecoderSparseStep int64   `json:"decoder_sparse_step"`
	MLPOnlyLayers     []int64 `json:"mlp_only_layers"`
	// OutputRouterLogits adds RouterAuxLossCoef times the routers' load-balancing loss
	// to the language-modelling loss (LMLoss, LMLossSum, Loss).
	OutputRouterLogits bool    `json:"output_router_logits"`
	RouterAuxLossCoef  PyFloat `json:"router_aux_loss_coef"`
}

// DefaultQwen3MoeConfig returns Qwen3MoeConfig()'s defaults (151936 tokens, 24 layers
// of width 2048, 32 heads over 4 key/value heads, 128 experts of width 768, 8 per
// token, 32768 positions, no sliding window, no BOS or EOS).
func DefaultQwen3MoeConfig() Qwen3MoeConfig {
	c := Qwen3MoeConfig{LlamaFamilyConfig: llamaFamilyDefaults("qwen3_moe", 151936, 6144, 32768)}
	window := int64(4096)
	c.HiddenSize, c.NumHiddenLayers, c.NumKeyValueHeads, c.SlidingWindow = 2048, 24, 4, &window
	c.NumLocalExperts, c.NumExpertsPerTok, c.MoeIntermediateSize, c.DecoderSparseStep = 128, 8, 768, 1
	c.RouterAuxLossCoef, c.MLPOnlyLayers = 0.001, []int64{}
	return c
}

// ParseQwen3MoeConfig reads a Qwen3-MoE config.json in either form transformers writes
// (see ParseLlamaConfig); v4's num_experts is num_local_experts.
func ParseQwen3MoeConfig(raw []byte) (Qwen3MoeConfig, error) {
	c, err := parseLlamaFamily(raw, DefaultQwen3MoeConfig())
	if err != nil {
		return c, err
	}
	c.NumLocalExperts = numExpertsField(raw, c.NumLocalExperts)
	return c, nil
}

// fillDefaults derives what Qwen3MoeConfig.__post_init__ derives: no sliding window
// without use_sliding_window, an empty mlp_only_layers for null.
func (c *Qwen3MoeConfig) fillDefaults() {
	c.LlamaFamilyConfig.fillDefaults()
	if !c.UseSlidingWindow {
		c.SlidingWindow = nil
	}
	if c.MLPOnlyLayers == nil {
		c.MLPOnlyLayers = []int64{}
	}
}

// sparse reports whether layer i has a sparse block, as Qwen3MoeDecoderLayer decides.
func (c Qwen3MoeConfig) sparse(i int64) bool {
	return !slices.Contains(c.MLPOnlyLayers, i) && c.NumLocalExperts > 0 && (i+1)%c.DecoderSparseStep == 0
}

// Qwen3MoeForCausalLM is transformers' Qwen3MoeForCausalLM: Qwen3's attention (per-head
// q/k norms, attention_bias, the sliding window on every layer when
// use_sliding_window) and, in the sparse layers, a SparseMoeBlock "mlp" whose router
// "gate" sends each token to num_experts_per_tok of num_experts experts of width
// moe_intermediate_size (renormalised when norm_topk_prob); the other layers have
// Qwen3's MLP. The experts are fused as transformers 5 holds them
// (mlp.experts.gate_up_proj, mlp.experts.down_proj); LoadPretrained also reads the
// Hub's per-expert files (mlp.experts.N.gate_proj, up_proj, down_proj), and
// SavePretrained writes that layout, as save_pretrained does.
type Qwen3MoeForCausalLM struct {
	nn.Base
	Config Qwen3MoeConfig
	Model  *DecoderModel[*Qwen3MoeDecoderLayer]
	LMHead *nn.Linear
	decoderLM[*Qwen3MoeDecoderLayer]
	routerLoss
}

// Qwen3MoeDecoderLayer is transformers' Qwen3MoeDecoderLayer: Qwen3's layer whose "mlp"
// is a SparseMoeBlock or, in the dense layers, a GatedMLP.
type Qwen3MoeDecoderLayer struct {
	nn.Base
	SelfAttn               *Attention
	MLP                    nn.Layer
	InputLayernorm         *RMSNorm
	PostAttentionLayernorm *RMSNorm
}

func (l *Qwen3MoeDecoderLayer) forward(x *torch.Tensor, in layerInput) *torch.Tensor {
	a := l.SelfAttn
	q, k, v := a.Project(l.InputLayernorm.Forward(x))
	q, k = a.QNorm.Forward(a.SplitHeads(q)), a.KNorm.Forward(a.SplitHeads(k))
	x = x.Add(a.Attend(q, k, a.SplitHeads(v), in))
	return x.Add(l.MLP.Forward(l.PostAttentionLayernorm.Forward(x)))
}

func (l *Qwen3MoeDecoderLayer) window() int64 { return l.SelfAttn.Window }

func (l *Qwen3MoeDecoderLayer) routers() *routerRecord {
	if b, ok := l.MLP.(*SparseMoeBlock); ok {
		return b.routers
	}
	return nil
}

// qwen3MoeExperts are the Hub's names of Qwen3-MoE's experts.
var qwen3MoeExperts = expertNames{block: "mlp", gate: "gate_proj", up: "up_proj", down: "down_proj"}

// NewQwen3MoeForCausalLM returns Qwen3MoeForCausalLM(config) initialised as
// transformers does, in float32 on the CPU; a config out of range is an error naming
// the field.
func NewQwen3MoeForCausalLM(c Qwen3MoeConfig) (*Qwen3MoeForCausalLM, error) {
	const cfg = "Qwen3MoeConfig"
	m := &Qwen3MoeForCausalLM{Config: withDefaults(c)}
	window, err := m.Config.slidingWindow(cfg, m.Config.SlidingWindow)
	if err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	s := m.Config.sizes()
	moe := moeSizes{experts: m.Config.NumLocalExperts, topK: m.Config.NumExpertsPerTok, hidden: s.hidden,
		intermediate: m.Config.MoeIntermediateSize, act: s.act, normTopK: m.Config.NormTopKProb,
		roundWeights: true, initStd: s.initStd}
	// num_experts 0 makes every layer dense, as in transformers.
	if m.Config.NumLocalExperts != 0 {
		err := moe.validate(cfg, "num_experts", "moe_intermediate_size", s.layers,
			configSize{"decoder_sparse_step", m.Config.DecoderSparseStep, 1, maxLayers})
		if err != nil {
			return nil, fmt.Errorf("models: %w", err)
		}
	}
	m.routerLoss = newRouterLoss(m.Config.OutputRouterLogits, float64(m.Config.RouterAuxLossCoef), moe)
	bias := m.Config.AttentionBias
	m.decoderLM, err = buildDecoder(&m.Base, cfg, s, m.Config.TieWordEmbeddings, func(i int) *Qwen3MoeDecoderLayer {
		l := &Qwen3MoeDecoderLayer{}
		a := nn.Register(&l.Base, "self_attn", newAttention(s.attention(bias, bias), i))
		a.QNorm = nn.Register(&a.Base, "q_norm", NewRMSNorm(s.headDim, s.eps))
		a.KNorm = nn.Register(&a.Base, "k_norm", NewRMSNorm(s.headDim, s.eps))
		a.Window = window
		l.SelfAttn = a
		if m.Config.sparse(int64(i)) {
			l.MLP = nn.Register(&l.Base, "mlp", newSparseMoeBlock(moe, true, m.record))
		} else {
			l.MLP = nn.Register(&l.Base, "mlp", newGatedMLP(s.hidden, s.intermediate, s.act, false, s.initStd))
		}
		l.InputLayernorm = nn.Register(&l.Base, "input_layernorm", NewRMSNorm(s.hidden, s.eps))
		l.PostAttentionLayernorm = nn.Register(&l.Base, "post_attention_layernorm", NewRMSNorm(s.hidden, s.eps))
		return l
	}, func() nn.Layer { return NewRMSNorm(s.hidden, s.eps) })
	if err != nil {
		return nil, err
	}
	m.Model, m.LMHead, m.family = m.model, m.lmHead, &m.Config.LlamaFamilyConfig
	return m, nil
}

func init() {
	RegisterArchitecture(Architecture{ModelType: "qwen3_moe", Class: "Qwen3MoeForCausalLM", New: fromJSON(ParseQwen3MoeConfig, NewQwen3MoeForCausalLM), Rename: decoderCheckpointKey})
}

// Loss returns the language-modelling loss transformers computes for labels=ids, with
// the routers' load-balancing loss when output_router_logits is set.
func (m *Qwen3MoeForCausalLM) Loss(ids *torch.Tensor) *torch.Tensor {
	return lmLoss(m, chunked(m, LossAuto), DecoderInput{InputIDs: ids}, ids)
}

func (m *Qwen3MoeForCausalLM) fromCheckpoint(sd *checkpoint.Dict, fileOf func(string) string) error {
	return fuseExperts(m, sd, qwen3MoeExperts, fileOf)
}

func (m *Qwen3MoeForCausalLM) hubLayout() checkpoint.Layout { return expertLayout(m, qwen3MoeExperts) }

// PretrainedConfig returns the config as save_pretrained writes it (the v5 form), with
// model_type and architectures set.
func (m *Qwen3MoeForCausalLM) PretrainedConfig() any {
	return pretrained(m.Config, "qwen3_moe", "Qwen3MoeForCausalLM")
}
