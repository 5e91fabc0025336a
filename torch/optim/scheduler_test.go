package optim_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/optim"
)

const schedSteps = 200

// metrics is ReduceLROnPlateau's fixed metric sequence: improving, then noisy plateaus.
func metrics() []float64 {
	m := make([]float64, schedSteps)
	for i := range m {
		m[i] = 1/(1+0.2*float64(min(i, 40))) + 0.01*math.Sin(float64(i)*1.3)
	}
	return m
}

type schedCase struct {
	name   string
	adam   bool
	make   func(o optim.Optimizer) optim.Scheduler
	metric bool
}

var schedCases = []schedCase{
	{name: "step", make: func(o optim.Optimizer) optim.Scheduler { return optim.NewStepLR(o, 30, 0.5) }},
	{name: "multistep", make: func(o optim.Optimizer) optim.Scheduler {
		return optim.NewMultiStepLR(o, []int64{30, 80, 80, 150}, 0.3)
	}},
	{name: "exponential", make: func(o optim.Optimizer) optim.Scheduler { return optim.NewExponentialLR(o, 0.98) }},
	{name: "cosine", make: func(o optim.Optimizer) optim.Scheduler { return optim.NewCosineAnnealingLR(o, 50, 0.001) }},
	{name: "linear", make: func(o optim.Optimizer) optim.Scheduler { return optim.NewLinearLR(o, 0.25, 1, 40) }},
	{name: "lambda", make: func(o optim.Optimizer) optim.Scheduler {
		return optim.NewLambdaLR(o, func(e int64) float64 { return math.Pow(0.95, float64(e)) }, func(e int64) float64 { return 1 / (1 + float64(e)) })
	}},
	{name: "onecycle", make: func(o optim.Optimizer) optim.Scheduler {
		return optim.NewOneCycleLR(o, []float64{1.0, 0.5}, schedSteps, optim.OneCycleOptions{})
	}},
	{name: "onecycle-adam-3phase", adam: true, make: func(o optim.Optimizer) optim.Scheduler {
		return optim.NewOneCycleLR(o, []float64{0.01}, schedSteps+10, optim.OneCycleOptions{AnnealStrategy: "linear", ThreePhase: true, PctStart: 0.25})
	}},
	{name: "sequential", make: func(o optim.Optimizer) optim.Scheduler {
		a := optim.NewLinearLR(o, 0.1, 1, 10)
		b := optim.NewCosineAnnealingLR(o, 100, 0)
		c := optim.NewExponentialLR(o, 0.97)
		return optim.NewSequentialLR(o, []optim.Scheduler{a, b, c}, []int64{20, 150})
	}},
	{name: "plateau", metric: true, make: func(o optim.Optimizer) optim.Scheduler {
		return optim.NewReduceLROnPlateau(o, optim.PlateauOptions{Patience: 3, Cooldown: 2, Factor: 0.5, MinLRs: []float64{0.001, 0.0001}})
	}},
	{name: "plateau-max-abs", metric: true, make: func(o optim.Optimizer) optim.Scheduler {
		return optim.NewReduceLROnPlateau(o, optim.PlateauOptions{Mode: "max", ThresholdMode: "abs", ZeroPatience: true, Threshold: 0.001})
	}},
}

