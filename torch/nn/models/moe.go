package models

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// This file holds the mixture-of-experts blocks Mixtral and Qwen3-MoE share, as
// transformers 5 writes them: the router TopKRouter ("gate"), the experts held as two
// fused 3-D parameters (Experts: "experts.gate_up_proj" and "experts.down_proj"), the
// SparseMoeBlock around them, and the routers' auxiliary load-balancing loss.

// moeSizes are a sparse block's sizes and routing settings.
type moeSizes struct {
	experts, topK, hidden, intermediate int64
	act                                 string
	// normTopK renormalises the top-k probabilities to sum to one (Mixtral always,
	// Qwen3-MoE when norm_topk_prob).
	normTopK bool
	// roundWeights rounds the routing weights to the router logits' dtype
	// (Qwen3-MoE); Mixtral keeps them in float32.
	roundWeights bool
	jitter       float64
	initStd      float64
}

// validate checks the sizes, then the more sizes given, then that layers of these
// blocks fit in memory (cfg names the config, the fields are config.json's).
func (s moeSizes) validate(cfg, expertsField, intermediateField string, layers int64, more ...configSize) error {
	err := checkSizes(cfg, configSize{expertsField, s.experts, 1, maxExperts},
		configSize{"num_experts_per_tok", s.topK, 1, s.experts},
		configSize{intermediateField, s.intermediate, 1, maxIntermediate})
	if err != nil {
		return err
	}
	if err := checkProbability(cfg, probability{"router_jitter_noise", s.jitter}); err != nil {
		return err
	}
	if _, err := decoderActivation(s.act); err != nil {
		return fmt.Errorf("%s: %w", cfg, err)
	}
	if err := checkSizes(cfg, more...); err != nil {
		return err
	}
	return checkFits(cfg, layers*s.params())
}

// maxExperts bounds num_local_experts (the largest released models have 512).
const maxExperts = 1 << 14

// params is the number of weights of one sparse block.
func (s moeSizes) params() int64 { return s.experts * (s.hidden + 3*s.hidden*s.intermediate) }

// TopKRouter is transformers 5's MixtralTopKRouter and Qwen3MoeTopKRouter ("gate"): a
// linear map without bias from the hidden states to one logit per expert ("weight",
// [experts, hidden]), a softmax in float32, and the TopK experts with the largest
// probabilities, whose probabilities are the routing weights — renormalised to sum to
// one when Normalize is set.
type TopKRouter struct {
	nn.Base
	Weight    *torch.Tensor
	TopK      int64
	Normalize bool
	// RoundWeights rounds the routing weights to the logits' dtype (Qwen3-MoE).
	RoundWeights bool
	hook         ParameterHook
}

// ParameterHook, set on a module (SetParameterHook), returns the tensor the module's
// forward uses in place of its parameter name, p: a LoRA adapter on the parameter
// (PEFT's target_parameters) adds its update there.
type ParameterHook = func(name string, p *torch.Tensor) *torch.Tensor

// HookedParameters names the parameter whose reads go through the hook: "weight".
func (r *TopKRouter) HookedParameters() []string { return []string{"weight"} }

// SetParameterHook makes Forward read its weight through h (nil: directly).
func (r *TopKRouter) SetParameterHook(h ParameterHook) { r.hook = h }

// Forward returns, for the hidden states x [N, hidden], the router logits [N, experts]
// in x's dtype, and each token's routing weights and experts [N, TopK] (the weights in
// float32 unless RoundWeights), largest first.
func (r *TopKRouter) Forward(x *torch.Tensor) (logits, weights, experts *torch.Tensor) {
	w := r.Weight
	if r.hook != nil {
		w = r.hook("weight", w)
	}
	logits = torch.Linear(x, w, nil)
	weights, experts = logits.ToDType(torch.Float32).Softmax(-1).TopK(r.TopK, -1, true, true)
	if r.Normalize {
		weights = weights.Div(weights.SumDims([]int64{-1}, true))
	}
	if r.RoundWeights {
		weights = weights.ToDType(logits.DType())
	}
	return logits, weights, experts
}

