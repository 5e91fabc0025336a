package lora

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// ParameterHooker is a module whose forward reads some of its parameters through a
// hook that may replace them — a mixture of experts' router (models.TopKRouter,
// "weight") and experts (models.Experts, "gate_up_proj" and "down_proj"). An adapter on
// such a parameter (TargetParameters) adds its update there, as PEFT's ParamWrapper
// parametrizes the parameter for the duration of the forward.
type ParameterHooker interface {
	nn.Module
	// HookedParameters names the parameters read through the hook, in registration
	// order.
	HookedParameters() []string
	// SetParameterHook sets the hook: the forward uses h(name, p) in place of its
	// parameter name, p. nil reads the parameters directly.
	SetParameterHook(h func(name string, p *torch.Tensor) *torch.Tensor)
}

// ParamWrapper is PEFT's lora.ParamWrapper: a low-rank update of one parameter
// (Param) of a module (BaseLayer, registered as "base_layer": the module itself, or the
// ParamWrapper of its previous parameter, as PEFT nests them). For a 3-D parameter of
// E experts [E, out, in] (transformers' fused experts), A is lora_A [r·E, in] and B
// lora_B [out, r·E], expert e's update being B[:, k·E+e]·A[e·r+k] summed over k < r —
// PEFT's layout, A's rows by expert, B's columns interleaved; for a 2-D parameter
// [out, in] (the router's weight) A is [r, in] and B [out, r], as for Linear. The
// forward adds scaling times the update to the parameter; there is no dropout.
type ParamWrapper struct {
	nn.Base
	// Path is the wrapper's dotted name in the model: the module's, with ".base_layer"
	// once for each wrapper around this one.
	Path      string
	Param     string
	BaseLayer nn.Module
	A, B      *nn.Linear
	Scaling   float64
	// Experts is E for a 3-D parameter, 0 for a 2-D one.
	Experts int64
	target  ParameterHooker
}

// Parameter returns the adapted parameter of the wrapped module.
func (w *ParamWrapper) Parameter() *torch.Tensor {
	return w.target.ModuleBase().Parameter(w.Param)
}

// factors returns the update as scaling·lhs·rhs: for E experts lhs [E, out, r] and rhs
// [E, r, in] (PEFT's get_delta_factors), for a 2-D parameter B and A.
func (w *ParamWrapper) factors() (lhs, rhs *torch.Tensor) {
	a, b := w.A.Weight, w.B.Weight
	if w.Experts == 0 {
		return b, a
	}
	out, in := b.Size(0), a.Size(1)
	r := a.Size(0) / w.Experts
	return b.View(out, r, w.Experts).Permute(2, 0, 1), a.View(w.Experts, r, in)
}

// apply returns p with the update added, computed as PEFT's parametrization does: for
// the experts of a float32 parameter baddbmm(p, lhs, rhs, alpha=scaling), otherwise
// the update (in the adapter's dtype) rounded to p's dtype and added.
func (w *ParamWrapper) apply(p *torch.Tensor) *torch.Tensor {
	if w.Experts > 0 && p.DType() == torch.Float32 && w.A.Weight.DType() == torch.Float32 {
		lhs, rhs := w.factors()
		return p.Baddbmm(lhs, rhs, 1, w.Scaling)
	}
	return p.Add(w.DeltaWeight().ToDType(p.DType()))
}

// DeltaWeight returns scaling·B·A per expert, the parameter's shape ([E, out, in] or
// [out, in]), in the adapter's dtype: what Merge adds to the parameter.
func (w *ParamWrapper) DeltaWeight() *torch.Tensor {
	lhs, rhs := w.factors()
	return lhs.Matmul(rhs).MulScalar(w.Scaling)
}

// wrapParams adds adapters for c on the parameters ps, all of one module, in its
// parameter order: the first wraps the module, each next one the previous wrapper, and
// the outermost takes the module's place in the model; the module's hook adds their
// updates. With initialise, A and B start as c.Init says; otherwise they are zero.
func (a *Adapter) wrapParams(ps []paramTarget, c Config, initialise bool) error {
	path, h := ps[0].path, ps[0].m
	var inner nn.Module = h
	var ws []*ParamWrapper
	for i, p := range ps {
		t := h.ModuleBase().Parameter(p.name)
		if t == nil {
			return fmt.Errorf("target_parameters: %s has no parameter %s", path, p.name)
		}
		rank, _, scale := c.rankAlpha(path + "." + p.name)
		w := &ParamWrapper{Param: p.name, BaseLayer: inner, Scaling: scale, target: h,
			Path: path + strings.Repeat(".base_layer", len(ps)-1-i)}
		shape := t.Shape()
		var in, out, rows int64
		switch len(shape) {
		case 2:
			out, in, rows = shape[0], shape[1], int64(rank)
		case 3:
			// [E, out, in]: transformers' experts are not transposed (PEFT's swap).
			w.Experts, out, in = shape[0], shape[1], shape[2]
			rows = int64(rank) * w.Experts
		default:
			return fmt.Errorf("target_parameters: %s.%s has %d dimensions; LoRA adapts 2-D and 3-D parameters", path, p.name, len(shape))
		}
		w.A, w.B = addAdapter(&w.Base, inner, nn.NewIdentity(), t, rows, in, out, c, rank, initialise)
		nn.SetTraining(w, h.ModuleBase().Training())
		ws = append(ws, w)
		inner = w
	}
	if _, err := nn.ReplaceModule(a.root, path, inner); err != nil {
		for _, w := range ws {
			nn.Free(w.A)
			nn.Free(w.B)
		}
		return err
	}
	a.hooked = append(a.hooked, hookedModule{path, h})
	a.params = append(a.params, ws...)
	h.SetParameterHook(func(name string, p *torch.Tensor) *torch.Tensor {
		for _, w := range ws {
			if w.Param == name {
				p = w.apply(p)
			}
		}
		return p
	})
	return nil
}

