// Package lora adds LoRA adapters to a model with the semantics, names and files of
// Hugging Face's PEFT, so that adapters move both ways between gotrain and PEFT and
// merge into the base model.
//
// Inject wraps each targeted nn.Linear in a Linear whose forward is
//
//	base(x) + (dropout(x) Aᵀ Bᵀ) · scaling
//
// with A [r, in] Kaiming-uniform, B [out, r] zero, and scaling lora_alpha/r
// (lora_alpha/√r with rank-stabilised LoRA), and freezes every other parameter of the
// model: the base gets no gradients, and Adapter.Parameters — A and B alone — is the
// list to give the optimizer, which then keeps no state for the base. The base weights
// are not copied: each Linear wraps the model's own nn.Linear.
//
// Names are PEFT's: inside the model a wrapped projection holds
// "q_proj.base_layer.weight", "q_proj.lora_A.default.weight" and
// "q_proj.lora_B.default.weight", as the model inside PEFT's PeftModel does
// (peft_model.base_model.model.state_dict()); adapter_model.safetensors holds
// "base_model.model.<path>.lora_A.weight" and "...lora_B.weight". Save writes that file
// and adapter_config.json, which peft.PeftModel.from_pretrained loads; Load reads an
// adapter PEFT wrote; Merge adds B·A·scaling into the base weights, as
// merge_and_unload, after which models.SavePretrained writes a plain Hugging Face
// model.
//
// On a mixture of experts (models.MixtralForCausalLM, models.Qwen3MoeForCausalLM) the
// experts are 3-D parameters and the router is no nn.Linear: TargetParameters puts
// PEFT's ParamWrapper on them (per-expert A and B, the update added to the parameter
// the module's forward reads through its hook, ParameterHooker), and the targets are
// rewritten as PEFT rewrites them for these models (LegacyTargets): all-linear selects
// the attention projections, the router and the experts, as PEFT's does, and adapters
// written on transformers 4, one LoRA per expert, load converted.
//
// Why a package of its own: LoRA is PEFT's, not torch.nn's; it needs the adapter file
// formats (JSON config, safetensors through package checkpoint) that nn's layers do
// not; and it reaches into a model only through nn's public tree (nn.ReplaceModule,
// nn.Linear's Wrapper), as any other adapter method would.
package lora

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// AdapterName is the name of the adapter, as PEFT names a model's first one. It is part
// of the live parameter names and left out of the file's.
const AdapterName = "default"

// Linear is PEFT's lora.Linear: an nn.Linear (BaseLayer, registered as "base_layer")
// with a low-rank update, A in "lora_A.default" and B in "lora_B.default", and the
// dropout on its input in "lora_dropout.default".
type Linear struct {
	nn.Base
	// Path is the layer's dotted name in the model ("model.layers.0.self_attn.q_proj").
	Path string
	// BaseLayer is the model's own nn.Linear; its Wrapper is this Linear.
	BaseLayer *nn.Linear
	// A is lora_A, weight [r, in_features]; B is lora_B, weight [out_features, r].
	A, B *nn.Linear
	// Scaling multiplies the update: lora_alpha/r, or lora_alpha/√r with use_rslora.
	Scaling float64
	dropout nn.Layer
}

// moduleDict is the nn.ModuleDict that holds each of PEFT's per-adapter modules under
// the adapter's name.
type moduleDict struct{ nn.Base }

// Forward returns base(x) + (dropout(x) Aᵀ Bᵀ)·scaling, computed as PEFT's
// lora.Linear.forward: x is cast to the adapter's dtype for the update, and the sum
// back to the base output's dtype.
func (l *Linear) Forward(x *torch.Tensor) *torch.Tensor {
	out := torch.Linear(x, l.BaseLayer.Weight, l.BaseLayer.Bias)
	a := l.A.Weight
	if x.DType() != a.DType() {
		x = x.ToDType(a.DType())
	}
	d := torch.Linear(torch.Linear(l.dropout.Forward(x), a, nil), l.B.Weight, nil).MulScalar(l.Scaling)
	dt := out.DType()
	if out = out.Add(d); out.DType() != dt {
		out = out.ToDType(dt)
	}
	return out
}

