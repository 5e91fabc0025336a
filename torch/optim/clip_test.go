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

func TestOptimizerRejectsBadOptions(t *testing.T) {
	p := []*torch.Tensor{torch.Zeros([]int64{2}, torch.Float32, torch.CPU).Escape()}
	_, err := optim.NewSGD(p, optim.SGDOptions{Nesterov: true})
	require.ErrorContains(t, err, "Nesterov")
	_, err = optim.NewAdam(p, optim.AdamOptions{Betas: [2]float64{1, 0.9}})
	require.ErrorContains(t, err, "beta")
	_, err = optim.NewSGD(nil, optim.SGDOptions{})
	require.Error(t, err)
	_, err = optim.NewAdamGroups([]optim.Group{{Params: p}, {Params: p}}, optim.DefaultAdam)
	require.ErrorContains(t, err, "more than one")
}
