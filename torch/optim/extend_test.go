package optim_test

// Adding an optimizer (docs/extending.md, "An optimizer"): a type implementing
// optim.Optimizer — Step, ZeroGrad, ParamGroups, Params, and a state dict in PyTorch's
// layout — trains through the Trainer, is recorded by its class in config.json, and
// resumes exactly from a checkpoint. This file adds one from outside package optim.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// MomentumSGD is torch.optim.SGD(params, lr, momentum) written in Go over package
// torch's ops: per parameter, buf = grad at the first step, then
// buf = momentum·buf + grad; p -= lr·buf. Its state is "momentum_buffer" per parameter
// index, as PyTorch's.
type MomentumSGD struct {
	group *optim.ParamGroup
	bufs  []*torch.Tensor // owned by the optimizer (escaped from every scope); nil before the first step
}

// NewMomentumSGD returns the optimizer over params, with PyTorch's SGD group keys.
func NewMomentumSGD(params []*torch.Tensor, lr, momentum float64) *MomentumSGD {
	opts := checkpoint.NewDict()
	opts.Set("momentum", momentum)
	opts.Set("dampening", 0.0)
	opts.Set("weight_decay", 0.0)
	opts.Set("nesterov", false)
	opts.Set("maximize", false)
	opts.Set("foreach", nil)
	opts.Set("differentiable", false)
	opts.Set("fused", nil)
	return &MomentumSGD{group: &optim.ParamGroup{Params: params, LR: lr, Options: opts},
		bufs: make([]*torch.Tensor, len(params))}
}

// Step updates every parameter that has a gradient.
func (o *MomentumSGD) Step() (err error) {
	defer torch.Recover(&err, "MomentumSGD step")
	momentum := o.group.Float("momentum", 0)
	torch.NoGrad(func() {
		for i, p := range o.group.Params {
			g := p.Grad()
			if g == nil {
				continue
			}
			if o.bufs[i] == nil {
				o.bufs[i] = g.Clone().Escape()
			} else {
				o.bufs[i].MulScalarInPlace(momentum)
				o.bufs[i].AddInPlace(g, 1)
			}
			p.AddInPlace(o.bufs[i], -o.group.LR)
		}
	})
	return nil
}

// ZeroGrad zeroes or drops the gradients.
func (o *MomentumSGD) ZeroGrad(setToNone bool) { torch.ZeroGrads(o.group.Params, setToNone) }

// ParamGroups returns the one group (schedulers change its LR).
func (o *MomentumSGD) ParamGroups() []*optim.ParamGroup { return []*optim.ParamGroup{o.group} }

// Params returns the parameters.
func (o *MomentumSGD) Params() []*torch.Tensor { return o.group.Params }

// StateDict returns PyTorch's layout: state by parameter index, then param_groups.
func (o *MomentumSGD) StateDict() *checkpoint.Dict {
	state := checkpoint.NewDict()
	for i, b := range o.bufs {
		if b != nil {
			s := checkpoint.NewDict()
			s.Set("momentum_buffer", b)
			state.Set(int64(i), s)
		}
	}
	g := checkpoint.NewDict()
	g.Set("lr", o.group.LR)
	for k, v := range o.group.Options.All() {
		g.Set(k, v)
	}
	ids := make([]any, len(o.group.Params))
	for i := range ids {
		ids[i] = int64(i)
	}
	g.Set("params", ids)
	sd := checkpoint.NewDict()
	sd.Set("state", state)
	sd.Set("param_groups", []any{g})
	return sd
}

// LoadStateDict loads PyTorch's layout (from StateDict, a checkpoint, or Python's
// torch.optim.SGD), copying the buffers into tensors the optimizer owns.
func (o *MomentumSGD) LoadStateDict(sd *checkpoint.Dict) (err error) {
	defer torch.Recover(&err, "MomentumSGD load_state_dict")
	groups, err := checkpoint.GetList(sd, "param_groups")
	if err != nil {
		return err
	}
	if len(groups) != 1 {
		return fmt.Errorf("%d parameter groups, want 1", len(groups))
	}
	lr, err := checkpoint.GetFloat(groups[0], "lr")
	if err != nil {
		return err
	}
	momentum, err := checkpoint.GetFloat(groups[0], "momentum")
	if err != nil {
		return err
	}
	state, err := checkpoint.GetDict(sd, "state")
	if err != nil {
		return err
	}
	bufs := make([]*torch.Tensor, len(o.group.Params))
	for k, v := range state.All() {
		i, ok := k.(int64)
		if !ok || i < 0 || int(i) >= len(bufs) {
			return fmt.Errorf("state for parameter %v of %d", k, len(bufs))
		}
		b, err := checkpoint.Get(v, "momentum_buffer")
		if err != nil {
			return err
		}
		p := o.group.Params[i]
		if ct, ok := b.(*checkpoint.Tensor); ok {
			tv, err := torch.FromCheckpoint(ct, p.Device())
			if err != nil {
				return err
			}
			b = tv
		}
		bt, ok := b.(*torch.Tensor)
		if !ok {
			return fmt.Errorf("momentum_buffer of parameter %d is %T", i, b)
		}
		bufs[i] = p.ZerosLike().Escape()
		bufs[i].CopyFrom(bt, false)
	}
	for _, b := range o.bufs {
		if b != nil {
			b.Free()
		}
	}
	o.bufs, o.group.LR = bufs, lr
	o.group.Options.Set("momentum", momentum)
	return nil
}