// DeltaWeight returns B·A·scaling [out, in], the update Merge adds to the base weight,
// computed as PEFT's get_delta_weight (in float32 for half-precision adapters on the
// CPU). It belongs to the current scope.
func (l *Linear) DeltaWeight() *torch.Tensor {
	a, b := l.A.Weight, l.B.Weight
	dt := b.DType()
	half := b.Device().Type == torch.DeviceCPU && (dt == torch.Float16 || dt == torch.BFloat16)
	if half {
		a, b = a.ToDType(torch.Float32), b.ToDType(torch.Float32)
	}
	d := b.Matmul(a).MulScalar(l.Scaling)
	if half {
		d = d.ToDType(dt)
	}
	return d
}

// newLinear wraps base in a Linear for c (addAdapter makes its A and B).
func newLinear(path string, base *nn.Linear, c Config, initialise bool) *Linear {
	shape := base.Weight.Shape()
	rank, _, scale := c.rankAlpha(path)
	l := &Linear{Path: path, BaseLayer: base, Scaling: scale, dropout: nn.NewIdentity()}
	if c.Dropout > 0 {
		l.dropout = nn.NewDropout(c.Dropout)
	}
	l.A, l.B = addAdapter(&l.Base, base, l.dropout, base.Weight, int64(rank), shape[1], shape[0],
		c, rank, initialise)
	nn.SetTraining(l, base.Training())
	return l
}

// addAdapter registers base in owner as "base_layer" and, as PEFT's per-adapter
// modules, dropout, A [rows, in] and B [out, rows] as "lora_dropout", "lora_A" and
// "lora_B". A and B are on w's device in w's dtype, float32 for half-precision w, as
// PEFT's autocast_adapter_dtype makes them, for stable training. With initialise, A and
// B start as c.Init says (gaussian: standard deviation 1/rank); without, they are zero,
// waiting for weights to be loaded (no random draw).
func addAdapter(owner *nn.Base, base, dropout nn.Module, w *torch.Tensor, rows, in, out int64,
	c Config, rank int, initialise bool) (a, b *nn.Linear) {
	dt, dev := w.DType(), w.Device()
	if dt == torch.Float16 || dt == torch.BFloat16 {
		dt = torch.Float32
	}
	nn.Register(owner, "base_layer", base)
	weight := func(rows, cols int64) *nn.Linear {
		lin := &nn.Linear{}
		lin.Weight = lin.RegisterParameter("weight", torch.Zeros([]int64{rows, cols}, dt, dev))
		return lin
	}
	a, b = weight(rows, in), weight(out, rows)
	for _, m := range []struct {
		name string
		mod  nn.Module
	}{{"lora_dropout", dropout}, {"lora_A", a}, {"lora_B", b}} {
		d := &moduleDict{}
		nn.Register(&d.Base, AdapterName, m.mod)
		nn.Register(owner, m.name, d)
	}
	if initialise {
		switch c.Init {
		case InitGaussian:
			nn.InitNormal(a.Weight, 0, 1/float64(rank))
		case InitNone:
			nn.InitKaimingUniform(a.Weight, math.Sqrt(5), false)
			nn.InitKaimingUniform(b.Weight, math.Sqrt(5), false)
		default:
			nn.InitKaimingUniform(a.Weight, math.Sqrt(5), false)
		}
	}
	return a, b
}

