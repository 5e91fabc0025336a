package optim_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/optim"
)

const clipScript = `
import json, sys, torch
d = json.load(open(sys.argv[1]))
shapes = [[3, 4], [5], [2]]
out = []
for c in d["cases"]:
    ps = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
    for p, g, s in zip(ps, d["grads"], shapes):
        p.grad = torch.tensor(g, dtype=torch.float32).reshape(s)
    if c["value"]:
        torch.nn.utils.clip_grad_value_(ps, c["max"]); norm = 0.0
    else:
        norm = torch.nn.utils.clip_grad_norm_(ps, c["max"], float(c["type"])).item()
    out.append({"norm": norm, "grads": [p.grad.flatten().tolist() for p in ps[:2]]})
print(json.dumps(out))
`

type clipCase struct {
	Max   float64 `json:"max"`
	Type  string  `json:"type"`
	Value bool    `json:"value"`
}

func TestClipMatchesPyTorch(t *testing.T) {
	testpy.Python(t, "torch")
	f := newFixture()
	grads := f.Grads[13] // the third parameter has no gradient
	cases := []clipCase{{Max: 0.5, Type: "2"}, {Max: 100, Type: "2"}, {Max: 0.3, Type: "inf"}, {Max: 0.2, Value: true}}
	dir := t.TempDir()
	in, err := json.Marshal(map[string]any{"cases": cases, "grads": grads})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "in.json"), in, 0o644))
	var py []struct {
		Norm  float64     `json:"norm"`
		Grads [][]float64 `json:"grads"`
	}
	require.NoError(t, json.Unmarshal(testpy.Run(t, clipScript, []string{"torch"}, filepath.Join(dir, "in.json")), &py))
	for i, c := range cases {
		torch.WithScope(func() {
			ps := f.params()
			setGrads(f, ps, 13)
			var norm float64
			if c.Value {
				require.NoError(t, optim.ClipGradValue(ps, c.Max))
			} else {
				nt := 2.0
				if c.Type == "inf" {
					nt = math.Inf(1)
				}
				norm, err = optim.ClipGradNorm(ps, c.Max, nt, false)
				require.NoError(t, err)
				// The tensor variant clips the same gradients the same way: same norm, and
				// applying it again to clipped gradients leaves them at the limit.
				again := f.params()
				setGrads(f, again, 13)
				nt2 := optim.ClipGradNormTensor(again, c.Max, nt)
				require.Equal(t, norm, nt2.Item(), "case %d: tensor variant's norm", i)
				for j := range again {
					if g := again[j].Grad(); g != nil {
						require.Equal(t, ps[j].Grad().Float64s(), g.Float64s(), "case %d param %d", i, j)
					}
				}
			}
			require.InDelta(t, py[i].Norm, norm, 1e-6, "case %d norm", i)
			for j := range py[i].Grads {
				require.InDeltaSlice(t, py[i].Grads[j], ps[j].Grad().Float64s(), 1e-7, "case %d grad %d", i, j)
			}
			require.Nil(t, ps[2].Grad())
		})
	}
}

func TestClipGradNormNonfinite(t *testing.T) {
	torch.WithScope(func() {
		p := torch.FromSlice([]float32{1, 2}).SetRequiresGrad(true)
		p.SetGrad(torch.FromSlice([]float32{float32(math.Inf(1)), 1}))
		_, err := optim.ClipGradNorm([]*torch.Tensor{p}, 1, 2, true)
		require.ErrorContains(t, err, "non-finite")
		require.Equal(t, float32(1), p.Grad().Float32s()[1], "nothing is clipped on error")
		norm, err := optim.ClipGradNorm([]*torch.Tensor{p}, 1, 2, false)
		require.NoError(t, err)
		require.True(t, math.IsInf(norm, 1))
		g := p.Grad().Float32s()
		// An inf norm makes the coefficient 0: finite gradients become 0, inf*0 is NaN, as in PyTorch.
		require.True(t, math.IsNaN(float64(g[0])))
		require.Equal(t, float32(0), g[1])
	})
}

