package models

import (
	"encoding/json"
	"fmt"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// MixtralConfig is transformers' MixtralConfig, with the keys of its config.json (the
// v5 form; ParseMixtralConfig reads the v4 form too): those of LlamaFamilyConfig, the
// sliding window and the experts. IntermediateSize is each expert's width. Start from
// DefaultMixtralConfig and change what differs.
type MixtralConfig struct {
	LlamaFamilyConfig
	// SlidingWindow is every layer's sliding window; nil is full attention.
	SlidingWindow *int64 `json:"sliding_window"`
	// NumLocalExperts is the number of experts of each layer, NumExpertsPerTok the
	// number each token is sent to.
	NumLocalExperts  int64 `json:"num_local_experts"`
	NumExpertsPerTok int64 `json:"num_experts_per_tok"`
	// OutputRouterLogits adds RouterAuxLossCoef times the routers' load-balancing loss
	// to the language-modelling loss (LMLoss, LMLossSum, Loss).
	OutputRouterLogits bool    `json:"output_router_logits"`
	RouterAuxLossCoef  PyFloat `json:"router_aux_loss_coef"`
	// RouterJitterNoise multiplies each sparse block's input by noise uniform in
	// [1-RouterJitterNoise, 1+RouterJitterNoise] in training.
	RouterJitterNoise PyFloat `json:"router_jitter_noise"`
}

// DefaultMixtralConfig returns MixtralConfig()'s defaults (Mixtral 8x7B: 32000 tokens,
// 32 layers of width 4096, 32 heads over 8 key/value heads, 8 experts of width 14336,
// 2 per token, rope_theta 10⁶, no sliding window).
func DefaultMixtralConfig() MixtralConfig {
	c := MixtralConfig{LlamaFamilyConfig: llamaFamilyDefaults("mixtral", 32000, 14336, 4096*32)}
	bos := int64(1)
	c.NumKeyValueHeads, c.BOSTokenID, c.EOSTokenID, c.RMSNormEps = 8, &bos, TokenIDs{2}, 1e-5
	c.RopeParameters.RopeTheta = 1e6
	c.NumLocalExperts, c.NumExpertsPerTok, c.RouterAuxLossCoef = 8, 2, 0.001
	return c
}

// ParseMixtralConfig reads a Mixtral config.json in either form transformers writes
// (see ParseLlamaConfig); num_experts is read as num_local_experts, as transformers'
// attribute_map does.
func ParseMixtralConfig(raw []byte) (MixtralConfig, error) {
	c, err := parseLlamaFamily(raw, DefaultMixtralConfig())
	if err != nil {
		return c, err
	}
	c.NumLocalExperts = numExpertsField(raw, c.NumLocalExperts)
	c.RopeParameters.RopeTheta = ropeThetaDefault(raw, c.RopeParameters.RopeTheta, 1e6)
	return c, nil
}

// numExpertsField returns config.json's num_experts when it has that key and not
// num_local_experts, otherwise n.
func numExpertsField(raw []byte, n int64) int64 {
	var keys struct {
		Local *int64 `json:"num_local_experts"`
		Alias *int64 `json:"num_experts"`
	}
	if json.Unmarshal(raw, &keys) == nil && keys.Local == nil && keys.Alias != nil {
		return *keys.Alias
	}
	return n
}

// ropeThetaDefault returns theta, or the family's default base when config.json
// gives none (no rope_theta and no rope_parameters' rope_theta).
func ropeThetaDefault(raw []byte, theta, def float64) float64 {
	var keys struct {
		Theta *float64 `json:"rope_theta"`
		Rope  *struct {
			Theta *float64 `json:"rope_theta"`
		} `json:"rope_parameters"`
		Scaling *struct {
			Theta *float64 `json:"rope_theta"`
		} `json:"rope_scaling"`
	}
	if json.Unmarshal(raw, &keys) != nil || keys.Theta != nil ||
		(keys.Rope != nil && keys.Rope.Theta != nil) || (keys.Scaling != nil && keys.Scaling.Theta != nil) {
		return theta
	}
	return def
}

// moe returns the sizes of the sparse blocks.
func (c MixtralConfig) moe() moeSizes {
	return moeSizes{experts: c.NumLocalExperts, topK: c.NumExpertsPerTok, hidden: c.HiddenSize,
		intermediate: c.IntermediateSize, act: c.HiddenAct, normTopK: true, jitter: float64(c.RouterJitterNoise),
		initStd: c.InitializerRange}
}

// MixtralForCausalLM is transformers' MixtralForCausalLM: Mistral's attention
// (sliding_window on every layer) and, in place of each layer's MLP, a SparseMoeBlock
// "mlp" whose router "gate" sends each token to num_experts_per_tok of
// num_local_experts experts, its weights renormalised over them. The experts' weights
// are fused as transformers 5 holds them (mlp.experts.gate_up_proj, mlp.experts.down_proj);
// LoadPretrained also reads the Hub's files, which store them per expert under
// "block_sparse_moe" (experts.N.w1, w3, w2), and SavePretrained writes that layout, as
// save_pretrained does.
type MixtralForCausalLM struct {
	nn.Base
	Config MixtralConfig
	Model  *DecoderModel[*MixtralDecoderLayer]
	LMHead *nn.Linear
	decoderLM[*MixtralDecoderLayer]
	routerLoss
}

// MixtralDecoderLayer is transformers' MixtralDecoderLayer: Llama's layer with the
// sparse block in place of the MLP.
type MixtralDecoderLayer struct {
	nn.Base
	SelfAttn               *Attention
	MLP                    *SparseMoeBlock
	InputLayernorm         *RMSNorm
	PostAttentionLayernorm *RMSNorm
}

func (l *MixtralDecoderLayer) forward(x *torch.Tensor, in layerInput) *torch.Tensor {
	a := l.SelfAttn
	q, k, v := a.Project(l.InputLayernorm.Forward(x))
	x = x.Add(a.Attend(a.SplitHeads(q), a.SplitHeads(k), a.SplitHeads(v), in))
	return x.Add(l.MLP.Forward(l.PostAttentionLayernorm.Forward(x)))
}

func (l *MixtralDecoderLayer) window() int64 { return l.SelfAttn.Window }

func (l *MixtralDecoderLayer) routers() *routerRecord { return l.MLP.routers }

// mixtralExperts are the Hub's names of Mixtral's experts.
var mixtralExperts = expertNames{block: "block_sparse_moe", gate: "w1", up: "w3", down: "w2"}

// NewMixtralForCausalLM returns MixtralForCausalLM(config) initialised as transformers
// does, in float32 on the CPU; a config out of range is an error naming the field.
func NewMixtralForCausalLM(c MixtralConfig) (*MixtralForCausalLM, error) {
	const cfg = "MixtralConfig"
	m := &MixtralForCausalLM{Config: withDefaults(c)}
	window, err := m.Config.slidingWindow(cfg, m.Config.SlidingWindow)
	if err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	s, moe := m.Config.sizes(), m.Config.moe()
	if err := moe.validate(cfg, "num_local_experts", "intermediate_size", s.layers); err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	m.routerLoss = newRouterLoss(m.Config.OutputRouterLogits, float64(m.Config.RouterAuxLossCoef), moe)
	a := s.attention(false, false)
	m.decoderLM, err = buildDecoder(&m.Base, cfg, s, m.Config.TieWordEmbeddings, func(i int) *MixtralDecoderLayer {
		l := &MixtralDecoderLayer{}
		l.SelfAttn = nn.Register(&l.Base, "self_attn", newAttention(a, i))
		l.SelfAttn.Window = window
		l.MLP = nn.Register(&l.Base, "mlp", newSparseMoeBlock(moe, false, m.record))
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
	RegisterArchitecture(Architecture{ModelType: "mixtral", Class: "MixtralForCausalLM", New: fromJSON(ParseMixtralConfig, NewMixtralForCausalLM), Rename: decoderCheckpointKey})
}

// Loss returns the language-modelling loss transformers computes for labels=ids, with
// the routers' load-balancing loss when output_router_logits is set.
func (m *MixtralForCausalLM) Loss(ids *torch.Tensor) *torch.Tensor {
	return lmLoss(m, chunked(m, LossAuto), DecoderInput{InputIDs: ids}, ids)
}

func (m *MixtralForCausalLM) fromCheckpoint(sd *checkpoint.Dict, fileOf func(string) string) error {
	return fuseExperts(m, sd, mixtralExperts, fileOf)
}

func (m *MixtralForCausalLM) hubLayout() checkpoint.Layout { return expertLayout(m, mixtralExperts) }

// PretrainedConfig returns the config as save_pretrained writes it (the v5 form), with
// model_type and architectures set.
func (m *MixtralForCausalLM) PretrainedConfig() any {
	return pretrained(m.Config, "mixtral", "MixtralForCausalLM")
}