const schedScript = `
import json, math, sys, warnings, torch
from torch.optim import lr_scheduler as L
warnings.simplefilter("ignore")
cfg = json.load(open(sys.argv[1])); N = cfg["steps"]; metrics = cfg["metrics"]
def opt_for(name):
    ps = [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3))]
    if name == "onecycle-adam-3phase":
        return torch.optim.Adam([{"params": ps[:1]}, {"params": ps[1:], "lr": 0.002}], lr=0.001)
    return torch.optim.SGD([{"params": ps[:1]}, {"params": ps[1:], "lr": 0.01}], lr=0.1, momentum=0.9)
def make(name, o):
    if name == "step": return L.StepLR(o, 30, 0.5)
    if name == "multistep": return L.MultiStepLR(o, [30, 80, 80, 150], 0.3)
    if name == "exponential": return L.ExponentialLR(o, 0.98)
    if name == "cosine": return L.CosineAnnealingLR(o, 50, 0.001)
    if name == "linear": return L.LinearLR(o, 0.25, 1.0, 40)
    if name == "lambda": return L.LambdaLR(o, [lambda e: 0.95 ** e, lambda e: 1 / (1 + e)])
    if name == "onecycle": return L.OneCycleLR(o, [1.0, 0.5], total_steps=N)
    if name == "onecycle-adam-3phase": return L.OneCycleLR(o, 0.01, total_steps=N + 10, anneal_strategy="linear", three_phase=True, pct_start=0.25)
    if name == "sequential":
        return L.SequentialLR(o, [L.LinearLR(o, 0.1, 1.0, 10), L.CosineAnnealingLR(o, 100, 0), L.ExponentialLR(o, 0.97)], [20, 150])
    if name == "plateau": return L.ReduceLROnPlateau(o, patience=3, cooldown=2, factor=0.5, min_lr=[0.001, 0.0001])
    if name == "plateau-max-abs": return L.ReduceLROnPlateau(o, mode="max", threshold_mode="abs", patience=0, threshold=0.001)
def plain(sd):
    if isinstance(sd, dict): return {k: plain(v) for k, v in sd.items()}
    if isinstance(sd, list): return [plain(v) for v in sd]
    return sd
def step(name, s, i):
    if name.startswith("plateau"): s.step(metrics[i])
    else: s.step()
def lrs(o): return [g["lr"] for g in o.param_groups]
out = {}
for name in cfg["cases"]:
    o = opt_for(name); s = make(name, o)
    seq = [lrs(o)]
    for i in range(N):
        step(name, s, i); seq.append(lrs(o))
        if i == N // 2 - 1:
            sd = plain(s.state_dict())
            if "milestones" in sd: sd["milestones"] = dict(sd["milestones"])
            torch.save({"optimizer": o.state_dict(), "scheduler": sd}, cfg["dir"] + "/py-" + name + ".pt")
            if name == "sequential": out["sequential-keys"] = sorted(sd.keys())
    # Go's state dicts, written half-way, continue in Python.
    gsd = torch.load(cfg["dir"] + "/go-" + name + ".pt")
    o2 = opt_for(name); s2 = make(name, o2)
    o2.load_state_dict(gsd["optimizer"]); s2.load_state_dict(gsd["scheduler"])
    seq2 = [lrs(o2)]
    for i in range(N // 2, N):
        step(name, s2, i); seq2.append(lrs(o2))
    out[name] = {"seq": seq, "from_go": seq2, "keys": sorted(make(name, opt_for(name)).state_dict().keys())}
print(json.dumps(out))
`

func schedOpt(t *testing.T, c schedCase) optim.Optimizer {
	ps := []*torch.Tensor{torch.Zeros([]int64{2}, torch.Float32, torch.CPU).Escape(), torch.Zeros([]int64{3}, torch.Float32, torch.CPU).Escape()}
	var o optim.Optimizer
	var err error
	if c.adam {
		o, err = optim.NewAdamGroups([]optim.Group{{Params: ps[:1]}, {Params: ps[1:], Options: map[string]any{"lr": 0.002}}}, optim.AdamOptions{LR: 0.001})
	} else {
		o, err = optim.NewSGDGroups([]optim.Group{{Params: ps[:1]}, {Params: ps[1:], Options: map[string]any{"lr": 0.01}}}, optim.SGDOptions{LR: 0.1, Momentum: 0.9})
	}
	require.NoError(t, err)
	return o
}

func lrsOf(o optim.Optimizer) []float64 {
	var out []float64
	for _, g := range o.ParamGroups() {
		out = append(out, g.LR)
	}
	return out
}

func stepSched(c schedCase, s optim.Scheduler, i int) {
	if c.metric {
		s.(optim.MetricScheduler).StepMetric(metrics()[i])
	} else {
		s.Step()
	}
}

func requireSeq(t *testing.T, want, got [][]float64, what string) {
	t.Helper()
	require.Equal(t, len(want), len(got), what)
	for i := range want {
		require.InDeltaSlice(t, want[i], got[i], 1e-12, "%s: step %d", what, i)
	}
}

func saveState(t *testing.T, path string, o optim.Optimizer, s optim.Scheduler) {
	torch.WithScope(func() {
		d := checkpoint.NewDict()
		d.Set("optimizer", o.StateDict())
		d.Set("scheduler", s.StateDict())
		v, err := torch.ToCheckpoint(d)
		require.NoError(t, err)
		require.NoError(t, checkpoint.Write(path, v))
	})
}

func loadState(t *testing.T, path string, o optim.Optimizer, s optim.Scheduler) {
	v, err := checkpoint.Read(path)
	require.NoError(t, err)
	od, err := checkpoint.GetDict(v, "optimizer")
	require.NoError(t, err)
	sd, err := checkpoint.GetDict(v, "scheduler")
	require.NoError(t, err)
	require.NoError(t, o.LoadStateDict(od))
	require.NoError(t, s.LoadStateDict(sd))
}