func TestZeroGrad(t *testing.T) {
	torch.WithScope(func() {
		p := torch.FromSlice([]float32{1, 2}).SetRequiresGrad(true)
		q := torch.FromSlice([]float32{3}).SetRequiresGrad(true)
		opt, err := optim.NewSGD([]*torch.Tensor{p, q}, optim.SGDOptions{})
		require.NoError(t, err)
		p.Mul(p).Sum().Backward()
		opt.ZeroGrad(false)
		require.Equal(t, []float32{0, 0}, p.Grad().Float32s())
		require.Nil(t, q.Grad())
		opt.ZeroGrad(true)
		require.Nil(t, p.Grad())
	})
}

// TestOptimizerRejectsBadOptions: every hyperparameter PyTorch's constructors check is
// checked here too, NaN included (PyTorch's `not 0.0 <= v`), in the options and in a
// group's own, and the error names it.
func TestOptimizerRejectsBadOptions(t *testing.T) {
	p := []*torch.Tensor{torch.Zeros([]int64{2}, torch.Float32, torch.CPU).Escape()}
	q := []*torch.Tensor{torch.Zeros([]int64{3}, torch.Float32, torch.CPU).Escape()}
	nan := math.NaN()
	group := func(opts map[string]any) []optim.Group { return []optim.Group{{Params: p}, {Params: q, Options: opts}} }
	for _, c := range []struct {
		name string
		make func() (optim.Optimizer, error)
		want string
	}{
		{"SGD lr", func() (optim.Optimizer, error) { return optim.NewSGD(p, optim.SGDOptions{LR: -0.1}) }, "invalid learning rate (lr): -0.1"},
		{"SGD lr NaN", func() (optim.Optimizer, error) { return optim.NewSGD(p, optim.SGDOptions{LR: nan}) }, "invalid learning rate (lr): NaN"},
		{"SGD group lr", func() (optim.Optimizer, error) {
			return optim.NewSGDGroups(group(map[string]any{"lr": -1.0}), optim.SGDOptions{})
		}, "group 1: invalid learning rate (lr): -1"},
		{"SGD group lr type", func() (optim.Optimizer, error) {
			return optim.NewSGDGroups(group(map[string]any{"lr": "fast"}), optim.SGDOptions{})
		}, "group 1: lr is string, want a number"},
		{"SGD momentum", func() (optim.Optimizer, error) { return optim.NewSGD(p, optim.SGDOptions{Momentum: -0.9}) }, "invalid momentum value: -0.9"},
		{"SGD weight_decay", func() (optim.Optimizer, error) { return optim.NewSGD(p, optim.SGDOptions{WeightDecay: -1e-4}) }, "invalid weight_decay value: -0.0001"},
		{"SGD nesterov without momentum", func() (optim.Optimizer, error) { return optim.NewSGD(p, optim.SGDOptions{Nesterov: true}) }, "Nesterov momentum requires a momentum and zero dampening"},
		{"SGD nesterov with dampening", func() (optim.Optimizer, error) {
			return optim.NewSGD(p, optim.SGDOptions{Nesterov: true, Momentum: 0.9, Dampening: 0.1})
		}, "dampening 0.1"},
		{"SGD group momentum type", func() (optim.Optimizer, error) {
			return optim.NewSGDGroups(group(map[string]any{"momentum": "0.9"}), optim.SGDOptions{})
		}, "group 1: momentum is string, want a number"},
		{"Adam lr", func() (optim.Optimizer, error) { return optim.NewAdam(p, optim.AdamOptions{LR: -1e-3}) }, "invalid learning rate (lr): -0.001"},
		{"Adam eps", func() (optim.Optimizer, error) { return optim.NewAdam(p, optim.AdamOptions{Eps: -1e-8}) }, "invalid eps value: -1e-08"},
		{"Adam eps NaN", func() (optim.Optimizer, error) { return optim.NewAdam(p, optim.AdamOptions{Eps: nan}) }, "invalid eps value: NaN"},
		{"Adam beta1", func() (optim.Optimizer, error) { return optim.NewAdam(p, optim.AdamOptions{Betas: [2]float64{1, 0.9}}) }, "invalid beta parameter at index 0: 1"},
		{"Adam beta2", func() (optim.Optimizer, error) {
			return optim.NewAdam(p, optim.AdamOptions{Betas: [2]float64{0.9, -0.5}})
		}, "invalid beta parameter at index 1: -0.5"},
		{"Adam beta NaN", func() (optim.Optimizer, error) {
			return optim.NewAdam(p, optim.AdamOptions{Betas: [2]float64{nan, 0.9}})
		}, "invalid beta parameter at index 0: NaN"},
		{"Adam weight_decay", func() (optim.Optimizer, error) { return optim.NewAdam(p, optim.AdamOptions{WeightDecay: -1}) }, "invalid weight_decay value: -1"},
		{"Adam group betas", func() (optim.Optimizer, error) {
			return optim.NewAdamGroups(group(map[string]any{"betas": 0.9}), optim.DefaultAdam)
		}, "group 1: betas is 0.9 (float64), want two numbers"},
		{"AdamW beta2", func() (optim.Optimizer, error) {
			return optim.NewAdamW(p, optim.AdamOptions{Betas: [2]float64{0.9, 1}})
		}, "AdamW: group 0: invalid beta parameter at index 1: 1"},
		{"AdamW weight_decay", func() (optim.Optimizer, error) {
			return optim.NewAdamW(p, optim.AdamOptions{WeightDecay: nan})
		}, "invalid weight_decay value: NaN"},
		{"RMSprop lr", func() (optim.Optimizer, error) { return optim.NewRMSprop(p, optim.RMSpropOptions{LR: -1}) }, "invalid learning rate (lr): -1"},
		{"RMSprop alpha", func() (optim.Optimizer, error) { return optim.NewRMSprop(p, optim.RMSpropOptions{Alpha: -0.99}) }, "invalid alpha value: -0.99"},
		{"RMSprop eps", func() (optim.Optimizer, error) { return optim.NewRMSprop(p, optim.RMSpropOptions{Eps: -1}) }, "invalid eps value: -1"},
		{"RMSprop momentum", func() (optim.Optimizer, error) { return optim.NewRMSprop(p, optim.RMSpropOptions{Momentum: -1}) }, "invalid momentum value: -1"},
		{"RMSprop weight_decay", func() (optim.Optimizer, error) {
			return optim.NewRMSprop(p, optim.RMSpropOptions{WeightDecay: -1})
		}, "invalid weight_decay value: -1"},
		{"Adagrad lr", func() (optim.Optimizer, error) { return optim.NewAdagrad(p, optim.AdagradOptions{LR: -1}) }, "invalid learning rate (lr): -1"},
		{"Adagrad lr_decay", func() (optim.Optimizer, error) { return optim.NewAdagrad(p, optim.AdagradOptions{LRDecay: -1}) }, "invalid lr_decay value: -1"},
		{"Adagrad weight_decay", func() (optim.Optimizer, error) {
			return optim.NewAdagrad(p, optim.AdagradOptions{WeightDecay: -1})
		}, "invalid weight_decay value: -1"},
		{"Adagrad initial_accumulator_value", func() (optim.Optimizer, error) {
			return optim.NewAdagrad(p, optim.AdagradOptions{InitialAccumulatorValue: -1})
		}, "invalid initial_accumulator_value value: -1"},
		{"Adagrad eps", func() (optim.Optimizer, error) { return optim.NewAdagrad(p, optim.AdagradOptions{Eps: -1}) }, "invalid eps value: -1"},
		{"no parameters", func() (optim.Optimizer, error) { return optim.NewSGD(nil, optim.SGDOptions{}) }, "parameter group 0 is empty"},
		{"a parameter in two groups", func() (optim.Optimizer, error) {
			return optim.NewAdamGroups([]optim.Group{{Params: p}, {Params: p}}, optim.DefaultAdam)
		}, "more than one"},
		{"Algorithm lr", func() (optim.Optimizer, error) {
			return optim.New(optim.Algorithm{Name: "Plain", Update: func(*optim.ParamGroup, *torch.Tensor, *torch.Tensor, []*torch.Tensor) {}},
				[]optim.Group{{Params: p}}, -1)
		}, "Plain: group 0: invalid learning rate (lr): -1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, err := c.make()
			require.ErrorContains(t, err, c.want)
			require.Nil(t, o)
		})
	}
}
