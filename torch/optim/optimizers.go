package optim

import (
	"fmt"
	"slices"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
)

func single(params []*torch.Tensor) []Group { return []Group{{Params: params}} }

// newOpt returns the optimizer T of kind k over groups.
func newOpt[T ~struct{ *base }](k *kind, groups []Group, lr float64, defaults *checkpoint.Dict) (*T, error) {
	b, err := newBase(k, groups, lr, defaults)
	if err != nil {
		return nil, err
	}
	return &T{b}, nil
}

// or returns v, or def when v is the zero value (an option left unset).
func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// dictOf returns the dict of the key, value pairs in kv, in order.
func dictOf(kv ...any) *checkpoint.Dict { return setAll(checkpoint.NewDict(), kv...) }

// setAll sets the key, value pairs in kv on d, in order, and returns d.
func setAll(d *checkpoint.Dict, kv ...any) *checkpoint.Dict {
	for i := 0; i < len(kv); i += 2 {
		d.Set(kv[i], kv[i+1])
	}
	return d
}

// fusedValue is the "fused" option PyTorch stores: True when set, else None.
func fusedValue(fused bool) any {
	if fused {
		return true
	}
	return nil
}

// nonNegative checks that each of keys, where the group sets it, is a number >= 0, as
// PyTorch's constructors do with `not 0.0 <= v` (so NaN is refused too).
func nonNegative(g *ParamGroup, keys ...string) error {
	for _, k := range keys {
		v, ok := g.Options.Lookup(k)
		if !ok {
			continue
		}
		f, ok := number(v)
		if !ok {
			return fmt.Errorf("%s is %T, want a number", k, v)
		}
		if !(f >= 0) {
			return fmt.Errorf("invalid %s value: %v", k, f)
		}
	}
	return nil
}

// ---- SGD ----

// SGDOptions are torch.optim.SGD's arguments. A zero LR means PyTorch's default, 1e-3.
type SGDOptions struct {
	LR, Momentum, Dampening, WeightDecay float64
	Nesterov, Maximize                   bool
	// Fused is torch.optim.SGD's fused=True: ATen's _fused_sgd_ updates each parameter
	// (and its momentum buffer) in one pass (fused.go).
	Fused bool
}

// SGD is torch.optim.SGD: stochastic gradient descent with optional momentum, dampening,
// Nesterov momentum and (L2) weight decay. Its state is "momentum_buffer" per parameter
// when momentum is non-zero.
type SGD struct{ *base }

var sgdKind = &kind{
	name:   "SGD",
	slots:  []string{"momentum_buffer"},
	kernel: torch.SGDKernel,
	fused:  fusedSGD,
	check: func(g *ParamGroup) error {
		if err := nonNegative(g, "momentum", "weight_decay"); err != nil {
			return err
		}
		if g.Bool("nesterov") && (g.Float("momentum", 0) <= 0 || g.Float("dampening", 0) != 0) {
			return fmt.Errorf("Nesterov momentum requires a momentum and zero dampening (nesterov with momentum %v, dampening %v)",
				g.Float("momentum", 0), g.Float("dampening", 0))
		}
		return nil
	},
}

func sgdDefaults(o SGDOptions) *checkpoint.Dict {
	return dictOf("momentum", o.Momentum, "dampening", o.Dampening, "weight_decay", o.WeightDecay,
		"nesterov", o.Nesterov, "maximize", o.Maximize, "foreach", nil, "differentiable", false,
		"fused", fusedValue(o.Fused))
}

// NewSGD returns torch.optim.SGD over params with one parameter group.
func NewSGD(params []*torch.Tensor, o SGDOptions) (*SGD, error) {
	return NewSGDGroups(single(params), o)
}

// NewSGDGroups returns torch.optim.SGD over parameter groups; o gives the options a
// group does not override.
func NewSGDGroups(groups []Group, o SGDOptions) (*SGD, error) {
	return newOpt[SGD](sgdKind, groups, or(o.LR, 1e-3), sgdDefaults(o))
}

// ---- Adam and AdamW ----

