//go:build cuda

package trainer_test

import (
	"context"
	"io"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// graphTrainer trains the seed's CNN (batch norm, dropout) on the GPU over 200 samples
// in batches of 16 — twelve a epoch and a last one of 8, which is never seen often
// enough to be captured — with a per-step exponential learning rate, so that every
// replay runs at a new rate. opt makes the optimizer.
func graphTrainer(t *testing.T, graphs bool, opt func([]*torch.Tensor) optim.Optimizer, opts ...trainer.Option) *trainer.Trainer {
	t.Helper()
	if !torch.CUDAIsAvailable() {
		t.Skip("no usable CUDA device")
	}
	t.Setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
	r := rand.New(rand.NewPCG(1, 2))
	xs := make([]float32, 200*28*28)
	for i := range xs {
		xs[i] = float32(r.NormFloat64())
	}
	ys := make([]int64, 200)
	for i := range ys {
		ys[i] = int64(r.IntN(10))
	}
	ds, err := data.NewTensorDataset(xs, []int64{1, 28, 28}, ys, nil, nil)
	require.NoError(t, err)
	l, err := data.NewLoader(ds, data.LoaderOptions{BatchSize: 16, Shuffle: true, Seed: seed})
	require.NoError(t, err)
	torch.ManualSeed(seed)
	m := models.SmallCNN(10)
	o := opt(nn.Parameters(m))
	sched, err := optim.NewExponentialLR(o, 0.95)
	require.NoError(t, err)
	all := append([]trainer.Option{trainer.WithDevice("cuda:0"), trainer.WithOutput(io.Discard), trainer.WithEpochs(2),
		trainer.WithSeed(seed), trainer.WithDeterministic(true), trainer.WithLogEvery(5),
		trainer.WithScheduler(sched, trainer.PerStep), trainer.WithCUDAGraphs(graphs)}, opts...)
	tt, err := trainer.New(m, l, nil, &nn.CrossEntropyLoss{}, o, all...)
	require.NoError(t, err)
	return tt
}

func fusedAdamW(ps []*torch.Tensor) optim.Optimizer {
	o, err := optim.NewAdamW(ps, optim.AdamOptions{LR: 1e-3, WeightDecay: 0.01, Fused: true})
	if err != nil {
		panic(err)
	}
	return o
}

func momentumSGD(ps []*torch.Tensor) optim.Optimizer {
	o, err := optim.NewSGD(ps, optim.SGDOptions{LR: 0.05, Momentum: 0.9})
	if err != nil {
		panic(err)
	}
	return o
}

// weights returns the model's state as float64s, parameter by parameter.
func weights(t *testing.T, tt *trainer.Trainer) map[string][]float64 {
	out := map[string][]float64{}
	torch.WithScope(func() {
		for k, v := range nn.StateDict(tt.Model).All() {
			if x, ok := v.(*torch.Tensor); ok {
				out[k.(string)] = x.Float64s()
			}
		}
	})
	return out
}

// TestCUDAGraphsEqualEager: two epochs of the CNN with the step captured as a CUDA graph
// train the weights eager training does, within float tolerance — with the learning rate
// changed by the scheduler at every step and replayed without a new capture (one graph
// an epoch: the batch of 16; the last batch of 8 runs eagerly) — for fused AdamW and for
// SGD with momentum. Whether they agree to the bit is logged.
func TestCUDAGraphsEqualEager(t *testing.T) {
	for _, c := range []struct {
		name string
		opt  func([]*torch.Tensor) optim.Optimizer
	}{{"adamw fused", fusedAdamW}, {"sgd momentum", momentumSGD}} {
		t.Run(c.name, func(t *testing.T) {
			eager := graphTrainer(t, false, c.opt)
			require.NoError(t, eager.Run(context.Background()))
			graphed := graphTrainer(t, true, c.opt)
			require.NoError(t, graphed.Run(context.Background()))
			assert.Equal(t, 1, graphed.CapturedGraphs(), "one graph for the full batches; the last one ran eagerly")
			assert.Equal(t, 0, eager.CapturedGraphs())
			assert.Equal(t, eager.GlobalStep, graphed.GlobalStep)
			assert.Equal(t, eager.LR(), graphed.LR())
			assert.Less(t, eager.LR(), 0.95*0.95*fusedOrSGDLR(c.name), "the rate moved every step")

			want, got := weights(t, eager), weights(t, graphed)
			require.Equal(t, len(want), len(got))
			bitwise, worst := true, 0.0
			for k, w := range want {
				g := got[k]
				require.Len(t, g, len(w), k)
				for i := range w {
					d := math.Abs(w[i] - g[i])
					bitwise = bitwise && w[i] == g[i]
					worst = max(worst, d/max(math.Abs(w[i]), 1))
				}
			}
			t.Logf("%s: bitwise equal %v, largest relative difference %g", c.name, bitwise, worst)
			assert.Less(t, worst, 1e-4)
			require.Len(t, graphed.History, 2)
			for i := range eager.History {
				assert.InDelta(t, eager.History[i].TrainLoss, graphed.History[i].TrainLoss, 1e-4)
			}
		})
	}
}

func fusedOrSGDLR(name string) float64 {
	if name == "adamw fused" {
		return 1e-3
	}
	return 0.05
}

// TestCUDAGraphsEventOrder: a recorder of every event a captured step leaves to Go sees
// the same events, at the same steps and batches and logging points, eager and graphed
// (TestEventOrderInEveryStepPath's check for the GPU's fast path).
func TestCUDAGraphsEventOrder(t *testing.T) {
	type seen struct {
		Event      trainer.Event
		Step       int64
		Batch      int
		LogPoint   bool
		TrainCount int
	}
	run := func(graphs bool) []seen {
		var got []seen
		cb := trainer.On(func(e trainer.Event, tt *trainer.Trainer) error {
			got = append(got, seen{e, tt.GlobalStep, tt.BatchInEpoch, tt.LogPoint, len(tt.TrainMetrics)})
			return nil
		}, trainer.TrainBegin, trainer.EpochBegin, trainer.BatchEnd, trainer.Logged, trainer.AfterOptimizerStep,
			trainer.EpochEnd, trainer.TrainEnd)
		tt := graphTrainer(t, graphs, fusedAdamW, trainer.WithCallbacks(cb))
		require.NoError(t, tt.Run(context.Background()))
		return got
	}
	eager := run(false)
	require.NotEmpty(t, eager)
	assert.Equal(t, eager, run(true))
}

// TestCUDAGraphsHostReadRefused: a step that reads a value on the host cannot be
// captured: the run stops at its first step with an error naming the read.
func TestCUDAGraphsHostReadRefused(t *testing.T) {
	step := func(m nn.Layer, b data.Batch) (*torch.Tensor, trainer.Metrics) {
		loss := (&nn.CrossEntropyLoss{}).Forward(m.Forward(b.Get(data.Input)), b.Get(data.Label))
		if loss.Item() > 1e9 {
			panic("unreachable")
		}
		return loss, nil
	}
	tt := graphTrainer(t, true, fusedAdamW, trainer.WithTrainStep(trainer.Step[nn.Layer](step)))
	err := tt.Run(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cannot be captured")
	assert.Contains(t, err.Error(), "item reads a value on the host")
	assert.Equal(t, 0, tt.CapturedGraphs())
}