// Adapter is a LoRA adapter added to a model: its config and its Linear layers, in the
// model's module order.
type Adapter struct {
	// Config is the adapter's configuration (TargetModules as given; Save expands
	// AllLinear into the module names, as PEFT does).
	Config Config
	root   nn.Module
	layers []*Linear
	// params are the adapters on parameters, by module in model order and, on one
	// module, innermost first.
	params []*ParamWrapper
	// hooked are the modules whose parameters params adapt.
	hooked []hookedModule
	// frozen are the parameters Inject froze, which Unload and Merge thaw.
	frozen []*torch.Tensor
}

// hookedModule is a module with adapters on its parameters, at path in the model.
type hookedModule struct {
	path string
	m    ParameterHooker
}

// Layers returns the adapter's layers in the model's module order.
func (a *Adapter) Layers() []*Linear { return a.layers }

// Params returns the adapters on parameters (target_parameters), by module in model
// order and, on one module, in the order of its parameters.
func (a *Adapter) Params() []*ParamWrapper { return a.params }

// lowRank is the A ("A") or B ("B") weight of the adapted layer or parameter at path.
type lowRank struct {
	path, ab string
	t        *torch.Tensor
}

// lowRanks returns every A and B of the adapter, each A before its B: the layers', then
// the parameters'.
func (a *Adapter) lowRanks() []lowRank {
	out := make([]lowRank, 0, 2*(len(a.layers)+len(a.params)))
	add := func(path string, A, B *nn.Linear) {
		out = append(out, lowRank{path, "A", A.Weight}, lowRank{path, "B", B.Weight})
	}
	for _, l := range a.layers {
		add(l.Path, l.A, l.B)
	}
	for _, p := range a.params {
		add(p.Path, p.A, p.B)
	}
	return out
}

// empty reports whether the adapter was merged or unloaded.
func (a *Adapter) empty() bool { return len(a.layers) == 0 && len(a.params) == 0 }

// Parameters returns the trainable tensors — each layer's A and B weights, in module
// order (PEFT's order), then those of the adapters on parameters — the list to give
// the optimizer.
func (a *Adapter) Parameters() []*torch.Tensor {
	var out []*torch.Tensor
	for _, w := range a.lowRanks() {
		out = append(out, w.t)
	}
	return out
}

// NamedParameters returns Parameters with their names in the model
// ("model.layers.0.self_attn.q_proj.lora_A.default.weight").
func (a *Adapter) NamedParameters() []nn.NamedTensor {
	var out []nn.NamedTensor
	for _, w := range a.lowRanks() {
		name := w.path + ".lora_" + w.ab + "." + AdapterName + ".weight"
		out = append(out, nn.NamedTensor{Name: name, Tensor: w.t})
	}
	return out
}

// target is a module Inject adapts.
type target struct {
	path string
	lin  *nn.Linear
}

// paramTarget is a parameter Inject adapts: the parameter name of the module at path.
type paramTarget struct {
	path, name string
	m          ParameterHooker
}

