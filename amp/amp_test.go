package amp_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/amp"
	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/optim"
)

// inputs returns iteration i's input: finite values mostly, with inf, NaN and values
// that overflow float32 once scaled injected: often when dense, otherwise a few times
// early, leaving 2000 clean steps for the default growth interval, and in a run later.
func inputs(i int, dense bool) []float32 {
	x := []float32{float32(math.Sin(float64(i))), 0.5, -0.25, float32(math.Cos(float64(i) * 0.3))}
	if !dense && i >= 30 && i < 2100 {
		return x
	}
	switch {
	case i%97 == 5:
		x[1] = float32(math.Inf(1))
	case i%131 == 7:
		x[2] = float32(math.NaN())
	case i%173 == 11:
		x[3] = 1e38 // overflows once multiplied by the scale
	case i >= 2100 && i < 2110:
		x[0] = float32(math.Inf(-1)) // a run of overflows
	}
	return x
}

type scalerCase struct {
	Name    string         `json:"name"`
	Kwargs  map[string]any `json:"kwargs"`
	Steps   int            `json:"steps"`
	opts    amp.ScalerOptions
	unscale func(i int) bool // call Unscale explicitly (and clip) before Step
}

var scalerCases = []scalerCase{
	{Name: "defaults", Kwargs: map[string]any{}, Steps: 2600, opts: amp.ScalerOptions{Enabled: true},
		unscale: func(i int) bool { return i%2 == 0 }},
	{Name: "custom", Kwargs: map[string]any{"init_scale": 8.0, "growth_factor": 3.0, "backoff_factor": 0.25, "growth_interval": 4},
		Steps: 400, opts: amp.ScalerOptions{Enabled: true, InitScale: 8, GrowthFactor: 3, BackoffFactor: 0.25, GrowthInterval: 4},
		unscale: func(i int) bool { return i%3 == 0 }},
}

const scalerScript = `
import json, math, sys, torch
cfg = json.load(open(sys.argv[1]))
out = {}
for case in cfg["cases"]:
    name = case["name"]
    p = torch.nn.Parameter(torch.tensor([0.1, -0.2, 0.3, 0.4]))
    opt = torch.optim.SGD([p], lr=0.01)
    s = torch.amp.GradScaler("cpu", **case["kwargs"])
    scales, trackers, skipped = [], [], []
    for i in range(case["steps"]):
        opt.zero_grad()
        x = torch.tensor([float(v) for v in cfg["inputs"][name][i]], dtype=torch.float32)
        loss = (p * x).sum()
        s.scale(loss).backward()
        if cfg["unscale"][name][i]:
            s.unscale_(opt)
            torch.nn.utils.clip_grad_norm_([p], 1.0)
        s.step(opt)
        found = sum(v.item() for v in s._per_optimizer_states[id(opt)]["found_inf_per_device"].values())
        skipped.append(found != 0)
        s.update()
        scales.append(s.get_scale()); trackers.append(s._growth_tracker.item())
    sd = s.state_dict()
    torch.save(sd, cfg["dir"] + "/py-" + name + ".pt")
    gsd = torch.load(cfg["dir"] + "/go-" + name + ".pt")
    s2 = torch.amp.GradScaler("cpu"); s2.load_state_dict(gsd)
    out[name] = {"scales": scales, "trackers": trackers, "skipped": skipped, "param": p.detach().tolist(),
                 "go_loaded": s2.state_dict(), "keys": list(sd.keys())}
print(json.dumps(out, default=float))
`