// LegacyTargets is a model whose transformers 4 modules transformers 5 holds as
// parameters — Mixtral's and Qwen3-MoE's experts (fused 3-D parameters) and router (no
// longer an nn.Linear). For such a model PEFT rewrites an adapter's target_modules
// (transformers_weight_conversion's _convert_peft_config_moe), and so does gotrain.
type LegacyTargets interface {
	// PEFTTargetMapping returns, in PEFT's order, each v4 module name with the
	// parameter it became ("gate" → "gate.weight", "w2" → "down_proj"); for each
	// parameter fused from several v4 modules their names ("gate_up_proj" → w1, w3);
	// and the renames of v4 module paths (".block_sparse_moe." → ".mlp.").
	PEFTTargetMapping() (mapping [][2]string, fused map[string][]string, renames [][2]string)
}

// convertLegacyTargets rewrites c's targets for m as PEFT does for a LegacyTargets
// model: all-linear (or a regular expression) is resolved to module names — every
// nn.Linear but lm_head and the v4 names — and each target that is a v4 name (or ends
// with "." and one) becomes its parameter in TargetParameters; a fused parameter
// needs all its v4 names, and its rank and alpha are multiplied by their number
// (rank_pattern, alpha_pattern), so that each half keeps lora_alpha/r. Other models'
// configs are returned as they are.
func convertLegacyTargets(c Config, m nn.Module) (Config, error) {
	lt, ok := m.(LegacyTargets)
	if !ok {
		return c, nil
	}
	mapping, fused, _ := lt.PEFTTargetMapping()
	leaf := func(name string) string { return name[strings.LastIndex(name, ".")+1:] }
	var targets []string
	seen := map[string]bool{}
	add := func(name string) {
		if !seen[leaf(name)] {
			seen[leaf(name)] = true
			targets = append(targets, leaf(name))
		}
	}
	switch t := c.TargetModules; {
	case t.Names != nil:
		targets = t.Names
	case strings.EqualFold(t.Pattern, AllLinear):
		for _, nm := range nn.NamedModules(m) {
			if _, ok := nm.Module.(*nn.Linear); ok && leaf(nm.Name) != "lm_head" {
				add(nm.Name)
			}
		}
		for _, kv := range mapping {
			add(kv[0])
		}
	case t.Pattern != "":
		mt, err := t.compile("target_modules")
		if err != nil {
			return c, err
		}
		containers := map[string][]string{}
		for _, nm := range nn.NamedModules(m) {
			if nm.Name != "" && mt.match(nm.Name) {
				add(nm.Name)
			}
		}
		for _, p := range nn.NamedParameters(m) {
			if mt.match(p.Name) {
				add(p.Name)
			}
			i := strings.LastIndex(p.Name, ".")
			containers[p.Name[i+1:]] = append(containers[p.Name[i+1:]], p.Name[:max(i, 0)])
		}
		// The v4 modules fused into a parameter match no real name: probe the
		// parameter's module with the v4 name.
		for _, kv := range mapping {
			for _, ctr := range containers[kv[1]] {
				if !seen[kv[0]] && mt.match(ctr+"."+kv[0]) {
					add(kv[0])
				}
			}
		}
		if len(targets) == 0 {
			return c, nil
		}
	default:
		return c, nil
	}
	params := map[string]bool{}
	for _, p := range c.TargetParameters {
		params[p] = true
	}
	var remaining []string
	present := map[string]map[string]bool{}
	for _, t := range targets {
		i := slices.IndexFunc(mapping, func(kv [2]string) bool { return isOrEndsWith(t, kv[0]) })
		if i < 0 {
			remaining = append(remaining, t)
			continue
		}
		old, param := mapping[i][0], mapping[i][1]
		params[param] = true
		if _, ok := fused[param]; ok {
			if present[param] == nil {
				present[param] = map[string]bool{}
			}
			present[param][old] = true
		}
	}
	for _, param := range mapKeys(fused) {
		olds, got := fused[param], present[param]
		if len(got) > 0 && len(got) < len(olds) {
			missing := slices.DeleteFunc(slices.Clone(olds), func(o string) bool { return got[o] })
			return c, fmt.Errorf("target_modules: %s cannot be adapted without %s: transformers 5 fuses them into %s", strings.Join(mapKeys(got), ", "), strings.Join(missing, ", "), param)
		}
		if len(got) == len(olds) && len(olds) > 1 {
			key := `.*\.` + regexp.QuoteMeta(param)
			c.RankPattern = maps.Clone(orEmpty(c.RankPattern))
			c.AlphaPattern = maps.Clone(orEmpty(c.AlphaPattern))
			c.RankPattern[key] = c.R * len(olds)
			c.AlphaPattern[key] = c.Alpha * float64(len(olds))
		}
	}
	slices.Sort(remaining)
	if remaining == nil {
		remaining = []string{}
	}
	c.TargetModules = Targets{Names: remaining}
	c.TargetParameters = mapKeys(params)
	return c, nil
}