// findTargets lists the modules of m that c targets (PEFT's inject_adapter): every
// module whose name matches TargetModules and not ExcludeModules, each of which must be
// an nn.Linear — or a ParameterHooker with a "weight", whose weight is then adapted as
// PEFT converts such a module to target_parameters; AllLinear is every nn.Linear
// except the output head, lm_head — and the parameters TargetParameters names
// (findParams).
func findTargets(m nn.Module, c Config) ([]target, []paramTarget, error) {
	tm, err := c.TargetModules.compile("target_modules")
	if err != nil {
		return nil, nil, err
	}
	em, err := c.ExcludeModules.compile("exclude_modules")
	if err != nil {
		return nil, nil, err
	}
	var out []target
	var params []paramTarget
	seen := map[*nn.Linear]string{}
	for _, nm := range nn.NamedModules(m) {
		switch nm.Module.(type) {
		case *Linear, *ParamWrapper:
			return nil, nil, fmt.Errorf("the model already has a LoRA adapter (%s); merge or unload it first", nm.Name)
		}
		if nm.Name == "" || em.match(nm.Name) {
			continue
		}
		lin, isLinear := nm.Module.(*nn.Linear)
		hit := tm.match(nm.Name)
		if tm.allLinear {
			last := nm.Name[strings.LastIndex(nm.Name, ".")+1:]
			hit = isLinear && last != "lm_head"
		}
		if !hit {
			continue
		}
		if h, ok := nm.Module.(ParameterHooker); ok && !isLinear && slices.Contains(h.HookedParameters(), "weight") {
			params = append(params, paramTarget{nm.Name, "weight", h})
			continue
		}
		if !isLinear {
			return nil, nil, fmt.Errorf("target_modules: module %s is a %T; gotrain's LoRA adapts nn.Linear layers only", nm.Name, nm.Module)
		}
		if first, dup := seen[lin]; dup {
			return nil, nil, fmt.Errorf("target_modules: module %s is also registered as %s; one layer cannot get two adapters", nm.Name, first)
		}
		seen[lin] = nm.Name
		out = append(out, target{nm.Name, lin})
	}
	more, err := findParams(m, c.TargetParameters, em)
	if err != nil {
		return nil, nil, err
	}
	if len(out) == 0 && len(params) == 0 && len(more) == 0 {
		raw, _ := c.TargetModules.MarshalJSON()
		return nil, nil, fmt.Errorf("target_modules %s matched no module of the model", raw)
	}
	for _, p := range more {
		if !slices.ContainsFunc(params, func(q paramTarget) bool { return q.path == p.path && q.name == p.name }) {
			params = append(params, p)
		}
	}
	// One module's parameters in its order, modules in the model's (PEFT's nesting).
	order := map[string]int{}
	for i, nm := range nn.NamedModules(m) {
		order[nm.Name] = i
	}
	slices.SortStableFunc(params, func(x, y paramTarget) int {
		if x.path != y.path {
			return order[x.path] - order[y.path]
		}
		return slices.Index(x.m.HookedParameters(), x.name) - slices.Index(y.m.HookedParameters(), y.name)
	})
	return out, params, nil
}