func TestGradScalerMatchesPyTorch(t *testing.T) {
	testpy.Python(t, "torch")
	dir := t.TempDir()
	ins := map[string][][]float32{}
	uns := map[string][]bool{}
	type result struct {
		Scales   []float64      `json:"scales"`
		Trackers []int64        `json:"trackers"`
		Skipped  []bool         `json:"skipped"`
		Param    []float64      `json:"param"`
		GoLoaded map[string]any `json:"go_loaded"`
		Keys     []string       `json:"keys"`
	}
	goRes := map[string]result{}
	goSD := map[string]*checkpoint.Dict{}
	for _, c := range scalerCases {
		p := torch.FromSlice([]float32{0.1, -0.2, 0.3, 0.4}).SetRequiresGrad(true).Escape()
		opt, err := optim.NewSGD([]*torch.Tensor{p}, optim.SGDOptions{LR: 0.01})
		require.NoError(t, err)
		s, err := amp.NewGradScaler(c.opts)
		require.NoError(t, err)
		var r result
		for i := range c.Steps {
			x := inputs(i, c.Name != "defaults")
			ins[c.Name] = append(ins[c.Name], x)
			uns[c.Name] = append(uns[c.Name], c.unscale(i))
			torch.WithScope(func() {
				opt.ZeroGrad(true)
				loss := p.Mul(torch.FromSlice(x)).Sum()
				s.ScaleLoss(loss).Backward()
				if c.unscale(i) {
					require.NoError(t, s.Unscale(opt))
					_, err := optim.ClipGradNorm([]*torch.Tensor{p}, 1, 2, false)
					require.NoError(t, err)
				}
				stepped, err := s.Step(opt)
				require.NoError(t, err)
				require.Equal(t, !stepped, s.LastStepSkipped())
				require.NoError(t, s.Update())
				r.Skipped = append(r.Skipped, !stepped)
				r.Scales = append(r.Scales, s.ScaleValue())
				r.Trackers = append(r.Trackers, s.GrowthTracker())
			})
		}
		r.Param = p.Float64s()
		goRes[c.Name] = r
		goSD[c.Name] = s.StateDict()
		require.NoError(t, checkpoint.Write(filepath.Join(dir, "go-"+c.Name+".pt"), s.StateDict()))
	}
	// JSON has no NaN or inf: send them as strings Python's float() reads.
	jin := map[string][][]any{}
	for name, xs := range ins {
		for _, x := range xs {
			row := make([]any, len(x))
			for j, v := range x {
				switch f := float64(v); {
				case math.IsNaN(f):
					row[j] = "nan"
				case math.IsInf(f, 0):
					row[j] = map[bool]string{true: "inf", false: "-inf"}[f > 0]
				default:
					row[j] = f
				}
			}
			jin[name] = append(jin[name], row)
		}
	}
	cfg, err := json.Marshal(map[string]any{"cases": scalerCases, "inputs": jin, "unscale": uns, "dir": dir})
	require.NoError(t, err)
	cfgPath := filepath.Join(dir, "cfg.json")
	require.NoError(t, os.WriteFile(cfgPath, cfg, 0o644))
	var out map[string]result
	require.NoError(t, json.Unmarshal(testpy.Run(t, scalerScript, []string{"torch"}, cfgPath), &out))

	for _, c := range scalerCases {
		t.Run(c.Name, func(t *testing.T) {
			py, g := out[c.Name], goRes[c.Name]
			require.Equal(t, py.Skipped, g.Skipped, "skipped steps")
			require.Contains(t, g.Skipped, true)
			grew, shrank := false, false
			for i := 1; i < len(g.Scales); i++ {
				grew = grew || g.Scales[i] > g.Scales[i-1]
				shrank = shrank || g.Scales[i] < g.Scales[i-1]
			}
			require.True(t, grew && shrank, "the scale should both grow and back off")
			require.Equal(t, py.Scales, g.Scales, "scale trajectory")
			require.Equal(t, py.Trackers, g.Trackers, "growth tracker")
			require.InDeltaSlice(t, py.Param, g.Param, 1e-6, "parameters")
			require.Equal(t, []string{"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}, py.Keys)
			var keys []string
			for _, k := range goSD[c.Name].Keys() {
				keys = append(keys, k.(string))
			}
			require.Equal(t, py.Keys, keys)
			// Go's state dict loaded into Python's GradScaler.
			for _, k := range keys {
				v, _ := goSD[c.Name].Get(k)
				f, _ := checkpoint.GetFloat(goSD[c.Name], k)
				require.EqualValues(t, f, py.GoLoaded[k], "%s (%v)", k, v)
			}
			// Python's state dict loaded into a Go GradScaler.
			v, err := checkpoint.Read(filepath.Join(dir, "py-"+c.Name+".pt"))
			require.NoError(t, err)
			s, err := amp.NewGradScaler(amp.ScalerOptions{Enabled: true})
			require.NoError(t, err)
			require.NoError(t, s.LoadStateDict(v.(*checkpoint.Dict)))
			require.Equal(t, goSD[c.Name].Keys(), s.StateDict().Keys())
			for _, k := range keys {
				want, _ := checkpoint.GetFloat(goSD[c.Name], k)
				got, _ := checkpoint.GetFloat(s.StateDict(), k)
				require.Equal(t, want, got, k)
			}
		})
	}
}

func TestDisabledScalerPassesThrough(t *testing.T) {
	p := torch.FromSlice([]float32{1, 2}).SetRequiresGrad(true).Escape()
	opt, err := optim.NewSGD([]*torch.Tensor{p}, optim.SGDOptions{LR: 0.5})
	require.NoError(t, err)
	s, err := amp.NewGradScaler(amp.ScalerOptions{})
	require.NoError(t, err)
	torch.WithScope(func() {
		loss := p.Sum()
		require.Same(t, loss, s.ScaleLoss(loss))
		loss.Backward()
		require.NoError(t, s.Unscale(opt))
		stepped, err := s.Step(opt)
		require.NoError(t, err)
		require.True(t, stepped)
		require.NoError(t, s.Update())
	})
	require.Equal(t, []float32{0.5, 1.5}, p.Float32s())
	require.Equal(t, 1.0, s.ScaleValue())
	require.Equal(t, 0, s.StateDict().Len())
	require.NoError(t, s.LoadStateDict(checkpoint.NewDict()))
}

func TestScalerStageErrors(t *testing.T) {
	p := torch.FromSlice([]float32{1, 2}).SetRequiresGrad(true).Escape()
	opt, err := optim.NewSGD([]*torch.Tensor{p}, optim.SGDOptions{LR: 0.5})
	require.NoError(t, err)
	s, err := amp.NewGradScaler(amp.ScalerOptions{Enabled: true})
	require.NoError(t, err)
	require.Error(t, s.Unscale(opt), "unscale before any scale")
	torch.WithScope(func() {
		s.ScaleLoss(p.Sum()).Backward()
		require.NoError(t, s.Unscale(opt))
		require.ErrorContains(t, s.Unscale(opt), "already been called")
		_, err := s.Step(opt)
		require.NoError(t, err)
		_, err = s.Step(opt)
		require.ErrorContains(t, err, "step() has already been called")
		require.ErrorContains(t, s.Unscale(opt), "after step()")
		require.NoError(t, s.Update())
	})
	require.Error(t, s.LoadStateDict(checkpoint.NewDict()))
}

const autocastScript = `
import json, sys, torch
d = json.load(open(sys.argv[1]))
x = torch.tensor(d["x"]).reshape(3, 4); w = torch.tensor(d["w"]).reshape(2, 4); b = torch.tensor(d["b"])
with torch.autocast("cpu", dtype=torch.bfloat16):
    y = torch.nn.functional.linear(x, w, b)
print(json.dumps({"dtype": str(y.dtype), "y": y.float().flatten().tolist()}))
`

func TestAutocastCPUBFloat16MatchesPyTorch(t *testing.T) {
	testpy.Python(t, "torch")
	x := []float32{0.1, -1.3, 2.7, 0.55, 3.1, -0.2, 0.9, 1.45, -2.2, 0.3, 0.77, -0.61}
	w := []float32{0.25, -0.5, 1.5, 0.125, -1.1, 0.9, 0.33, -0.7}
	b := []float32{0.01, -0.3}
	var inside, outside []float32
	var dtIn, dtOut torch.DType
	torch.WithScope(func() {
		xt, wt, bt := torch.FromSlice(x, 3, 4), torch.FromSlice(w, 2, 4), torch.FromSlice(b)
		amp.Autocast(torch.CPU, torch.BFloat16, func() {
			y := torch.Linear(xt, wt, bt)
			dtIn, inside = y.DType(), y.Float32s()
		})
		y := torch.Linear(xt, wt, bt)
		dtOut, outside = y.DType(), y.Float32s()
	})
	require.Equal(t, torch.BFloat16, dtIn)
	require.Equal(t, torch.Float32, dtOut)
	require.NotEqual(t, inside, outside)

	dir := t.TempDir()
	in, err := json.Marshal(map[string]any{"x": x, "w": w, "b": b})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "in.json"), in, 0o644))
	var py struct {
		DType string    `json:"dtype"`
		Y     []float32 `json:"y"`
	}
	require.NoError(t, json.Unmarshal(testpy.Run(t, autocastScript, []string{"torch"}, filepath.Join(dir, "in.json")), &py))
	require.Equal(t, "torch.bfloat16", py.DType)
	require.Equal(t, py.Y, inside)
}

