package trainer_test

import (
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// signSGD is a test-only optimizer written as an optim.Algorithm: p -= lr·sign(grad),
// with a step count in its state.
var signSGD = optim.Algorithm{
	Name:  "SignSGD",
	Slots: []string{"step"},
	Update: func(g *optim.ParamGroup, p, grad *torch.Tensor, state []*torch.Tensor) {
		if state[0] == nil {
			state[0] = torch.Zeros(nil, torch.Float32, torch.CPU)
		}
		state[0].AddScalarInPlace(1)
		p.SubInPlace(grad.Sign(), g.LR)
	},
}

// TestAlgorithmThroughTheTrainer: an optimizer that is one Go file trains through the
// Trainer (op by op: the one-call step declines it), is recorded by its name, and its
// state goes through a checkpoint to an exact resume.
func TestAlgorithmThroughTheTrainer(t *testing.T) {
	build := func(dir string, epochs int) *trainer.Trainer {
		tr, va := loaders(t, 256)
		torch.ManualSeed(seed)
		m := models.MLP(784, 16, 10)
		opt, err := optim.New(signSGD, []optim.Group{{Params: nn.Parameters(m)}}, 1e-3)
		require.NoError(t, err)
		tt, err := trainer.New(m, tr, va, &nn.CrossEntropyLoss{}, opt, trainer.WithDevice("cpu"), trainer.WithOutput(io.Discard),
			trainer.WithEpochs(epochs), trainer.WithSeed(seed), trainer.WithRunDir(dir))
		require.NoError(t, err)
		return tt
	}
	ref := build(t.TempDir(), 2)
	require.NoError(t, ref.Run(context.Background()))
	assert.False(t, ref.OneCallStep())

	dir := t.TempDir()
	first := build(dir, 1)
	require.NoError(t, first.Run(context.Background()))
	resumed := build(t.TempDir(), 2)
	require.NoError(t, resumed.LoadCheckpoint(filepath.Join(dir, "checkpoints", "last.pt")))
	require.NoError(t, resumed.Run(context.Background()))
	assert.Equal(t, ref.History[1].TrainLoss, resumed.History[1].TrainLoss)
	for i, p := range nn.Parameters(ref.Model) {
		assert.Equal(t, p.Float64s(), nn.Parameters(resumed.Model)[i].Float64s())
	}
	st, ok := resumed.Optimizer.StateDict().Get("state")
	require.True(t, ok)
	assert.NotEmpty(t, st)
}