// Experts is transformers 5's MixtralExperts and Qwen3MoeExperts: every expert's gated
// MLP, down(act(gate(x)) · up(x)), held as two 3-D parameters, "gate_up_proj" [experts,
// 2·intermediate, hidden] (each expert's gate rows, then its up rows) and "down_proj"
// [experts, hidden, intermediate].
type Experts struct {
	nn.Base
	GateUpProj, DownProj *torch.Tensor
	act                  func(*torch.Tensor) *torch.Tensor
	hook                 ParameterHook
}

// HookedParameters names the parameters whose reads go through the hook, in
// registration order: "gate_up_proj", "down_proj".
func (e *Experts) HookedParameters() []string { return []string{"gate_up_proj", "down_proj"} }

// SetParameterHook makes Forward read its parameters through h (nil: directly).
func (e *Experts) SetParameterHook(h ParameterHook) { e.hook = h }

// Forward returns the experts' output for the hidden states x [N, hidden], each token
// sent to its experts [N, k] and their outputs summed with its weights [N, k]. The N·k
// (token, expert) pairs are sorted by expert, so that each expert with tokens runs
// once over all of them (one matrix product per projection), and the outputs are put
// back in the pairs' order and summed over each token's k experts — transformers 5's
// default grouped_mm experts, whose sum is deterministic where index_add's atomic adds
// on a GPU are not, and in the weights' dtype (float32 for Mixtral) before rounding to
// x's.
func (e *Experts) Forward(x, experts, weights *torch.Tensor) *torch.Tensor {
	n, k, h := experts.Size(0), experts.Size(1), x.Size(1)
	if n == 0 {
		return x.ZerosLike()
	}
	gateUp, down := e.GateUpProj, e.DownProj
	if e.hook != nil {
		gateUp, down = e.hook("gate_up_proj", gateUp), e.hook("down_proj", down)
	}
	dev := x.Device()
	flat := experts.Reshape(-1)
	sorted, perm := flat.Sort(0, false, true)
	counts := sorted.Bincount(nil, gateUp.Size(0)).Int64s()
	tokens := torch.Arange(0, float64(n), 1, torch.Int64, dev).Unsqueeze(1).Expand(n, k).Reshape(-1).IndexSelect(0, perm)
	xs := x.IndexSelect(0, tokens).ToDType(gateUp.DType())
	// One split of each parameter rather than a Select per expert: the backward pass
	// then writes the experts' gradients into one tensor, where each Select's would
	// allocate and add a gradient of the whole parameter.
	gus, downs := gateUp.Split(1, 0), down.Split(1, 0)
	outs := make([]*torch.Tensor, 0, len(counts))
	start := int64(0)
	for i, c := range counts {
		if c == 0 {
			continue
		}
		gu := torch.Linear(xs.Narrow(0, start, c), gus[i].SqueezeDim(0), nil).Chunk(2, -1)
		outs = append(outs, torch.Linear(e.act(gu[0]).Mul(gu[1]), downs[i].SqueezeDim(0), nil))
		start += c
	}
	y := torch.Cat(outs, 0).Mul(weights.Reshape(-1).IndexSelect(0, perm).Unsqueeze(1))
	// inv[perm[j]] = j puts the pairs back in token order.
	inv := perm.ZerosLike().Scatter(0, perm, torch.Arange(0, float64(n*k), 1, torch.Int64, dev))
	return y.IndexSelect(0, inv).View(n, k, h).SumDims([]int64{1}, false).ToDType(x.DType())
}

// SparseMoeBlock is transformers' MixtralSparseMoeBlock and Qwen3MoeSparseMoeBlock, a
// layer's "mlp": the router "gate" chooses each token's experts among "experts", whose
// outputs are summed with the routing weights.
type SparseMoeBlock struct {
	nn.Base
	Gate    *TopKRouter
	Experts *Experts
	// JitterNoise is Mixtral's router_jitter_noise: in training the block's input is
	// multiplied by noise uniform in [1-JitterNoise, 1+JitterNoise]. 0: none.
	JitterNoise float64
	routers     *routerRecord
}