func TestAutocastRejectsFloat32(t *testing.T) {
	require.Panics(t, func() { amp.Autocast(torch.CPU, torch.Float32, func() {}) })
}

func TestScalerDoesNotLeakHandles(t *testing.T) {
	p := torch.FromSlice([]float32{1, 2}).SetRequiresGrad(true).Escape()
	opt, err := optim.NewSGD([]*torch.Tensor{p}, optim.SGDOptions{LR: 0.1})
	require.NoError(t, err)
	s, err := amp.NewGradScaler(amp.ScalerOptions{Enabled: true})
	require.NoError(t, err)
	iter := func() {
		torch.WithScope(func() {
			opt.ZeroGrad(true)
			s.ScaleLoss(p.Sum()).Backward()
			_, err := s.Step(opt)
			require.NoError(t, err)
			require.NoError(t, s.Update())
		})
	}
	iter() // creates the scale and growth tracker
	before := torch.LiveTensors()
	for range 10 {
		iter()
	}
	require.Equal(t, before, torch.LiveTensors())
}

// TestGradScalerRejectsBadOptions: the scaler's factors can come from a config, so an
// impossible one is an error naming it (PyTorch asserts on the factors).
func TestGradScalerRejectsBadOptions(t *testing.T) {
	for _, c := range []struct {
		opts amp.ScalerOptions
		want string
	}{
		{amp.ScalerOptions{GrowthFactor: 0.5}, "growth_factor must be a finite number > 1, got 0.5"},
		{amp.ScalerOptions{GrowthFactor: math.Inf(1)}, "growth_factor must be a finite number > 1, got +Inf"},
		{amp.ScalerOptions{BackoffFactor: 1}, "backoff_factor must be in (0, 1), got 1"},
		{amp.ScalerOptions{BackoffFactor: -0.5}, "backoff_factor must be in (0, 1), got -0.5"},
		{amp.ScalerOptions{InitScale: -1}, "init_scale must be a finite number > 0, got -1"},
		{amp.ScalerOptions{InitScale: math.NaN()}, "init_scale must be a finite number > 0, got NaN"},
		{amp.ScalerOptions{GrowthInterval: -1}, "growth_interval must be >= 1, got -1"},
	} {
		t.Run(c.want, func(t *testing.T) {
			s, err := amp.NewGradScaler(c.opts)
			require.ErrorContains(t, err, "amp: GradScaler: "+c.want)
			require.Nil(t, s)
		})
	}
}