// convertLegacyWeights rewrites an adapter file's tensors sd written for the
// transformers 4 layout of a LegacyTargets model — one LoRA per expert and projection
// ("experts.N.w1", "w3", "w2", under "block_sparse_moe" for Mixtral) — into the
// adapters on the fused parameters a holds, as PEFT's
// convert_peft_adapter_state_dict_for_transformers does at load: the A of the
// projections fused into one parameter are concatenated along the rank, their B put
// block-diagonally, each expert's in its rows (A) or interleaved columns (B) of the
// ParamWrapper's layout. Files already in that layout are returned as they are. The
// new tensors belong to the current scope.
func (a *Adapter) convertLegacyWeights(sd *checkpoint.Dict, lt LegacyTargets) (_ *checkpoint.Dict, err error) {
	defer torch.Recover(&err, "converting the per-expert adapter weights")
	mapping, fused, renames := lt.PEFTTargetMapping()
	out := checkpoint.NewDict()
	for k, v := range sd.All() {
		name, _ := k.(string)
		for _, r := range renames {
			name = strings.ReplaceAll(name, r[0], r[1])
		}
		out.Set(name, v)
	}
	for _, p := range a.params {
		if _, ok := out.Get(fileKey(p.Path, "A")); ok || p.Experts == 0 {
			continue
		}
		olds := fused[p.Param]
		if olds == nil {
			for _, kv := range mapping {
				if kv[1] == p.Param {
					olds = append(olds, kv[0])
				}
			}
		}
		module := p.Path
		for strings.HasSuffix(module, ".base_layer") {
			module = strings.TrimSuffix(module, ".base_layer")
		}
		var as, bs []*torch.Tensor // [E] of [n·r, in] and [out, n·r]
		var keys []string
		for e := range p.Experts {
			var ea, eb []*torch.Tensor
			for _, old := range olds {
				path := fmt.Sprintf("%s.%d.%s", module, e, old)
				va, okA := out.Get(fileKey(path, "A"))
				vb, okB := out.Get(fileKey(path, "B"))
				if !okA || !okB {
					return out, nil // LoadStateDict names what is missing
				}
				ta, err := fileTensor(va)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", fileKey(path, "A"), err)
				}
				tb, err := fileTensor(vb)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", fileKey(path, "B"), err)
				}
				ea, eb = append(ea, ta), append(eb, tb)
				keys = append(keys, fileKey(path, "A"), fileKey(path, "B"))
			}
			as = append(as, torch.Cat(ea, 0))
			bs = append(bs, blockDiag(eb))
		}
		fa := torch.Stack(as, 0)
		fa = fa.Reshape(-1, fa.Size(2))
		fb := torch.Stack(bs, 0).Permute(2, 0, 1) // [n·r, E, out]
		fb = fb.Reshape(-1, fb.Size(2)).T()
		for _, k := range keys {
			out.Delete(k)
		}
		out.Set(fileKey(p.Path, "A"), fa.Contiguous())
		out.Set(fileKey(p.Path, "B"), fb.Contiguous())
	}
	return out, nil
}

// fileTensor is an adapter file's value as a tensor on the CPU.
func fileTensor(v any) (*torch.Tensor, error) {
	switch x := v.(type) {
	case *torch.Tensor:
		return x, nil
	case *checkpoint.Tensor:
		return torch.TensorFromCheckpoint(x, torch.CPU)
	}
	return nil, fmt.Errorf("expected a tensor, got %T", v)
}

// blockDiag returns the matrices ms [out_i, r_i] on the diagonal of one [Σout, Σr].
func blockDiag(ms []*torch.Tensor) *torch.Tensor {
	var cols int64
	for _, m := range ms {
		cols += m.Size(1)
	}
	rows := make([]*torch.Tensor, len(ms))
	var at int64
	for i, m := range ms {
		parts := []*torch.Tensor{}
		if at > 0 {
			parts = append(parts, torch.Zeros([]int64{m.Size(0), at}, m.DType(), m.Device()))
		}
		parts = append(parts, m)
		if rest := cols - at - m.Size(1); rest > 0 {
			parts = append(parts, torch.Zeros([]int64{m.Size(0), rest}, m.DType(), m.Device()))
		}
		rows[i] = torch.Cat(parts, 1)
		at += m.Size(1)
	}
	return torch.Cat(rows, 0)
}
