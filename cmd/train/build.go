package main

import (
	"fmt"

	"github.com/gotrain/gotrain/examples/resnet"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/distributed"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

func datasets(c trainer.Config) (train, val data.Dataset, err error) {
	synthetic, limit := c.Synthetic, c.Limit
	if synthetic > 0 {
		// One distribution, split, so the validation set is learnable from the training set.
		all, err := data.Synthetic(synthetic+max(synthetic/5, 1), 10, []int64{1, 28, 28}, c.Seed)
		if err != nil {
			return nil, nil, err
		}
		parts, err := data.RandomSplit(all, []int{synthetic, all.Len() - synthetic}, c.Seed)
		if err != nil {
			return nil, nil, err
		}
		return parts[0], parts[1], nil
	}
	tr, err := data.FashionMNIST(c.DataDir, true)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (install Debian's dataset-fashion-mnist, pass --data DIR, or use --synthetic N)", err)
	}
	te, err := data.FashionMNIST(c.DataDir, false)
	if err != nil {
		return nil, nil, err
	}
	train, val = tr, te
	if limit > 0 && limit < train.Len() {
		train, val = data.Head(train, limit), data.Head(val, limit)
	}
	return train, val, nil
}

// channels3 feeds 1-channel images to a 3-channel model (ResNet-18) by repeating them.
type channels3 struct {
	nn.Base
	inner nn.Module
}

func (m *channels3) Forward(x *torch.Tensor) *torch.Tensor {
	return m.inner.Forward(x.Expand(-1, 3, -1, -1))
}

func model(name string) (nn.Module, error) {
	switch name {
	case "mlp":
		return models.MLP(28*28, 256, 10), nil
	case "cnn":
		return models.SmallCNN(10), nil
	case "resnet18":
		m := &channels3{inner: resnet.ResNet18(10)}
		nn.Register(&m.Base, "net", m.inner)
		return m, nil
	}
	return nil, fmt.Errorf("unknown model %q (want mlp, cnn or resnet18)", name)
}

func optimizer(c trainer.Config, params []*torch.Tensor) (optim.Optimizer, error) {
	switch c.Optimizer {
	case "sgd":
		return optim.NewSGD(params, optim.SGDOptions{LR: c.LR, Momentum: c.Momentum, WeightDecay: c.WeightDecay})
	case "adam":
		return optim.NewAdam(params, optim.AdamOptions{LR: c.LR, WeightDecay: c.WeightDecay, Fused: c.Fused})
	case "adamw":
		return optim.NewAdamW(params, optim.AdamOptions{LR: c.LR, WeightDecay: c.WeightDecay, Fused: c.Fused})
	case "rmsprop":
		return optim.NewRMSprop(params, optim.RMSpropOptions{LR: c.LR, Momentum: c.Momentum, WeightDecay: c.WeightDecay})
	case "adagrad":
		return optim.NewAdagrad(params, optim.AdagradOptions{LR: c.LR, WeightDecay: c.WeightDecay})
	}
	return nil, fmt.Errorf("unknown optimizer %q (want sgd, adam, adamw, rmsprop or adagrad)", c.Optimizer)
}

func scheduler(c trainer.Config, opt optim.Optimizer, stepsPerEpoch int) (optim.Scheduler, trainer.Interval, error) {
	epochs := int64(max(c.Epochs, 1))
	switch c.Scheduler {
	case "", "none":
		return nil, c.SchedulerInterval, nil
	case "step":
		return optim.NewStepLR(opt, max(epochs/3, 1), 0.1), trainer.PerEpoch, nil
	case "cosine":
		return optim.NewCosineAnnealingLR(opt, epochs, 0), trainer.PerEpoch, nil
	case "exponential":
		return optim.NewExponentialLR(opt, 0.9), trainer.PerEpoch, nil
	case "onecycle":
		s, err := optim.NewOneCycleLR(opt, []float64{c.LR * 10}, epochs*int64(max(stepsPerEpoch, 1)), optim.OneCycleOptions{})
		return s, trainer.PerStep, err
	case "plateau":
		s, err := optim.NewReduceLROnPlateau(opt, optim.PlateauOptions{Mode: c.MonitorDirection().String(), Factor: 0.1, Patience: 2})
		return s, trainer.PerEpoch, err
	}
	return nil, 0, fmt.Errorf("unknown scheduler %q (want none, step, cosine, exponential, onecycle or plateau)", c.Scheduler)
}

func build(c trainer.Config, runDir string, pg *distributed.ProcessGroup) (*trainer.Trainer, error) {
	train, val, err := datasets(c)
	if err != nil {
		return nil, err
	}
	dev, err := trainer.ResolveDevice(rankDevice(c.Device, pg))
	if err != nil {
		return nil, err
	}
	norm := data.Normalize{Mean: data.FashionMNISTMean, Std: data.FashionMNISTStd}
	trainLoader, err := data.NewLoader(train, data.LoaderOptions{BatchSize: c.BatchSize, Shuffle: true, Workers: c.Workers, Seed: c.Seed, Device: dev, Transform: norm,
		Rank: pg.Rank(), WorldSize: pg.WorldSize()})
	if err != nil {
		return nil, err
	}
	valLoader, err := data.NewLoader(val, data.LoaderOptions{BatchSize: 1000, Workers: c.Workers, Device: dev, Transform: norm})
	if err != nil {
		return nil, err
	}
	torch.ManualSeed(c.Seed) // the model's initial weights depend on the seed only
	m, err := model(c.Model)
	if err != nil {
		return nil, err
	}
	nn.ToDevice(m, dev)
	opt, err := optimizer(c, nn.Parameters(m))
	if err != nil {
		return nil, err
	}
	steps := (trainLoader.Len() + max(c.Accumulation, 1) - 1) / max(c.Accumulation, 1)
	sched, interval, err := scheduler(c, opt, steps)
	if err != nil {
		return nil, err
	}
	c.SchedulerInterval = interval
	loss := &nn.CrossEntropyLoss{}
	opts := []trainer.Option{trainer.WithConfig(c), trainer.WithScheduler(sched, interval), trainer.WithRunDir(runDir)}
	if pg != nil {
		opts = append(opts, trainer.WithDistributed(pg))
	}
	return trainer.New(m, trainLoader, valLoader, loss.Forward, opt, opts...)
}