// newSparseMoeBlock returns the block of sizes s, its router and experts initialised
// N(0, initializer_range²) as transformers' _init_weights does, registered in the order
// of its __init__ (Qwen3-MoE's experts first when expertsFirst); routers records the
// router logits of a loss's forward.
func newSparseMoeBlock(s moeSizes, expertsFirst bool, routers *routerRecord) *SparseMoeBlock {
	b := &SparseMoeBlock{JitterNoise: s.jitter, routers: routers}
	gate := &TopKRouter{TopK: s.topK, Normalize: s.normTopK, RoundWeights: s.roundWeights}
	gate.Weight = gate.RegisterParameter("weight", torch.Empty([]int64{s.experts, s.hidden}, torch.Float32, torch.CPU))
	nn.InitNormal(gate.Weight, 0, s.initStd)
	ex := &Experts{}
	ex.act, _ = decoderActivation(s.act)
	ex.GateUpProj = ex.RegisterParameter("gate_up_proj", torch.Empty([]int64{s.experts, 2 * s.intermediate, s.hidden}, torch.Float32, torch.CPU))
	ex.DownProj = ex.RegisterParameter("down_proj", torch.Empty([]int64{s.experts, s.hidden, s.intermediate}, torch.Float32, torch.CPU))
	nn.InitNormal(ex.GateUpProj, 0, s.initStd)
	nn.InitNormal(ex.DownProj, 0, s.initStd)
	if expertsFirst {
		b.Experts = nn.Register(&b.Base, "experts", ex)
		b.Gate = nn.Register(&b.Base, "gate", gate)
	} else {
		b.Gate = nn.Register(&b.Base, "gate", gate)
		b.Experts = nn.Register(&b.Base, "experts", ex)
	}
	return b
}

// Forward applies the block to x [B, T, hidden].
func (b *SparseMoeBlock) Forward(x *torch.Tensor) *torch.Tensor {
	s := x.Shape()
	if b.JitterNoise > 0 && b.Training() {
		noise := torch.Rand(s, x.DType(), x.Device()).MulScalar(2 * b.JitterNoise).AddScalar(1 - b.JitterNoise)
		x = x.Mul(noise)
	}
	h := x.Reshape(-1, s[2])
	logits, weights, experts := b.Gate.Forward(h)
	b.routers.add(logits)
	return b.Experts.Forward(h, experts, weights).View(s...)
}

// routerRecord collects the router logits of the sparse blocks during a forward whose
// loss adds the load-balancing loss. The blocks of one model share it.
type routerRecord struct {
	on     bool
	logits []*torch.Tensor // escaped from the forward's scopes; freed by stop
	// capturing: add collects into captured instead (checkpointRouted).
	capturing bool
	captured  []*torch.Tensor
}

func (r *routerRecord) recording() bool { return r != nil && r.on }

func (r *routerRecord) add(logits *torch.Tensor) {
	switch {
	case r == nil:
	case r.capturing:
		r.captured = append(r.captured, logits)
	case r.on:
		r.logits = append(r.logits, logits.Escape())
	}
}

// routedLayer is a decoder layer with sparse blocks, whose router logits go to
// routers().
type routedLayer interface {
	routers() *routerRecord
}

// checkpointRouted is the checkpointed forward of layer l (f of x and extra, as
// nn.Checkpoint takes them) while r records: the router logits of l's blocks are
// outputs of the checkpoint besides the hidden states, so that the load-balancing loss
// reaches the layer's parameters and inputs through the recomputation in backward, as
// through transformers' checkpointed layers. It returns the hidden states and records
// the logits.
func checkpointRouted(l nn.Module, r *routerRecord, f func(x *torch.Tensor, extra []*torch.Tensor) *torch.Tensor, x *torch.Tensor, extra ...*torch.Tensor) *torch.Tensor {
	call := func(in []*torch.Tensor) []*torch.Tensor {
		// Both in the forward and in backward's recomputation, where r is not on.
		r.capturing, r.captured = true, nil
		defer func() { r.capturing, r.captured = false, nil }()
		y := f(in[0], in[1:])
		return append([]*torch.Tensor{y}, r.captured...)
	}
	var outs []*torch.Tensor
	if !torch.GradEnabled() {
		outs = torch.LocalN(func() []*torch.Tensor { return call(append([]*torch.Tensor{x}, extra...)) })
	} else {
		outs = torch.LocalN(func() []*torch.Tensor {
			return torch.Checkpoint(call, append([]*torch.Tensor{x}, extra...), nn.Parameters(l))
		})
	}
	for _, o := range outs[1:] {
		r.add(o)
	}
	return outs[0]
}