func TestSchedulersMatchPyTorch(t *testing.T) {
	testpy.Python(t, "torch")
	dir := t.TempDir()
	goSeq := map[string][][]float64{}
	goResumed := map[string][][]float64{}
	var names []string
	for _, c := range schedCases {
		names = append(names, c.name)
		o := schedOpt(t, c)
		s := c.make(o)
		seq := [][]float64{lrsOf(o)}
		for i := range schedSteps {
			stepSched(c, s, i)
			seq = append(seq, lrsOf(o))
			require.Equal(t, lrsOf(o), s.LastLR(), c.name)
			if i == schedSteps/2-1 {
				saveState(t, filepath.Join(dir, "go-"+c.name+".pt"), o, s)
			}
		}
		goSeq[c.name] = seq

		// Restore mid-way into a fresh optimizer and scheduler (optimizer first, as PyTorch
		// documents), and continue.
		o2 := schedOpt(t, c)
		s2 := c.make(o2)
		loadState(t, filepath.Join(dir, "go-"+c.name+".pt"), o2, s2)
		res := [][]float64{lrsOf(o2)}
		for i := schedSteps / 2; i < schedSteps; i++ {
			stepSched(c, s2, i)
			res = append(res, lrsOf(o2))
		}
		goResumed[c.name] = res
	}
	cfg, err := json.Marshal(map[string]any{"steps": schedSteps, "metrics": metrics(), "cases": names, "dir": dir})
	require.NoError(t, err)
	cfgPath := filepath.Join(dir, "cfg.json")
	require.NoError(t, os.WriteFile(cfgPath, cfg, 0o644))
	raw := testpy.Run(t, schedScript, []string{"torch"}, cfgPath)
	var out map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &out))

	for _, c := range schedCases {
		t.Run(c.name, func(t *testing.T) {
			var r struct {
				Seq    [][]float64 `json:"seq"`
				FromGo [][]float64 `json:"from_go"`
				Keys   []string    `json:"keys"`
			}
			require.NoError(t, json.Unmarshal(out[c.name], &r))
			requireSeq(t, r.Seq, goSeq[c.name], "Go vs Python")
			requireSeq(t, r.Seq[schedSteps/2:], goResumed[c.name], "Go restored mid-way")
			requireSeq(t, r.Seq[schedSteps/2:], r.FromGo, "Go's state continued in Python")

			// The state dict has PyTorch's keys.
			o := schedOpt(t, c)
			s := c.make(o)
			var keys []string
			for _, k := range s.StateDict().Keys() {
				keys = append(keys, k.(string))
			}
			// "verbose" (torch <= 2.6) and "_is_initial" (newer) are bookkeeping keys that
			// come and go between torch versions; load_state_dict accepts either set.
			require.ElementsMatch(t, withoutVersionKeys(r.Keys), withoutVersionKeys(keys))

			// Python's state, written half-way, continues in Go.
			o3 := schedOpt(t, c)
			s3 := c.make(o3)
			loadState(t, filepath.Join(dir, "py-"+c.name+".pt"), o3, s3)
			res := [][]float64{lrsOf(o3)}
			for i := schedSteps / 2; i < schedSteps; i++ {
				stepSched(c, s3, i)
				res = append(res, lrsOf(o3))
			}
			requireSeq(t, r.Seq[schedSteps/2:], res, "Python's state continued in Go")
		})
	}
}

func withoutVersionKeys(keys []string) []string {
	var out []string
	for _, k := range keys {
		if k != "verbose" && k != "_is_initial" {
			out = append(out, k)
		}
	}
	return out
}

// TestSchedulerConstructorsPanicOnImpossibleArguments: a scheduler's arguments are the
// program's choice, so an impossible one is a programming error that panics, naming it.
func TestSchedulerConstructorsPanicOnImpossibleArguments(t *testing.T) {
	o := schedOpt(t, schedCase{})
	for name, build := range map[string]func(){
		"step_size":            func() { optim.NewStepLR(o, 0, 0.1) },
		"T_max":                func() { optim.NewCosineAnnealingLR(o, 0, 0) },
		"starting":             func() { optim.NewLinearLR(o, 2, 1, 5) },
		"lr_lambdas":           func() { optim.NewLambdaLR(o, nil, nil, nil) },
		"total_steps":          func() { optim.NewOneCycleLR(o, []float64{1, 1}, 0, optim.OneCycleOptions{}) },
		"number of schedulers": func() { optim.NewSequentialLR(o, []optim.Scheduler{optim.NewExponentialLR(o, 0.9)}, []int64{3}) },
		"mode sideways":        func() { optim.NewReduceLROnPlateau(o, optim.PlateauOptions{Mode: "sideways"}) },
	} {
		require.Contains(t, panicMessage(t, build), name)
	}
}

// panicMessage returns the string f panics with ("" when it does not panic).
func panicMessage(t *testing.T, f func()) (msg string) {
	t.Helper()
	defer func() { msg, _ = recover().(string) }()
	f()
	return ""
}