// AdamOptions are torch.optim.Adam's (and AdamW's) arguments. Zero LR, Betas and Eps
// mean PyTorch's defaults (1e-3, (0.9, 0.999), 1e-8); WeightDecay is taken as given, so
// set it to 1e-2 for AdamW's PyTorch default (DefaultAdamW does).
type AdamOptions struct {
	LR          float64
	Betas       [2]float64
	Eps         float64
	WeightDecay float64
	AMSGrad     bool
	Maximize    bool
	// Fused is torch.optim.Adam's fused=True: each parameter and its state are updated
	// in one pass of ATen's fused kernel (CPU and CUDA) instead of seven multi-tensor
	// operations (fused.go). Several times faster for small parameters (see
	// docs/performance.md); its arithmetic matches the fused kernel in PyTorch, and
	// differs from the default implementation in the last bit. Its "step" state is on the
	// parameter's device, as PyTorch's fused=True keeps it.
	Fused bool
}

// DefaultAdam is torch.optim.Adam's defaults.
var DefaultAdam = AdamOptions{LR: 1e-3, Betas: [2]float64{0.9, 0.999}, Eps: 1e-8}

// DefaultAdamW is torch.optim.AdamW's defaults (weight decay 1e-2).
var DefaultAdamW = AdamOptions{LR: 1e-3, Betas: [2]float64{0.9, 0.999}, Eps: 1e-8, WeightDecay: 1e-2}

// Adam is torch.optim.Adam, or AdamW (decoupled weight decay) when made by NewAdamW.
// Its state per parameter is "step" (a 0-dim float32 tensor, on the CPU, or on the
// parameter's device with Fused), "exp_avg",
// "exp_avg_sq" and, with AMSGrad, "max_exp_avg_sq".
type Adam struct{ *base }

