package trainer_test

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/amp"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// TestCUDAGraphsRefused: WithCUDAGraphs is an error from New, naming the reason, on the
// CPU and for each configuration a graph cannot hold, with or without a GPU; without
// the option the same configurations train.
func TestCUDAGraphsRefused(t *testing.T) {
	build := func(opt func([]*torch.Tensor) optim.Optimizer, opts ...trainer.Option) error {
		tr, va := loaders(t, 64)
		torch.ManualSeed(seed)
		m := models.MLP(784, 8, 10)
		all := append([]trainer.Option{trainer.WithOutput(io.Discard), trainer.WithEpochs(1)}, opts...)
		_, err := trainer.New(m, tr, va, &nn.CrossEntropyLoss{}, opt(nn.Parameters(m)), all...)
		return err
	}
	must := func(o optim.Optimizer, err error) optim.Optimizer {
		require.NoError(t, err)
		return o
	}
	sgd := func(ps []*torch.Tensor) optim.Optimizer {
		return must(optim.NewSGD(ps, optim.SGDOptions{LR: 0.1, Momentum: 0.9}))
	}
	adam := func(fused bool) func([]*torch.Tensor) optim.Optimizer {
		return func(ps []*torch.Tensor) optim.Optimizer {
			return must(optim.NewAdamW(ps, optim.AdamOptions{LR: 1e-3, Fused: fused}))
		}
	}
	rmsprop := func(ps []*torch.Tensor) optim.Optimizer {
		return must(optim.NewRMSprop(ps, optim.RMSpropOptions{LR: 1e-3}))
	}
	algorithm := func(ps []*torch.Tensor) optim.Optimizer {
		return must(optim.New(signSGD, []optim.Group{{Params: ps}}, 0.01))
	}
	everyEvent := trainer.CallbackFunc(func(trainer.Event, *trainer.Trainer) error { return nil })
	stepEnd := trainer.On(func(trainer.Event, *trainer.Trainer) error { return nil }, trainer.BatchEnd, trainer.AfterOptimizerStep)
	for _, c := range []struct {
		name string
		opt  func([]*torch.Tensor) optim.Optimizer
		opts []trainer.Option
		want []string // in the error
	}{
		{"cpu", sgd, []trainer.Option{trainer.WithDevice("cpu")}, []string{"CUDA graphs need a CUDA device", "cpu"}},
		{"cpu fused adamw", adam(true), []trainer.Option{trainer.WithDevice("cpu"), trainer.WithCallbacks(stepEnd)}, []string{"CUDA device"}},
		{"adam without fused", adam(false), nil, []string{"AdamW without fused=True reads its step count on the host"}},
		{"rmsprop", rmsprop, nil, []string{"optimizer RMSprop reads its step count on the host"}},
		{"an Algorithm", algorithm, nil, []string{"is not one of torch/optim's built-in ones"}},
		{"accumulation", sgd, []trainer.Option{trainer.WithAccumulation(2)}, []string{"gradient accumulation (2 micro-batches"}},
		{"fp16", sgd, []trainer.Option{trainer.WithAMP(amp.FP16)}, []string{"fp16's GradScaler"}},
		{"callback inside the step", sgd, []trainer.Option{trainer.WithCallbacks(everyEvent)}, []string{"trainer.CallbackFunc acts at BeforeBackward or BeforeOptimizerStep"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := build(c.opt, append([]trainer.Option{trainer.WithCUDAGraphs(true)}, c.opts...)...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "WithCUDAGraphs")
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
			if c.name != "fp16" { // fp16 needs CUDA in any case
				opts := append([]trainer.Option{trainer.WithDevice("cpu")}, c.opts...)
				assert.NoError(t, build(c.opt, opts...), "without graphs it trains")
			}
		})
	}
}