// stop ends the recording and frees the recorded tensors' handles (autograd keeps
// what it saved of them).
func (r *routerRecord) stop() {
	for _, l := range r.logits {
		l.Free()
	}
	r.on, r.logits = false, nil
}

// routerLoss is the load-balancing loss a mixture-of-experts model adds to its
// language-modelling loss when config.json's output_router_logits is set, as
// transformers' *ForCausalLM.forward adds router_aux_loss_coef times
// load_balancing_loss_func of the router logits.
type routerLoss struct {
	record        *routerRecord
	on            bool
	coef          float64
	experts, topK int64
}

// newRouterLoss returns the loss of blocks of sizes s, added with weight coef when on
// (output_router_logits).
func newRouterLoss(on bool, coef float64, s moeSizes) routerLoss {
	return routerLoss{record: &routerRecord{}, on: on, coef: coef, experts: s.experts, topK: s.topK}
}

// routerAuxLoss runs forward, a forward of the model, and returns router_aux_loss_coef
// times the load-balancing loss of its router logits over the tokens of mask (the
// attention mask [B, T], nil: all), a float32 scalar; nil when output_router_logits
// is off. With gradient checkpointing the logits leave each checkpointed layer as
// outputs (checkpointRouted).
func (r *routerLoss) routerAuxLoss(mask *torch.Tensor, forward func()) *torch.Tensor {
	if !r.on {
		forward()
		return nil
	}
	r.record.on = true
	defer r.record.stop()
	forward()
	if len(r.record.logits) == 0 {
		return nil
	}
	return LoadBalancingLoss(r.record.logits, r.experts, r.topK, mask).MulScalar(r.coef)
}

// LoadBalancingLoss is transformers' load_balancing_loss_func (Switch Transformer's
// auxiliary loss, equations 4 to 6): for the router logits of each sparse layer
// [tokens, experts], the fraction of top-k choices each expert gets times its mean
// routing probability, summed over the experts, times the number of experts; the
// choices and probabilities are counted over all layers together and, with mask
// [B, T] (tokens = B·T), over its real tokens only. The choices carry no gradient.
func LoadBalancingLoss(logits []*torch.Tensor, experts, topK int64, mask *torch.Tensor) *torch.Tensor {
	return torch.Local(func() *torch.Tensor {
		var flat *torch.Tensor
		if mask != nil {
			flat = mask.Reshape(-1).ToDType(torch.Float32)
		}
		var chosen, probs, rows *torch.Tensor
		n := 0.0
		for _, l := range logits {
			p := l.Softmax(-1)
			_, sel := p.TopK(topK, -1, true, false)
			sel = sel.Reshape(-1)
			var c, s *torch.Tensor
			if flat == nil {
				c = sel.Bincount(nil, experts).ToDType(torch.Float32)
				s = p.ToDType(torch.Float32).SumDims([]int64{0}, false)
				n += float64(p.Size(0))
			} else {
				w := flat.Unsqueeze(1).Expand(flat.Size(0), topK).Reshape(-1)
				c = sel.Bincount(w, experts)
				s = p.ToDType(torch.Float32).Mul(flat.Unsqueeze(-1)).SumDims([]int64{0}, false)
				if rows == nil {
					rows = flat.Sum()
				} else {
					rows = rows.Add(flat.Sum())
				}
			}
			if chosen == nil {
				chosen, probs = c, s
			} else {
				chosen, probs = chosen.Add(c), probs.Add(s)
			}
		}
		if rows == nil {
			return chosen.DivScalar(n).Mul(probs.DivScalar(n)).Sum().MulScalar(float64(experts))
		}
		return chosen.Div(rows).Mul(probs.Div(rows)).Sum().MulScalar(float64(experts))
	})
}

