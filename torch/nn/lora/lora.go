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
// Why a package of its own: LoRA is PEFT's, not torch.nn's; it needs the adapter file
// formats (JSON config, safetensors through package checkpoint) that nn's layers do
// not; and it reaches into a model only through nn's public tree (nn.ReplaceModule,
// nn.Linear's Wrapper), as any other adapter method would.
package lora

import (
	"fmt"
	"math"
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

// newLinear wraps base in a Linear for c. With initialise, A and B start as c.Init
// says; without, they are zero, waiting for weights to be loaded (no random draw).
// Adapters on half-precision weights are float32, as PEFT's autocast_adapter_dtype
// makes them, for stable training.
func newLinear(path string, base *nn.Linear, c Config, initialise bool) *Linear {
	shape := base.Weight.Shape()
	out, in, r := shape[0], shape[1], int64(c.R)
	dt, dev := base.Weight.DType(), base.Weight.Device()
	if dt == torch.Float16 || dt == torch.BFloat16 {
		dt = torch.Float32
	}
	l := &Linear{Path: path, BaseLayer: base, Scaling: c.Scaling()}
	nn.Register(&l.Base, "base_layer", base)
	l.dropout = nn.NewIdentity()
	if c.Dropout > 0 {
		l.dropout = nn.NewDropout(c.Dropout)
	}
	weight := func(rows, cols int64) *nn.Linear {
		lin := &nn.Linear{}
		lin.Weight = lin.RegisterParameter("weight", torch.Zeros([]int64{rows, cols}, dt, dev))
		return lin
	}
	l.A, l.B = weight(r, in), weight(out, r)
	for _, m := range []struct {
		name string
		mod  nn.Module
	}{{"lora_dropout", l.dropout}, {"lora_A", l.A}, {"lora_B", l.B}} {
		d := &moduleDict{}
		nn.Register(&d.Base, AdapterName, m.mod)
		nn.Register(&l.Base, m.name, d)
	}
	if initialise {
		switch c.Init {
		case InitGaussian:
			nn.InitNormal(l.A.Weight, 0, 1/float64(c.R))
		case InitNone:
			nn.InitKaimingUniform(l.A.Weight, math.Sqrt(5), false)
			nn.InitKaimingUniform(l.B.Weight, math.Sqrt(5), false)
		default:
			nn.InitKaimingUniform(l.A.Weight, math.Sqrt(5), false)
		}
	}
	nn.SetTraining(l, base.Training())
	return l
}

// Adapter is a LoRA adapter added to a model: its config and its Linear layers, in the
// model's module order.
type Adapter struct {
	// Config is the adapter's configuration (TargetModules as given; Save expands
	// AllLinear into the module names, as PEFT does).
	Config Config
	root   nn.Module
	layers []*Linear
	// frozen are the parameters Inject froze, which Unload and Merge thaw.
	frozen []*torch.Tensor
}

// Layers returns the adapter's layers in the model's module order.
func (a *Adapter) Layers() []*Linear { return a.layers }

// Parameters returns the trainable tensors — each layer's A and B weights, in module
// order (PEFT's order) — the list to give the optimizer.
func (a *Adapter) Parameters() []*torch.Tensor {
	out := make([]*torch.Tensor, 0, 2*len(a.layers))
	for _, l := range a.layers {
		out = append(out, l.A.Weight, l.B.Weight)
	}
	return out
}

// NamedParameters returns Parameters with their names in the model
// ("model.layers.0.self_attn.q_proj.lora_A.default.weight").
func (a *Adapter) NamedParameters() []nn.NamedTensor {
	out := make([]nn.NamedTensor, 0, 2*len(a.layers))
	for _, l := range a.layers {
		out = append(out,
			nn.NamedTensor{Name: l.Path + ".lora_A." + AdapterName + ".weight", Tensor: l.A.Weight},
			nn.NamedTensor{Name: l.Path + ".lora_B." + AdapterName + ".weight", Tensor: l.B.Weight})
	}
	return out
}

// target is a module Inject adapts.
type target struct {
	path string
	lin  *nn.Linear
}

// findTargets lists the modules of m that c targets (PEFT's inject_adapter): every
// module whose name matches TargetModules and not ExcludeModules, each of which must be
// an nn.Linear. AllLinear is every nn.Linear except the output head, lm_head.
func findTargets(m nn.Module, c Config) ([]target, error) {
	tm, err := c.TargetModules.compile("target_modules")
	if err != nil {
		return nil, err
	}
	em, err := c.ExcludeModules.compile("exclude_modules")
	if err != nil {
		return nil, err
	}
	var out []target
	seen := map[*nn.Linear]string{}
	for _, nm := range nn.NamedModules(m) {
		if _, ok := nm.Module.(*Linear); ok {
			return nil, fmt.Errorf("the model already has a LoRA adapter (%s); merge or unload it first", nm.Name)
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
		if !isLinear {
			return nil, fmt.Errorf("target_modules: module %s is a %T; gotrain's LoRA adapts nn.Linear layers only", nm.Name, nm.Module)
		}
		if first, dup := seen[lin]; dup {
			return nil, fmt.Errorf("target_modules: module %s is also registered as %s; one layer cannot get two adapters", nm.Name, first)
		}
		seen[lin] = nm.Name
		out = append(out, target{nm.Name, lin})
	}
	if len(out) == 0 {
		raw, _ := c.TargetModules.MarshalJSON()
		return nil, fmt.Errorf("target_modules %s matched no module of the model", raw)
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
	found, err := findTargets(m, c)
	if err != nil {
		return nil, err
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
	return a, nil
}

// unwrap puts every base layer back in its place, frees the adapters' weights and
// thaws the parameters Inject froze. The adapter is empty afterwards.
func (a *Adapter) unwrap() {
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
	if len(a.layers) == 0 {
		return errEmpty
	}
	defer torch.Recover(&err, "lora: merge")
	torch.WithScope(func() {
		torch.NoGrad(func() {
			for _, l := range a.layers {
				l.BaseLayer.Weight.AddInPlace(l.DeltaWeight(), 1)
			}
		})
	})
	a.unwrap()
	return nil
}

// Unload removes the adapter without merging it (PEFT's unload): the model is the base
// model again, its frozen parameters thawed, and the adapter's weights are freed.
func (a *Adapter) Unload() error {
	if len(a.layers) == 0 {
		return errEmpty
	}
	a.unwrap()
	return nil
}
