package nn_test

// Adding a layer (docs/extending.md, "A layer"): a Go type that embeds nn.Base, registers
// its parameters under PyTorch's names and has a one-tensor Forward is an nn.Layer, so it
// goes into a Sequential, trains through the Trainer and moves to and from PyTorch by
// name. This file adds one from outside package nn, through exactly those parts.

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// Swish is x·sigmoid(β·x) with a learnable β per feature, PyTorch's
//
//	class Swish(nn.Module):
//	    def __init__(self, n):
//	        super().__init__()
//	        self.beta = nn.Parameter(torch.ones(n))
//	    def forward(self, x):
//	        return x * torch.sigmoid(self.beta * x)
type Swish struct {
	nn.Base
	Beta *torch.Tensor
}

// NewSwish returns a Swish over n features with β = 1.
func NewSwish(n int64) *Swish {
	s := &Swish{}
	s.Beta = s.RegisterParameter("beta", torch.Ones([]int64{n}, torch.Float32, torch.CPU))
	return s
}

// Forward returns x·sigmoid(β·x).
func (s *Swish) Forward(x *torch.Tensor) *torch.Tensor {
	return x.Mul(x.Mul(s.Beta).Sigmoid())
}

// TestExtendLayer puts Swish in a Sequential, trains it through the Trainer (the
// Trainer runs a Sequential holding a layer it does not know call by call) and loads the
// trained weights into the same model in PyTorch by name, which computes the same
// outputs.
func TestExtendLayer(t *testing.T) {
	torch.ManualSeed(0)
	model := nn.NewSequential(nn.NewLinear(4, 8), NewSwish(8), nn.NewLinear(8, 3))
	var names []string
	for _, p := range nn.NamedParameters(model) {
		names = append(names, p.Name)
	}
	assert.Equal(t, []string{"0.weight", "0.bias", "1.beta", "2.weight", "2.bias"}, names)

	// Three classes that a linear map of the inputs decides.
	const n = 512
	r := rand.New(rand.NewPCG(1, 2))
	xs := make([]float32, n*4)
	labels := make([]int64, n)
	for i := range n {
		x := xs[4*i : 4*i+4]
		for j := range x {
			x[j] = float32(r.NormFloat64())
		}
		switch {
		case x[0]+x[1] > 0.5:
			labels[i] = 0
		case x[2]-x[3] > 0:
			labels[i] = 1
		default:
			labels[i] = 2
		}
	}
	ds, err := data.NewTensorDataset(xs, []int64{4}, labels, nil, nil)
	require.NoError(t, err)
	loader, err := data.NewLoader(ds, data.LoaderOptions{BatchSize: 32, Shuffle: true})
	require.NoError(t, err)
	opt, err := optim.NewAdam(nn.Parameters(model), optim.AdamOptions{LR: 1e-2})
	require.NoError(t, err)
	tr, err := trainer.New(model, loader, loader, &nn.CrossEntropyLoss{}, opt,
		trainer.WithEpochs(8), trainer.WithOutput(io.Discard))
	require.NoError(t, err)
	require.NoError(t, tr.Run(context.Background()))
	first, last := tr.History[0], tr.History[len(tr.History)-1]
	assert.Less(t, last.TrainLoss, first.TrainLoss/2, "the loss falls")
	assert.Greater(t, last.ValAcc, 0.85, "accuracy on the three classes")
	beta := model.At(1).(*Swish).Beta.Float32s()
	assert.NotEqual(t, []float32{1, 1, 1, 1, 1, 1, 1, 1}, beta, "β trained")

	// The trained state dict loads into PyTorch's Sequential(Linear, Swish, Linear) with
	// strict=True, and both compute the same outputs.
	dir := t.TempDir()
	nn.SetTraining(model, false)
	torch.WithScope(func() {
		x := torch.FromSlice(xs[:40], 10, 4)
		for name, v := range map[string]any{"state.pt": nn.StateDict(model), "x.pt": x, "y.pt": model.Forward(x)} {
			cv, err := torch.ToCheckpoint(v)
			require.NoError(t, err)
			require.NoError(t, checkpoint.Write(filepath.Join(dir, name), cv))
		}
	})
	out := testpy.Run(t, `
import sys, torch
from torch import nn
class Swish(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.beta = nn.Parameter(torch.ones(n))
    def forward(self, x):
        return x * torch.sigmoid(self.beta * x)
d = sys.argv[1]
m = nn.Sequential(nn.Linear(4, 8), Swish(8), nn.Linear(8, 3))
m.load_state_dict(torch.load(d + "/state.pt"), strict=True)
print((m(torch.load(d + "/x.pt")) - torch.load(d + "/y.pt")).abs().max().item())
`, []string{"torch"}, dir)
	var diff float64
	_, err = fmt.Sscan(string(out), &diff)
	require.NoError(t, err, "%s", out)
	assert.Less(t, diff, 1e-6, "PyTorch's outputs of the trained weights")
}
