package optim_test

// The fused optimizers in one file (fused.go; docs/extending.md, "An optimizer"):
// torch.optim.AdamW, Adam and SGD with fused=True, written in Go over the generated rows
// of ATen's fused kernels. TestFusedOptimizerInOneFile checks them against PyTorch's to
// the bit.

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/optim"
)

// TestFusedOptimizerInOneFile: the built-in AdamW, Adam and SGD with Fused (fused.go),
// in one group and in two with their own options, equal torch.optim.AdamW, Adam and SGD
// with fused=True to the bit over 20 steps, and their state dicts continue in Python as
// Python's do in Go.
func TestFusedOptimizerInOneFile(t *testing.T) {
	requireParity(t, []optCase{
		{Name: "fused-adamw-maximize", Class: "AdamW", Kwargs: map[string]any{"lr": 0.01, "maximize": true, "fused": true},
			make: func(g []optim.Group) (optim.Optimizer, error) {
				return optim.NewAdamWGroups(g, optim.AdamOptions{LR: 0.01, WeightDecay: 1e-2, Maximize: true, Fused: true})
			}},
		{Name: "fused-adamw-groups", Class: "AdamW", Kwargs: map[string]any{"lr": 0.01, "weight_decay": 0.05, "amsgrad": true, "fused": true},
			Groups: []map[string]any{{}, {"lr": 0.1, "betas": []float64{0.5, 0.9}}},
			make: func(g []optim.Group) (optim.Optimizer, error) {
				return optim.NewAdamWGroups(g, optim.AdamOptions{LR: 0.01, WeightDecay: 0.05, AMSGrad: true, Fused: true})
			}},
		{Name: "fused-adam-groups", Class: "Adam", Kwargs: map[string]any{"lr": 0.01, "weight_decay": 0.05, "fused": true},
			Groups: []map[string]any{{"amsgrad": true}, {"lr": 0.1, "betas": []float64{0.5, 0.9}}},
			make: func(g []optim.Group) (optim.Optimizer, error) {
				return optim.NewAdamGroups(g, optim.AdamOptions{LR: 0.01, WeightDecay: 0.05, Fused: true})
			}},
		{Name: "fused-sgd", Class: "SGD", Kwargs: map[string]any{"lr": 0.05, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01, "maximize": true, "fused": true},
			make: func(g []optim.Group) (optim.Optimizer, error) {
				return optim.NewSGDGroups(g, optim.SGDOptions{LR: 0.05, Momentum: 0.9, Dampening: 0.1, WeightDecay: 0.01, Maximize: true, Fused: true})
			}},
		{Name: "fused-sgd-nesterov-groups", Class: "SGD", Kwargs: map[string]any{"lr": 0.05, "momentum": 0.8, "nesterov": true, "fused": true},
			Groups: []map[string]any{{"lr": 0.02}, {"weight_decay": 0.1}},
			make: func(g []optim.Group) (optim.Optimizer, error) {
				return optim.NewSGDGroups(g, optim.SGDOptions{LR: 0.05, Momentum: 0.8, Nesterov: true, Fused: true})
			}},
		{Name: "fused-sgd-plain", Class: "SGD", Kwargs: map[string]any{"lr": 0.1, "fused": true},
			make: func(g []optim.Group) (optim.Optimizer, error) {
				return optim.NewSGDGroups(g, optim.SGDOptions{LR: 0.1, Fused: true})
			}},
	})
}

// TestFusedOptimizerKeepsItsState: after the first step made the state, further steps
// of a fused optimizer leave the live tensor count as it was (each step's own tensors
// are freed, the state tensors are kept and not replaced).
func TestFusedOptimizerKeepsItsState(t *testing.T) {
	f := newFixture()
	for _, mk := range []func() (optim.Optimizer, error){
		func() (optim.Optimizer, error) {
			return optim.NewAdamW(f.params(), optim.AdamOptions{LR: 0.01, AMSGrad: true, Fused: true})
		},
		func() (optim.Optimizer, error) {
			return optim.NewSGD(f.params(), optim.SGDOptions{LR: 0.01, Momentum: 0.9, Fused: true})
		},
	} {
		o, err := mk()
		require.NoError(t, err)
		runGo(o, f, 0, 1)
		before := torch.LiveTensors()
		runGo(o, f, 1, steps)
		require.Equal(t, before, torch.LiveTensors(), "%T", o)
	}
}

// TestFusedGroupsAgree: fused=True in some groups and not others is an error that says
// so, not a step of either form.
func TestFusedGroupsAgree(t *testing.T) {
	f := newFixture()
	ps := f.params()
	o, err := optim.NewAdamGroups([]optim.Group{{Params: ps[:1]}, {Params: ps[1:], Options: map[string]any{"fused": true}}}, optim.DefaultAdam)
	require.NoError(t, err)
	for _, p := range ps {
		p.SetGrad(p.OnesLike())
	}
	require.ErrorContains(t, o.Step(), "1 of 2 parameter groups have fused=True")
}

// updateGroupSGD is torch.optim.SGD(fused=True) as an optim.Algorithm whose UpdateGroup
// calls the fused kernel's row with a Go learning rate.
var updateGroupSGD = optim.Algorithm{
	Name:  "SGD",
	Slots: []string{"momentum_buffer"},
	Defaults: map[string]any{"momentum": 0.9, "dampening": 0.0, "weight_decay": 0.0, "nesterov": false,
		"maximize": false, "foreach": nil, "differentiable": false, "fused": true},
	UpdateGroup: func(g *optim.ParamGroup, params, grads []*torch.Tensor, state [][]*torch.Tensor) {
		bufs, first := state[0], false
		for i, p := range params {
			if bufs[i] == nil {
				bufs[i], first = p.ZerosLike(), true
			}
		}
		torch.FusedSGD(params, grads, bufs, g.Float("weight_decay", 0), g.Float("momentum", 0), g.LR,
			g.Float("dampening", 0), g.Bool("nesterov"), g.Bool("maximize"), first, nil, nil)
	},
}

// TestUpdateGroupAlgorithm: an Algorithm's UpdateGroup over torch.FusedSGD trains as the
// built-in SGD(fused=True) does, to the bit, state included.
func TestUpdateGroupAlgorithm(t *testing.T) {
	f := newFixture()
	a, err := optim.New(updateGroupSGD, []optim.Group{{Params: f.params()}}, 0.05)
	require.NoError(t, err)
	b, err := optim.NewSGD(f.params(), optim.SGDOptions{LR: 0.05, Momentum: 0.9, Fused: true})
	require.NoError(t, err)
	runGo(a, f, 0, steps)
	runGo(b, f, 0, steps)
	for i, p := range a.Params() {
		require.Equal(t, b.Params()[i].Float64s(), p.Float64s(), "param %d", i)
	}
	st, _ := a.StateDict().Get("state")
	row, _ := st.(*checkpoint.Dict).Get(int64(0))
	buf, _ := row.(*checkpoint.Dict).Get("momentum_buffer")
	require.Equal(t, b.State(0)["momentum_buffer"].Float64s(), buf.(*torch.Tensor).Float64s())
}