// expertNames are the names the Hub's checkpoints give one expert's weights:
// "experts.N.<gate>.weight", "experts.N.<up>.weight" and "experts.N.<down>.weight"
// under the block's name in the file.
type expertNames struct {
	// block is the sparse block's name in the files ("block_sparse_moe" for Mixtral,
	// "mlp" for Qwen3-MoE); the model's is "mlp".
	block          string
	gate, up, down string
}

// moeBlocks returns m's sparse blocks by state-dict prefix ("model.layers.0.mlp").
func moeBlocks(m nn.Module) []nn.NamedModule {
	var out []nn.NamedModule
	for _, nm := range nn.NamedModules(m) {
		if _, ok := nm.Module.(*SparseMoeBlock); ok {
			out = append(out, nm)
		}
	}
	return out
}

// fileName returns a block's tensor name as the files name it: under n.block instead
// of "mlp".
func (n expertNames) fileName(prefix, rest string) string {
	return strings.TrimSuffix(prefix, "mlp") + n.block + "." + rest
}

// fuseExperts rewrites, in the checkpoint tensors sd (state-dict names, except the
// blocks' under n.block), each sparse block of m stored per expert as the Hub's files
// store it into the fused parameters of transformers 5 — the experts' gate and up
// weights stacked and concatenated into experts.gate_up_proj, their down weights
// stacked into experts.down_proj — as transformers' WeightConverter (MergeModulelist,
// Concatenate) does at load; a block already fused is left as it is, and a block under
// n.block is renamed. fileOf names the file that holds a tensor, for errors: a missing
// expert or one whose shape disagrees with the config is an error naming the tensor
// and its file.
//
// Each expert's tensor is copied into its place in m's fused parameter as it comes (one
// expert's tensor at a time in libtorch, nothing in Go's heap), and sd then names the
// parameter itself, which LoadStateDict leaves as it is: fusing the bytes in Go first
// would hold every expert weight of the model twice.
func fuseExperts(m nn.Module, sd *checkpoint.Dict, n expertNames, fileOf func(string) string) (err error) {
	defer torch.Recover(&err, "fusing the experts")
	if n.block != "mlp" {
		for _, k := range sd.Keys() {
			name, _ := k.(string)
			if i := strings.Index(name, "."+n.block+"."); i >= 0 {
				v, _ := sd.Get(k)
				sd.Delete(k)
				sd.Set(name[:i]+".mlp."+name[i+len(n.block)+2:], v)
			}
		}
	}
	for _, nm := range moeBlocks(m) {
		b := nm.Module.(*SparseMoeBlock)
		p := nm.Name + ".experts."
		if _, ok := sd.Get(p + "gate_up_proj"); ok {
			continue
		}
		gu := b.Experts.GateUpProj.Shape()
		experts, inter, hidden := gu[0], gu[1]/2, gu[2]
		var dt checkpoint.DType
		for e := range experts {
			for _, w := range []struct {
				name   string
				shape  []int64
				fused  *torch.Tensor
				offset int64 // rows of the expert's slice before this weight's
			}{{n.gate, []int64{inter, hidden}, b.Experts.GateUpProj, 0}, {n.up, []int64{inter, hidden}, b.Experts.GateUpProj, inter},
				{n.down, []int64{hidden, inter}, b.Experts.DownProj, 0}} {
				key := fmt.Sprintf("%s%d.%s.weight", p, e, w.name)
				file := n.fileName(nm.Name, fmt.Sprintf("experts.%d.%s.weight", e, w.name))
				v, ok := sd.Get(key)
				if !ok {
					return fmt.Errorf("%s is missing: the config has %d experts (fused: %sgate_up_proj and %sdown_proj)", file, experts, p, p)
				}
				ct, ok := v.(*checkpoint.Tensor)
				if !ok {
					return fmt.Errorf("%s: %s is not a tensor", fileOf(file), file)
				}
				if !slices.Equal(ct.Shape, w.shape) {
					return fmt.Errorf("%s: %s has shape %v; the config's sizes give %v", fileOf(file), file, ct.Shape, w.shape)
				}
				if e == 0 && w.name == n.gate {
					dt = ct.DType
				} else if ct.DType != dt {
					return fmt.Errorf("%s: %s is %v, the block's other experts %v", fileOf(file), file, ct.DType, dt)
				}
				var cerr error
				torch.WithScope(func() {
					torch.NoGrad(func() {
						src, err := torch.TensorFromCheckpoint(ct, torch.CPU)
						if err != nil {
							cerr = err
							return
						}
						w.fused.Select(0, e).Narrow(0, w.offset, w.shape[0]).CopyFrom(src, false)
						src.Free()
					})
				})
				if cerr != nil {
					return fmt.Errorf("%s: %s: %w", fileOf(file), file, cerr)
				}
				sd.Delete(key)
			}
		}
		sd.Set(p+"gate_up_proj", b.Experts.GateUpProj)
		sd.Set(p+"down_proj", b.Experts.DownProj)
	}
	return nil
}

