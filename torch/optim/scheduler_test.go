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
	make   func(o optim.Optimizer) (optim.Scheduler, error)
	metric bool
}

// sched adapts a constructor's (*T, error) to make's (Scheduler, error).
func sched[T optim.Scheduler](s T, err error) (optim.Scheduler, error) { return s, err }

var schedCases = []schedCase{
	{name: "step", make: func(o optim.Optimizer) (optim.Scheduler, error) { return sched(optim.NewStepLR(o, 30, 0.5)) }},
	{name: "multistep", make: func(o optim.Optimizer) (optim.Scheduler, error) {
		return sched(optim.NewMultiStepLR(o, []int64{30, 80, 80, 150}, 0.3))
	}},
	{name: "exponential", make: func(o optim.Optimizer) (optim.Scheduler, error) { return sched(optim.NewExponentialLR(o, 0.98)) }},
	{name: "cosine", make: func(o optim.Optimizer) (optim.Scheduler, error) {
		return sched(optim.NewCosineAnnealingLR(o, 50, 0.001))
	}},
	{name: "linear", make: func(o optim.Optimizer) (optim.Scheduler, error) { return sched(optim.NewLinearLR(o, 0.25, 1, 40)) }},
	{name: "lambda", make: func(o optim.Optimizer) (optim.Scheduler, error) {
		return sched(optim.NewLambdaLR(o, func(e int64) float64 { return math.Pow(0.95, float64(e)) }, func(e int64) float64 { return 1 / (1 + float64(e)) }))
	}},
	{name: "onecycle", make: func(o optim.Optimizer) (optim.Scheduler, error) {
		return sched(optim.NewOneCycleLR(o, []float64{1.0, 0.5}, schedSteps, optim.OneCycleOptions{}))
	}},
	{name: "onecycle-adam-3phase", adam: true, make: func(o optim.Optimizer) (optim.Scheduler, error) {
		return sched(optim.NewOneCycleLR(o, []float64{0.01}, schedSteps+10, optim.OneCycleOptions{AnnealStrategy: "linear", ThreePhase: true, PctStart: 0.25}))
	}},
	{name: "sequential", make: func(o optim.Optimizer) (optim.Scheduler, error) {
		a, err := optim.NewLinearLR(o, 0.1, 1, 10)
		if err != nil {
			return nil, err
		}
		b, err := optim.NewCosineAnnealingLR(o, 100, 0)
		if err != nil {
			return nil, err
		}
		c, err := optim.NewExponentialLR(o, 0.97)
		if err != nil {
			return nil, err
		}
		return sched(optim.NewSequentialLR(o, []optim.Scheduler{a, b, c}, []int64{20, 150}))
	}},
	{name: "plateau", metric: true, make: func(o optim.Optimizer) (optim.Scheduler, error) {
		return sched(optim.NewReduceLROnPlateau(o, optim.PlateauOptions{Patience: 3, Cooldown: 2, Factor: 0.5, MinLRs: []float64{0.001, 0.0001}}))
	}},
	{name: "plateau-max-abs", metric: true, make: func(o optim.Optimizer) (optim.Scheduler, error) {
		return sched(optim.NewReduceLROnPlateau(o, optim.PlateauOptions{Mode: "max", ThresholdMode: "abs", ZeroPatience: true, Threshold: 0.001}))
	}},
}