func adamKind(name string, fixed map[string]float64) *kind {
	return &kind{
		name:   name,
		slots:  []string{"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
		kernel: torch.AdamKernel,
		fused:  fusedAdam,
		fixed:  fixed,
		check: func(g *ParamGroup) error {
			if err := nonNegative(g, "eps", "weight_decay"); err != nil {
				return err
			}
			if v, ok := g.Options.Lookup("betas"); ok {
				if _, ok := pairValue(v); !ok {
					return fmt.Errorf("betas is %v (%T), want two numbers", v, v)
				}
			}
			b := g.Pair("betas", [2]float64{0.9, 0.999})
			for i, v := range b {
				if !(v >= 0 && v < 1) {
					return fmt.Errorf("invalid beta parameter at index %d: %v (betas must be in [0, 1))", i, v)
				}
			}
			return nil
		},
	}
}

var (
	adamK = adamKind("Adam", nil)
	// AdamW always decouples, also for groups loaded from an older torch without the key.
	adamWK = adamKind("AdamW", map[string]float64{"decoupled_weight_decay": 1})
)

func adamDefaults(o AdamOptions, decoupled bool) *checkpoint.Dict {
	if o.Betas == [2]float64{} {
		o.Betas = DefaultAdam.Betas
	}
	return dictOf("betas", checkpoint.Tuple{o.Betas[0], o.Betas[1]}, "eps", or(o.Eps, 1e-8),
		"weight_decay", o.WeightDecay, "amsgrad", o.AMSGrad, "maximize", o.Maximize, "foreach", nil,
		"capturable", false, "differentiable", false, "fused", fusedValue(o.Fused),
		"decoupled_weight_decay", decoupled)
}

// NewAdam returns torch.optim.Adam over params with one parameter group.
func NewAdam(params []*torch.Tensor, o AdamOptions) (*Adam, error) {
	return NewAdamGroups(single(params), o)
}

// NewAdamGroups returns torch.optim.Adam over parameter groups; o gives the options a
// group does not override.
func NewAdamGroups(groups []Group, o AdamOptions) (*Adam, error) {
	return newOpt[Adam](adamK, groups, or(o.LR, 1e-3), adamDefaults(o, false))
}

// NewAdamW returns torch.optim.AdamW (Adam with decoupled weight decay: each step
// multiplies the parameters by 1 - lr*weight_decay) over params with one group. Note
// that a zero WeightDecay is zero; DefaultAdamW has PyTorch's 1e-2.
func NewAdamW(params []*torch.Tensor, o AdamOptions) (*Adam, error) {
	return NewAdamWGroups(single(params), o)
}

// NewAdamWGroups returns torch.optim.AdamW over parameter groups.
func NewAdamWGroups(groups []Group, o AdamOptions) (*Adam, error) {
	return newOpt[Adam](adamWK, groups, or(o.LR, 1e-3), adamDefaults(o, true))
}

// ---- RMSprop ----

// RMSpropOptions are torch.optim.RMSprop's arguments. Zero LR, Alpha and Eps mean
// PyTorch's defaults (1e-2, 0.99, 1e-8).
type RMSpropOptions struct {
	LR, Alpha, Eps, WeightDecay, Momentum float64
	Centered, Maximize                    bool
}

// RMSprop is torch.optim.RMSprop. Its state per parameter is "step", "square_avg",
// "momentum_buffer" (with momentum) and "grad_avg" (when centered).
type RMSprop struct{ *base }

var rmspropKind = &kind{
	name:   "RMSprop",
	slots:  []string{"step", "square_avg", "momentum_buffer", "grad_avg"},
	kernel: torch.RMSpropKernel,
	check:  func(g *ParamGroup) error { return nonNegative(g, "eps", "momentum", "weight_decay", "alpha") },
}

// NewRMSprop returns torch.optim.RMSprop over params with one parameter group.
func NewRMSprop(params []*torch.Tensor, o RMSpropOptions) (*RMSprop, error) {
	return NewRMSpropGroups(single(params), o)
}

// NewRMSpropGroups returns torch.optim.RMSprop over parameter groups.
func NewRMSpropGroups(groups []Group, o RMSpropOptions) (*RMSprop, error) {
	d := dictOf("momentum", o.Momentum, "alpha", or(o.Alpha, 0.99), "eps", or(o.Eps, 1e-8),
		"centered", o.Centered, "weight_decay", o.WeightDecay, "capturable", false, "foreach", nil,
		"maximize", o.Maximize, "differentiable", false)
	return newOpt[RMSprop](rmspropKind, groups, or(o.LR, 1e-2), d)
}

// ---- Adagrad ----

// AdagradOptions are torch.optim.Adagrad's arguments. Zero LR and Eps mean PyTorch's
// defaults (1e-2, 1e-10).
type AdagradOptions struct {
	LR, LRDecay, WeightDecay, InitialAccumulatorValue, Eps float64
	Maximize                                               bool
}

// Adagrad is torch.optim.Adagrad. As in PyTorch its state ("step" and "sum") exists for
// every parameter from construction on.
type Adagrad struct{ *base }

var adagradKind = &kind{
	name:   "Adagrad",
	slots:  []string{"step", "sum"},
	kernel: torch.AdagradKernel,
	check: func(g *ParamGroup) error {
		return nonNegative(g, "lr_decay", "weight_decay", "initial_accumulator_value", "eps")
	},
	eager: func(o *base, i int, p *torch.Tensor) {
		if o.state[i][0] != nil {
			return
		}
		init := 0.0
		for _, g := range o.groups {
			if slices.Contains(g.Params, p) {
				init = g.Float("initial_accumulator_value", 0)
			}
		}
		o.state[i][0] = torch.Full(nil, 0, torch.Float32, torch.CPU).Escape()
		o.state[i][1] = p.FullLike(init).Escape()
	},
}

// NewAdagrad returns torch.optim.Adagrad over params with one parameter group.
func NewAdagrad(params []*torch.Tensor, o AdagradOptions) (*Adagrad, error) {
	return NewAdagradGroups(single(params), o)
}

// NewAdagradGroups returns torch.optim.Adagrad over parameter groups.
func NewAdagradGroups(groups []Group, o AdagradOptions) (*Adagrad, error) {
	d := dictOf("lr_decay", o.LRDecay, "eps", or(o.Eps, 1e-10), "weight_decay", o.WeightDecay,
		"initial_accumulator_value", o.InitialAccumulatorValue, "foreach", nil, "maximize", o.Maximize,
		"differentiable", false, "fused", nil)
	return newOpt[Adagrad](adagradKind, groups, or(o.LR, 1e-2), d)
}