// expertLayout is fuseExperts reversed, for SavePretrained and a streamed export
// (HubLayout): each sparse block of m under n.block, and its fused experts as one
// tensor per expert and projection, as transformers' save_pretrained writes them
// (save_original_format), in the order of the state dict.
func expertLayout(m nn.Module, n expertNames) checkpoint.Layout {
	blocks := map[string]bool{}
	for _, nm := range moeBlocks(m) {
		blocks[nm.Name] = true
	}
	return func(s checkpoint.TensorSpec) []checkpoint.Part {
		i := strings.LastIndex(s.Name, ".mlp.")
		if i < 0 || !blocks[s.Name[:i+4]] {
			return nil
		}
		prefix, rest := s.Name[:i+4], s.Name[i+5:]
		var parts []string
		switch rest {
		case "experts.gate_up_proj":
			parts = []string{n.gate, n.up}
		case "experts.down_proj":
			parts = []string{n.down}
		default: // the router: renamed
			return []checkpoint.Part{{TensorSpec: checkpoint.TensorSpec{Name: n.fileName(prefix, rest), DType: s.DType, Shape: s.Shape}}}
		}
		experts, rows, cols := s.Shape[0], s.Shape[1]/int64(len(parts)), s.Shape[2]
		size := rows * cols * int64(s.DType.ElemSize())
		var out []checkpoint.Part
		for e := range experts {
			for j, part := range parts {
				out = append(out, checkpoint.Part{
					TensorSpec: checkpoint.TensorSpec{Name: n.fileName(prefix, fmt.Sprintf("experts.%d.%s.weight", e, part)), DType: s.DType, Shape: []int64{rows, cols}},
					Offset:     (e*int64(len(parts)) + int64(j)) * size})
			}
		}
		return out
	}
}

// PEFTTargetMapping returns the v4 module names of Mixtral's router and experts with
// the parameters transformers 5 holds them as, the fused ones, and the v4 block name
// (lora.LegacyTargets: PEFT's _MOE_TARGET_MODULE_MAPPING and _MOE_FUSED_TARGETS for
// "mixtral", and transformers' block_sparse_moe renaming).
func (m *MixtralForCausalLM) PEFTTargetMapping() ([][2]string, map[string][]string, [][2]string) {
	return [][2]string{{"gate", "gate.weight"}, {"w1", "gate_up_proj"}, {"w3", "gate_up_proj"}, {"w2", "down_proj"}},
		map[string][]string{"gate_up_proj": {"w1", "w3"}}, [][2]string{{".block_sparse_moe.", ".mlp."}}
}

// PEFTTargetMapping is Mixtral's for Qwen3-MoE, whose v4 names are those of Qwen2-MoE
// (gate, gate_proj, up_proj, down_proj). As in PEFT, these names then select the
// experts' parameters and not the dense layers' MLPs.
func (m *Qwen3MoeForCausalLM) PEFTTargetMapping() ([][2]string, map[string][]string, [][2]string) {
	return [][2]string{{"gate", "gate.weight"}, {"gate_proj", "gate_up_proj"}, {"up_proj", "gate_up_proj"}, {"down_proj", "down_proj"}},
		map[string][]string{"gate_up_proj": {"gate_proj", "up_proj"}}, nil
}