// findParams lists the parameters of m that names target (PEFT's _inject_parameters):
// the parameter p of the module at path M matches a name that is "M.p" or that
// "M.p" ends with after a dot. Some parameter must match, as PEFT requires.
func findParams(m nn.Module, names []string, exclude *matcher) ([]paramTarget, error) {
	if len(names) == 0 {
		return nil, nil
	}
	var out []paramTarget
	for _, nm := range nn.NamedModules(m) {
		h, ok := nm.Module.(ParameterHooker)
		if !ok || nm.Name == "" || exclude.match(nm.Name) {
			continue
		}
		for _, p := range h.HookedParameters() {
			key := nm.Name + "." + p
			if slices.ContainsFunc(names, func(n string) bool { return isOrEndsWith(key, n) }) {
				out = append(out, paramTarget{nm.Name, p, h})
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("target_parameters %q matched no parameter the model's forward lets LoRA adapt", names)
	}
	return out, nil
}

// Inject adds a new LoRA adapter to m as PEFT's get_peft_model(m, config) does: each
// module c targets is wrapped in a Linear initialised as c.Init says (A
// Kaiming-uniform with a = √5, B zero: the model computes what it did), and every other
// parameter of m stops requiring gradients. Convert the model to its dtype and device
// before Inject: the adapters take the device of the weights they wrap and their dtype
// (float32 for half-precision weights).
//
// An error (a config value out of range, a target that is not an nn.Linear, targets
// that match nothing) leaves m as it was.
func Inject(m nn.Module, c Config) (*Adapter, error) {
	if err := c.validate(true); err != nil {
		return nil, fmt.Errorf("lora: %w", err)
	}
	a, err := inject(m, c, true)
	if err != nil {
		return nil, fmt.Errorf("lora: %w", err)
	}
	return a, nil
}

func inject(m nn.Module, c Config, initialise bool) (a *Adapter, err error) {
	if c, err = convertLegacyTargets(c, m); err != nil {
		return nil, err
	}
	found, params, err := findTargets(m, c)
	if err != nil {
		return nil, err
	}
	if len(params) > 0 && c.Dropout != 0 {
		return nil, fmt.Errorf("lora_dropout %v: adapters on parameters (%s.%s) work without dropout only, as PEFT's ParamWrapper", c.Dropout, params[0].path, params[0].name)
	}
	a = &Adapter{Config: c, root: m}
	defer func() {
		if err != nil {
			a.unwrap()
		}
	}()
	defer torch.Recover(&err, "adding adapters")
	for _, p := range nn.TrainableParameters(m) {
		p.SetGrad(nil)
		p.SetRequiresGrad(false)
		a.frozen = append(a.frozen, p)
	}
	for _, t := range found {
		l := newLinear(t.path, t.lin, c, initialise)
		if _, err := nn.ReplaceModule(m, t.path, l); err != nil {
			nn.Free(l.A)
			nn.Free(l.B)
			return nil, err
		}
		t.lin.Wrapper = l
		a.layers = append(a.layers, l)
	}
	for i := 0; i < len(params); {
		j := i + 1
		for j < len(params) && params[j].path == params[i].path {
			j++
		}
		if err := a.wrapParams(params[i:j], c, initialise); err != nil {
			return nil, err
		}
		i = j
	}
	return a, nil
}

// unwrap puts every base layer back in its place, frees the adapters' weights and
// thaws the parameters Inject froze. The adapter is empty afterwards.
func (a *Adapter) unwrap() {
	for i := len(a.hooked) - 1; i >= 0; i-- {
		h := a.hooked[i]
		if _, err := nn.ReplaceModule(a.root, h.path, h.m); err != nil {
			panic(fmt.Sprintf("lora: putting %s back: %v", h.path, err))
		}
		h.m.SetParameterHook(nil)
	}
	for _, p := range a.params {
		nn.Free(p.A)
		nn.Free(p.B)
	}
	a.hooked, a.params = nil, nil
	for i := len(a.layers) - 1; i >= 0; i-- {
		l := a.layers[i]
		// The path was found by walking the same tree, so the replacement cannot fail.
		if _, err := nn.ReplaceModule(a.root, l.Path, l.BaseLayer); err != nil {
			panic(fmt.Sprintf("lora: putting %s back: %v", l.Path, err))
		}
		l.BaseLayer.Wrapper = nil
		nn.Free(l.A)
		nn.Free(l.B)
	}
	for _, p := range a.frozen {
		p.SetRequiresGrad(true)
	}
	a.layers, a.frozen = nil, nil
}

// errEmpty is the error of an adapter already merged or unloaded.
var errEmpty = fmt.Errorf("lora: the adapter was merged or unloaded")

// Merge adds each layer's B·A·scaling into its base weight and puts the base layers
// back in the model, as PEFT's merge_and_unload: the model then computes what the
// adapted model computed (up to rounding), with its original names, ready for
// models.SavePretrained. The adapter's weights are freed and the parameters Inject
// froze require gradients again.
func (a *Adapter) Merge() (err error) {
	if a.empty() {
		return errEmpty
	}
	defer torch.Recover(&err, "lora: merge")
	torch.WithScope(func() {
		torch.NoGrad(func() {
			for _, l := range a.layers {
				l.BaseLayer.Weight.AddInPlace(l.DeltaWeight(), 1)
			}
			for _, p := range a.params {
				w := p.Parameter()
				w.AddInPlace(p.DeltaWeight().ToDType(w.DType()), 1)
			}
		})
	})
	a.unwrap()
	return nil
}

// Unload removes the adapter without merging it (PEFT's unload): the model is the base
// model again, its frozen parameters thawed, and the adapter's weights are freed.
func (a *Adapter) Unload() error {
	if a.empty() {
		return errEmpty
	}
	a.unwrap()
	return nil
}