// newSched is c's scheduler on o.
func newSched(t *testing.T, c schedCase, o optim.Optimizer) optim.Scheduler {
	t.Helper()
	s, err := c.make(o)
	require.NoError(t, err, c.name)
	return s
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
		s := newSched(t, c, o)
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
		s2 := newSched(t, c, o2)
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
			s := newSched(t, c, o)
			var keys []string
			for _, k := range s.StateDict().Keys() {
				keys = append(keys, k.(string))
			}
			// "verbose" (torch <= 2.6) and "_is_initial" (newer) are bookkeeping keys that
			// come and go between torch versions; load_state_dict accepts either set.
			require.ElementsMatch(t, withoutVersionKeys(r.Keys), withoutVersionKeys(keys))

			// Python's state, written half-way, continues in Go.
			o3 := schedOpt(t, c)
			s3 := newSched(t, c, o3)
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

// TestSchedulerConstructorsRejectImpossibleArguments: a scheduler's arguments often come
// from a flag or a config, so an impossible one is an error that names the argument and
// its value, and leaves the optimizer as it was.
func TestSchedulerConstructorsRejectImpossibleArguments(t *testing.T) {
	var sgd optim.Optimizer // nil: a fresh SGD with two groups
	noMomentum, err := optim.NewAdagrad([]*torch.Tensor{torch.Zeros([]int64{1}, torch.Float32, torch.CPU).Escape()}, optim.AdagradOptions{})
	require.NoError(t, err)
	other := schedOpt(t, schedCase{})
	exp := func(o optim.Optimizer) optim.Scheduler {
		s, err := optim.NewExponentialLR(o, 0.9)
		require.NoError(t, err)
		return s
	}
	lambda := func(int64) float64 { return 1 }
	for _, c := range []struct {
		name string
		opt  optim.Optimizer
		make func(o optim.Optimizer) (optim.Scheduler, error)
		want string
	}{
		{"StepLR step_size", sgd, func(o optim.Optimizer) (optim.Scheduler, error) { return sched(optim.NewStepLR(o, 0, 0.1)) }, "step_size must be >= 1, got 0"},
		{"StepLR gamma", sgd, func(o optim.Optimizer) (optim.Scheduler, error) { return sched(optim.NewStepLR(o, 1, -0.1)) }, "gamma must be a finite number >= 0, got -0.1"},
		{"MultiStepLR milestones", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewMultiStepLR(o, []int64{3, -1}, 0.1))
		}, "milestones[1] must be >= 0, got -1"},
		{"MultiStepLR gamma", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewMultiStepLR(o, []int64{3}, math.NaN()))
		}, "gamma must be a finite number >= 0, got NaN"},
		{"ExponentialLR gamma", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewExponentialLR(o, math.Inf(1)))
		}, "gamma must be a finite number >= 0, got +Inf"},
		{"CosineAnnealingLR T_max", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewCosineAnnealingLR(o, 0, 0))
		}, "T_max must be >= 1, got 0"},
		{"CosineAnnealingLR eta_min", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewCosineAnnealingLR(o, 10, -1))
		}, "eta_min must be a finite number >= 0, got -1"},
		{"LinearLR start_factor", sgd, func(o optim.Optimizer) (optim.Scheduler, error) { return sched(optim.NewLinearLR(o, 2, 1, 5)) }, "start_factor must be greater than 0 and less or equal to 1, got 2"},
		{"LinearLR start_factor 0", sgd, func(o optim.Optimizer) (optim.Scheduler, error) { return sched(optim.NewLinearLR(o, 0, 1, 5)) }, "start_factor must be greater than 0 and less or equal to 1, got 0"},
		{"LinearLR end_factor", sgd, func(o optim.Optimizer) (optim.Scheduler, error) { return sched(optim.NewLinearLR(o, 0.5, 1.5, 5)) }, "end_factor must be between 0 and 1, got 1.5"},
		{"LinearLR total_iters", sgd, func(o optim.Optimizer) (optim.Scheduler, error) { return sched(optim.NewLinearLR(o, 0.5, 1, 0)) }, "total_iters must be >= 1, got 0"},
		{"LambdaLR count", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewLambdaLR(o, lambda, lambda, lambda))
		}, "expected 1 or 2 lr_lambdas (one per parameter group), got 3"},
		{"LambdaLR nil", sgd, func(o optim.Optimizer) (optim.Scheduler, error) { return sched(optim.NewLambdaLR(o, lambda, nil)) }, "lr_lambdas[1] is nil"},
		{"OneCycleLR total_steps", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewOneCycleLR(o, []float64{1}, 0, optim.OneCycleOptions{}))
		}, "total_steps must be a positive integer, got 0"},
		{"OneCycleLR pct_start", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewOneCycleLR(o, []float64{1}, 10, optim.OneCycleOptions{PctStart: 1.5}))
		}, "pct_start must be a float between 0 and 1, got 1.5"},
		{"OneCycleLR anneal_strategy", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewOneCycleLR(o, []float64{1}, 10, optim.OneCycleOptions{AnnealStrategy: "step"}))
		}, `anneal_strategy must be one of 'cos' or 'linear', got "step"`},
		{"OneCycleLR div_factor", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewOneCycleLR(o, []float64{1}, 10, optim.OneCycleOptions{DivFactor: -25}))
		}, "div_factor must be a finite number > 0, got -25"},
		{"OneCycleLR final_div_factor", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewOneCycleLR(o, []float64{1}, 10, optim.OneCycleOptions{FinalDivFactor: -1}))
		}, "final_div_factor must be a finite number > 0, got -1"},
		{"OneCycleLR max_lr count", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewOneCycleLR(o, []float64{1, 2, 3}, 10, optim.OneCycleOptions{}))
		}, "max_lr must have 1 or 2 values (one per parameter group), got 3"},
		{"OneCycleLR max_lr value", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewOneCycleLR(o, []float64{1, -2}, 10, optim.OneCycleOptions{}))
		}, "max_lr[1] must be a finite number >= 0, got -2"},
		{"OneCycleLR cycle_momentum", noMomentum, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewOneCycleLR(o, []float64{1}, 10, optim.OneCycleOptions{}))
		}, "cycle_momentum needs an optimizer with momentum or betas"},
		{"SequentialLR no schedulers", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewSequentialLR(o, nil, nil))
		}, "schedulers is empty"},
		{"SequentialLR milestones count", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewSequentialLR(o, []optim.Scheduler{exp(o)}, []int64{3}))
		}, "milestones must have one value fewer than schedulers: got 1 schedulers and 1 milestones"},
		{"SequentialLR milestones order", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewSequentialLR(o, []optim.Scheduler{exp(o), exp(o), exp(o)}, []int64{5, 3}))
		}, "milestones must be sorted, got [5 3]"},
		{"SequentialLR other optimizer", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewSequentialLR(o, []optim.Scheduler{exp(o), exp(other)}, []int64{3}))
		}, "schedulers[1] (*optim.ExponentialLR) belongs to another optimizer"},
		{"SequentialLR plateau", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			p, err := optim.NewReduceLROnPlateau(o, optim.PlateauOptions{})
			require.NoError(t, err)
			return sched(optim.NewSequentialLR(o, []optim.Scheduler{p}, nil))
		}, "schedulers[0] (*optim.ReduceLROnPlateau) is not supported"},
		{"ReduceLROnPlateau factor", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewReduceLROnPlateau(o, optim.PlateauOptions{Factor: 1}))
		}, "factor must be in (0, 1), got 1"},
		{"ReduceLROnPlateau mode", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewReduceLROnPlateau(o, optim.PlateauOptions{Mode: "sideways"}))
		}, `mode must be "min" or "max", got "sideways"`},
		{"ReduceLROnPlateau threshold_mode", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewReduceLROnPlateau(o, optim.PlateauOptions{ThresholdMode: "pct"}))
		}, `threshold_mode must be "rel" or "abs", got "pct"`},
		{"ReduceLROnPlateau patience", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewReduceLROnPlateau(o, optim.PlateauOptions{Patience: -1}))
		}, "patience must be >= 0, got -1"},
		{"ReduceLROnPlateau cooldown", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewReduceLROnPlateau(o, optim.PlateauOptions{Cooldown: -2}))
		}, "cooldown must be >= 0, got -2"},
		{"ReduceLROnPlateau threshold", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewReduceLROnPlateau(o, optim.PlateauOptions{Threshold: -0.5}))
		}, "threshold must be >= 0, got -0.5"},
		{"ReduceLROnPlateau min_lrs count", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewReduceLROnPlateau(o, optim.PlateauOptions{MinLRs: []float64{0, 0, 0}}))
		}, "min_lrs must have 1 or 2 values (one per parameter group), got 3"},
		{"ReduceLROnPlateau min_lrs value", sgd, func(o optim.Optimizer) (optim.Scheduler, error) {
			return sched(optim.NewReduceLROnPlateau(o, optim.PlateauOptions{MinLRs: []float64{-1}}))
		}, "min_lrs[0] must be >= 0, got -1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.opt
			if o == nil {
				o = schedOpt(t, schedCase{})
			}
			before := o.StateDict()
			lrs := lrsOf(o)
			_, err := c.make(o)
			require.Error(t, err)
			require.Contains(t, err.Error(), c.want)
			require.Equal(t, lrs, lrsOf(o), "the optimizer's learning rates are untouched")
			require.Equal(t, groupKeys(before), groupKeys(o.StateDict()), "no option was added to the groups")
		})
	}
}

// groupKeys lists each param group's keys in a state dict but initial_lr, which a
// SequentialLR case's valid children add before the constructor under test runs.
func groupKeys(sd *checkpoint.Dict) [][]any {
	groups, _ := checkpoint.GetList(sd, "param_groups")
	var out [][]any
	for _, g := range groups {
		var keys []any
		for _, k := range g.(*checkpoint.Dict).Keys() {
			if k != "initial_lr" {
				keys = append(keys, k)
			}
		}
		out = append(out, keys)
	}
	return out
}

// TestOneCycleLRSteppedPastItsEndIsATorchError: running past total_steps is found only
// while stepping, which has no error result; it panics with a *torch.Error, which
// torch.Recover (and so Trainer.Run) returns as an error.
func TestOneCycleLRSteppedPastItsEndIsATorchError(t *testing.T) {
	s, err := optim.NewOneCycleLR(schedOpt(t, schedCase{}), []float64{1}, 2, optim.OneCycleOptions{})
	require.NoError(t, err)
	s.Step()
	s.Step()
	err = func() (err error) {
		defer torch.Recover(&err, "training")
		s.Step()
		return nil
	}()
	require.ErrorContains(t, err, "tried to step 3 times; total_steps is 2")
}
