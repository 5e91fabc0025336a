package optim_test

// A fused optimizer in one file (docs/extending.md, "An optimizer"): torch.optim.AdamW,
// Adam and SGD with fused=True, written as optim.Algorithms over the generated rows of
// ATen's fused kernels. Package optim gives it parameter groups, schedulers and PyTorch's state-dict
// layout; TestFusedOptimizerInOneFile checks it against PyTorch's to the bit.

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/optim"
)

// fusedAdamW is torch.optim.AdamW(fused=True), and fusedAdam torch.optim.Adam(fused=True):
// the same state and step, with weight decay decoupled or added to the gradient.
var (
	fusedAdamW = optim.Algorithm{
		Name:  "AdamW",
		Slots: []string{"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
		Defaults: map[string]any{"betas": checkpoint.Tuple{0.9, 0.999}, "eps": 1e-8, "weight_decay": 1e-2,
			"amsgrad": false, "maximize": false, "foreach": nil, "capturable": false, "differentiable": false,
			"fused": true, "decoupled_weight_decay": true},
		UpdateGroup: fusedAdamStep,
	}
	fusedAdam = optim.Algorithm{
		Name:  "Adam",
		Slots: []string{"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
		Defaults: map[string]any{"betas": checkpoint.Tuple{0.9, 0.999}, "eps": 1e-8, "weight_decay": 0.0,
			"amsgrad": false, "maximize": false, "foreach": nil, "capturable": false, "differentiable": false,
			"fused": true, "decoupled_weight_decay": false},
		UpdateGroup: fusedAdamStep,
	}
)

// fusedAdamStep adds one to every parameter's "step" (a 0-dim float32 tensor on the
// parameter's device) and updates the parameters and their moments in one call of
// ATen's _fused_adamw_ or _fused_adam_.
func fusedAdamStep(g *optim.ParamGroup, params, grads []*torch.Tensor, state [][]*torch.Tensor) {
	steps, avgs, sqs, maxSqs := state[0], state[1], state[2], state[3]
	amsgrad := g.Bool("amsgrad")
	for i, p := range params {
		if steps[i] == nil {
			steps[i] = torch.Zeros(nil, torch.Float32, p.Device())
			avgs[i], sqs[i] = p.ZerosLike(), p.ZerosLike()
			if amsgrad {
				maxSqs[i] = p.ZerosLike()
			}
		}
	}
	if !amsgrad {
		maxSqs = nil
	}
	kernel := torch.FusedAdam
	if g.Bool("decoupled_weight_decay") {
		kernel = torch.FusedAdamW
	}
	betas := g.Pair("betas", [2]float64{0.9, 0.999})
	torch.ForeachAddScalarInPlace(steps, 1)
	kernel(params, grads, avgs, sqs, maxSqs, steps, g.LR, betas[0], betas[1],
		g.Float("weight_decay", 0), g.Float("eps", 1e-8), amsgrad, g.Bool("maximize"), nil, nil)
}

// fusedSGD is torch.optim.SGD(fused=True): ATen's _fused_sgd_ updates the parameters and,
// with momentum, their "momentum_buffer"s (set to the gradients at the first step).
var fusedSGD = optim.Algorithm{
	Name:  "SGD",
	Slots: []string{"momentum_buffer"},
	Defaults: map[string]any{"momentum": 0.0, "dampening": 0.0, "weight_decay": 0.0, "nesterov": false,
		"maximize": false, "foreach": nil, "differentiable": false, "fused": true},
	UpdateGroup: func(g *optim.ParamGroup, params, grads []*torch.Tensor, state [][]*torch.Tensor) {
		momentum, first := g.Float("momentum", 0), false
		var bufs []*torch.Tensor
		if momentum != 0 {
			bufs = state[0]
			for i, p := range params {
				if bufs[i] == nil {
					bufs[i], first = p.ZerosLike(), true
				}
			}
		}
		torch.FusedSGD(params, grads, bufs, g.Float("weight_decay", 0), momentum, g.LR, g.Float("dampening", 0),
			g.Bool("nesterov"), g.Bool("maximize"), first, nil, nil)
	},
}

// TestFusedOptimizerInOneFile: fusedAdamW, fusedAdam and fusedSGD, in one group and in
// two with their own options, equal torch.optim.AdamW, Adam and SGD with fused=True to the
// bit over 20 steps, and their state dicts continue in Python as Python's do in Go.
func TestFusedOptimizerInOneFile(t *testing.T) {
	requireParity(t, []optCase{
		{Name: "fused-adamw-algorithm", Class: "AdamW", Kwargs: map[string]any{"lr": 0.01, "maximize": true, "fused": true},
			make: func(g []optim.Group) (optim.Optimizer, error) {
				return optim.New(fusedAdamW, withOptions(g, map[string]any{"maximize": true}), 0.01)
			}},
		{Name: "fused-adamw-algorithm-groups", Class: "AdamW", Kwargs: map[string]any{"lr": 0.01, "weight_decay": 0.05, "amsgrad": true, "fused": true},
			Groups: []map[string]any{{}, {"lr": 0.1, "betas": []float64{0.5, 0.9}}},
			make: func(g []optim.Group) (optim.Optimizer, error) {
				return optim.New(fusedAdamW, withOptions(g, map[string]any{"weight_decay": 0.05, "amsgrad": true}), 0.01)
			}},
		{Name: "fused-adam-algorithm-groups", Class: "Adam", Kwargs: map[string]any{"lr": 0.01, "weight_decay": 0.05, "fused": true},
			Groups: []map[string]any{{"amsgrad": true}, {"lr": 0.1, "betas": []float64{0.5, 0.9}}},
			make: func(g []optim.Group) (optim.Optimizer, error) {
				return optim.New(fusedAdam, withOptions(g, map[string]any{"weight_decay": 0.05}), 0.01)
			}},
		{Name: "fused-sgd-algorithm", Class: "SGD", Kwargs: map[string]any{"lr": 0.05, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01, "maximize": true, "fused": true},
			make: func(g []optim.Group) (optim.Optimizer, error) {
				return optim.New(fusedSGD, withOptions(g, map[string]any{"momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01, "maximize": true}), 0.05)
			}},
		{Name: "fused-sgd-algorithm-nesterov-groups", Class: "SGD", Kwargs: map[string]any{"lr": 0.05, "momentum": 0.8, "nesterov": true, "fused": true},
			Groups: []map[string]any{{"lr": 0.02}, {"weight_decay": 0.1}},
			make: func(g []optim.Group) (optim.Optimizer, error) {
				return optim.New(fusedSGD, withOptions(g, map[string]any{"momentum": 0.8, "nesterov": true}), 0.05)
			}},
	})
}

// TestFusedOptimizerKeepsItsState: after the first step made the state, further steps
// of a fused Algorithm leave the live tensor count as it was (each step's own tensors
// are freed, the state tensors are kept and not replaced).
func TestFusedOptimizerKeepsItsState(t *testing.T) {
	f := newFixture()
	for _, c := range []struct {
		a    optim.Algorithm
		opts map[string]any
	}{{fusedAdamW, map[string]any{"amsgrad": true}}, {fusedSGD, map[string]any{"momentum": 0.9}}} {
		a := c.a
		o, err := optim.New(a, withOptions([]optim.Group{{Params: f.params()}}, c.opts), 0.01)
		require.NoError(t, err)
		runGo(o, f, 0, 1)
		before := torch.LiveTensors()
		runGo(o, f, 1, steps)
		require.Equal(t, before, torch.LiveTensors(), a.Name)
	}
}

// withOptions sets opts in every group that does not set them itself, as an
// optimizer's keyword arguments do.
func withOptions(gs []optim.Group, opts map[string]any) []optim.Group {
	for i := range gs {
		m := map[string]any{}
		for k, v := range opts {
			m[k] = v
		}
		for k, v := range gs[i].Options {
			m[k] = v
		}
		gs[i].Options = m
	}
	return gs
}