// sgdData is a seeded three-class problem.
func sgdData(t *testing.T) *data.TensorDataset {
	r := rand.New(rand.NewPCG(5, 6))
	const n = 384
	xs := make([]float32, n*6)
	labels := make([]int64, n)
	for i := range n {
		x := xs[6*i : 6*i+6]
		for j := range x {
			x[j] = float32(r.NormFloat64())
		}
		labels[i] = int64(i % 3)
		x[labels[i]] += 1.5
	}
	ds, err := data.NewTensorDataset(xs, []int64{6}, labels, nil, nil)
	require.NoError(t, err)
	return ds
}

// newSGDRun builds the model, the optimizer newOpt makes over it, and a Trainer of 4
// epochs writing runDir ("" for none).
func newSGDRun(t *testing.T, ds data.Dataset, newOpt func([]*torch.Tensor) optim.Optimizer, runDir string) (*trainer.Trainer, nn.Module) {
	torch.ManualSeed(11)
	model := models.MLP(6, 16, 3)
	loader, err := data.NewLoader(ds, data.LoaderOptions{BatchSize: 32, Shuffle: true})
	require.NoError(t, err)
	tr, err := trainer.New(model, loader, nil, &nn.CrossEntropyLoss{}, newOpt(nn.Parameters(model)),
		trainer.WithEpochs(4), trainer.WithRunDir(runDir), trainer.WithOutput(io.Discard))
	require.NoError(t, err)
	return tr, model
}

func weights(m nn.Module) [][]float32 {
	var out [][]float32
	for _, p := range nn.Parameters(m) {
		out = append(out, p.Float32s())
	}
	return out
}

// TestExtendOptimizer trains with MomentumSGD through the Trainer: it computes what
// package optim's SGD computes (the same ATen arithmetic, to the bit), its state dict loads into optim.SGD, config.json names
// its class and param_groups, and a run resumed from an epoch-2 checkpoint ends with the
// weights of the uninterrupted run, which only its restored momentum buffers give.
func TestExtendOptimizer(t *testing.T) {
	ds := sgdData(t)
	dir := t.TempDir()
	mine := func(ps []*torch.Tensor) optim.Optimizer { return NewMomentumSGD(ps, 0.05, 0.9) }
	builtin := func(ps []*torch.Tensor) optim.Optimizer {
		o, err := optim.NewSGD(ps, optim.SGDOptions{LR: 0.05, Momentum: 0.9})
		require.NoError(t, err)
		return o
	}
	ctx := context.Background()

	full, model := newSGDRun(t, ds, mine, filepath.Join(dir, "full"))
	require.NoError(t, full.Run(ctx))
	assert.Less(t, full.History[3].TrainLoss, full.History[0].TrainLoss*0.8, "the loss falls")
	want := weights(model)

	ref, refModel := newSGDRun(t, ds, builtin, "")
	require.NoError(t, ref.Run(ctx))
	got := weights(refModel)
	for i := range want {
		assert.Equal(t, want[i], got[i], "parameter %d against optim.SGD", i)
	}

	// The state dict is PyTorch's layout: package optim's SGD loads it.
	sgd, err := optim.NewSGD(nn.Parameters(model), optim.SGDOptions{LR: 0.05, Momentum: 0.9})
	require.NoError(t, err)
	require.NoError(t, sgd.LoadStateDict(full.Optimizer.StateDict()))
	buf, err := checkpoint.Get(sgd.StateDict(), "state", int64(0), "momentum_buffer")
	require.NoError(t, err)
	assert.Equal(t, full.Optimizer.(*MomentumSGD).bufs[0].Float32s(), buf.(*torch.Tensor).Float32s())

	// config.json records the class and the group's hyperparameters.
	var config struct {
		Optimizer struct {
			Class       string           `json:"class"`
			ParamGroups []map[string]any `json:"param_groups"`
		} `json:"optimizer"`
		Scheduler string `json:"scheduler"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "full", "config.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &config))
	assert.Equal(t, "MomentumSGD", config.Optimizer.Class)
	require.Len(t, config.Optimizer.ParamGroups, 1)
	assert.Equal(t, 0.9, config.Optimizer.ParamGroups[0]["momentum"])
	assert.Equal(t, "none", config.Scheduler)

	// Stop at epoch 2, resume a fresh Trainer (fresh optimizer) from last.pt, go on to 4.
	half, _ := newSGDRun(t, ds, mine, filepath.Join(dir, "half"))
	require.NoError(t, half.RunTo(ctx, 2))
	resumed, resumedModel := newSGDRun(t, ds, mine, filepath.Join(dir, "resumed"))
	require.NoError(t, resumed.LoadCheckpoint(filepath.Join(dir, "half", "checkpoints", "last.pt")))
	require.NotNil(t, resumed.Optimizer.(*MomentumSGD).bufs[0], "the momentum buffers came back")
	require.NoError(t, resumed.Run(ctx))
	assert.Equal(t, want, weights(resumedModel), "resumed from epoch 2: the uninterrupted run's weights, to the bit")
}
