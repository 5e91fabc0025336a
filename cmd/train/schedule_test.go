package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/optim"
)

// TestWarmupSchedulesMatchTransformers: --scheduler linear, constant and cosine with a
// warmup give, step by step, the learning rates of transformers' schedules with warmup
// over the same optimizer (12 steps, warmup_ratio 0.2: 3 warmup steps, rounded up).
func TestWarmupSchedulesMatchTransformers(t *testing.T) {
	out := testpy.Run(t, `
import json, torch
from transformers import get_linear_schedule_with_warmup, get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup
make = {
    "linear": lambda o: get_linear_schedule_with_warmup(o, 3, 12),
    "constant": lambda o: get_constant_schedule_with_warmup(o, 3),
    "cosine": lambda o: get_cosine_schedule_with_warmup(o, 3, 12),
}
res = {}
for name, f in make.items():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    s = f(opt)
    lrs = []
    for _ in range(12):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step(); s.step()
    res[name] = lrs
print(json.dumps(res))
`, []string{"torch", "transformers"})
	var want map[string][]float64
	require.NoError(t, json.Unmarshal(out, &want))
	for name, lrs := range want {
		c := defaultConfig()
		c.Scheduler, c.WarmupRatio, c.MaxSteps, c.LR, c.Optimizer = name, 0.2, 12, 0.1, "sgd"
		lin := nn.NewLinear(1, 1)
		opt, err := optim.NewSGD(nn.Parameters(lin), optim.SGDOptions{LR: 0.1})
		require.NoError(t, err)
		s, _, err := scheduler(c, opt, 100)
		require.NoError(t, err, name)
		for step, lr := range lrs {
			assert.InDelta(t, lr, opt.ParamGroups()[0].LR, 1e-12, "%s at step %d", name, step)
			s.Step()
		}
	}
	c := defaultConfig()
	c.Scheduler, c.WarmupSteps = "step", 3
	lin := nn.NewLinear(1, 1)
	opt, err := optim.NewSGD(nn.Parameters(lin), optim.SGDOptions{LR: 0.1})
	require.NoError(t, err)
	_, _, err = scheduler(c, opt, 10)
	assert.ErrorContains(t, err, "has no warmup")
}
