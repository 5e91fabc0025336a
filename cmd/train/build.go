package main

import (
	"fmt"
	"io"
	"math"
	"os"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/distributed"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// channels3 feeds 1-channel images to a 3-channel model (ResNet-18) by repeating them.
type channels3 struct {
	nn.Base
	inner nn.Layer
}

func (m *channels3) Forward(x *torch.Tensor) *torch.Tensor {
	return m.inner.Forward(x.Expand(-1, 3, -1, -1))
}

// model builds the named model for the data: its input size and class count follow
// the data's.
func model(name string, spec *dataSpec) (nn.Module, error) {
	classes := int64(spec.classes)
	text := spec.kind == "text" || spec.kind == "tokens"
	if text != (name == "gpt") {
		return nil, fmt.Errorf("--model %s on %s data: text and token files train --model gpt, and gpt trains on them", name, spec.kind)
	}
	switch name {
	case "gpt":
		c := gptConfig(int(spec.shape[0]))
		if spec.kind == "tokens" {
			c.VocabSize = classes
		}
		return models.NewGPT2LMHeadModel(c)
	case "vit":
		return vitModel(spec.shape, classes)
	case "mlp":
		return models.MLP(spec.inputFeatures(), 256, classes), nil
	}
	if spec.kind == "csv" {
		return nil, fmt.Errorf("--model %s takes images; a CSV's rows train --model mlp", name)
	}
	switch name {
	case "cnn":
		if fmt.Sprint(spec.shape) != "[1 28 28]" {
			return nil, fmt.Errorf("--model cnn takes 1x28x28 images, the data has %v: use --model resnet18 or mlp", spec.shape)
		}
		return models.SmallCNN(classes), nil
	case "resnet18":
		if len(spec.shape) != 3 {
			return nil, fmt.Errorf("--model resnet18 takes images, the data's samples have shape %v", spec.shape)
		}
		if spec.shape[0] == 3 {
			return models.ResNet18(classes), nil
		}
		m := &channels3{inner: models.ResNet18(classes)}
		nn.Register(&m.Base, "net", m.inner)
		return m, nil
	}
	return nil, fmt.Errorf("unknown model %q (want mlp, cnn, resnet18, vit or gpt)", name)
}

func optimizer(c Config, params []*torch.Tensor) (optim.Optimizer, error) {
	switch c.Optimizer {
	case "sgd":
		return optim.NewSGD(params, optim.SGDOptions{LR: c.LR, Momentum: c.Momentum, WeightDecay: c.WeightDecay})
	case "adam":
		return optim.NewAdam(params, optim.AdamOptions{LR: c.LR, WeightDecay: c.WeightDecay, Fused: c.AdamKernel == "fused"})
	case "adamw":
		return optim.NewAdamW(params, optim.AdamOptions{LR: c.LR, WeightDecay: c.WeightDecay, Fused: c.AdamKernel == "fused"})
	case "rmsprop":
		return optim.NewRMSprop(params, optim.RMSpropOptions{LR: c.LR, Momentum: c.Momentum, WeightDecay: c.WeightDecay})
	case "adagrad":
		return optim.NewAdagrad(params, optim.AdagradOptions{LR: c.LR, WeightDecay: c.WeightDecay})
	}
	return nil, fmt.Errorf("unknown optimizer %q (want sgd, adam, adamw, rmsprop or adagrad)", c.Optimizer)
}

func scheduler(c Config, opt optim.Optimizer, stepsPerEpoch int) (optim.Scheduler, trainer.Interval, error) {
	epochs := int64(max(c.Epochs, 1))
	total := epochs * int64(max(stepsPerEpoch, 1)) // the run's optimizer steps
	if c.MaxSteps > 0 {
		total = int64(c.MaxSteps)
	}
	warmup := int64(c.WarmupSteps)
	if c.WarmupRatio > 0 {
		warmup = int64(math.Ceil(c.WarmupRatio * float64(total)))
	}
	if (warmup > 0 || c.MaxSteps > 0) && c.Scheduler == "cosine" {
		return perStep(optim.NewLambdaLR(opt, warmupCosine(warmup, total)))
	}
	switch c.Scheduler {
	case "linear":
		return perStep(optim.NewLambdaLR(opt, warmupLinear(warmup, total)))
	case "constant":
		return perStep(optim.NewLambdaLR(opt, func(step int64) float64 { return warmupFactor(step, warmup) }))
	}
	if warmup > 0 {
		return nil, 0, fmt.Errorf("scheduler %q has no warmup: use linear, constant or cosine with --warmup-steps or --warmup-ratio", c.Scheduler)
	}
	switch c.Scheduler {
	case "", "none":
		return nil, c.SchedulerInterval, nil
	case "step":
		return perEpoch(optim.NewStepLR(opt, max(epochs/3, 1), 0.1))
	case "cosine":
		return perEpoch(optim.NewCosineAnnealingLR(opt, epochs, 0))
	case "exponential":
		return perEpoch(optim.NewExponentialLR(opt, 0.9))
	case "onecycle":
		s, err := optim.NewOneCycleLR(opt, []float64{c.LR * 10}, total, optim.OneCycleOptions{})
		if err != nil {
			return nil, 0, err
		}
		return s, trainer.PerStep, nil
	case "plateau":
		return perEpoch(optim.NewReduceLROnPlateau(opt, optim.PlateauOptions{Mode: c.MonitorDirection().String(), Factor: 0.1, Patience: 2}))
	}
	return nil, 0, fmt.Errorf("unknown scheduler %q (want none, step, cosine, exponential, onecycle, plateau, linear or constant)", c.Scheduler)
}

// warmupFactor is the learning rate's factor at optimizer step step (0-based) of a
// linear warmup over warmup steps: step/warmup, as transformers' schedules with warmup;
// 1 once it is over.
func warmupFactor(step, warmup int64) float64 {
	if step < warmup {
		return float64(step) / float64(max(warmup, 1))
	}
	return 1
}

// warmupLinear is transformers' get_linear_schedule_with_warmup: up over warmup steps,
// then down linearly to 0 at step total.
func warmupLinear(warmup, total int64) func(int64) float64 {
	return func(step int64) float64 {
		if step < warmup {
			return warmupFactor(step, warmup)
		}
		return max(0, float64(total-step)/float64(max(total-warmup, 1)))
	}
}

// warmupCosine is transformers' get_cosine_schedule_with_warmup (half a cosine wave):
// up over warmup steps, then down along a cosine to 0 at step total.
func warmupCosine(warmup, total int64) func(int64) float64 {
	return func(step int64) float64 {
		if step < warmup {
			return warmupFactor(step, warmup)
		}
		progress := float64(step-warmup) / float64(max(total-warmup, 1))
		return max(0, 0.5*(1+math.Cos(math.Pi*progress)))
	}
}

// perStep returns a constructor's scheduler, to be stepped every optimizer step, or its
// error.
func perStep[T optim.Scheduler](s T, err error) (optim.Scheduler, trainer.Interval, error) {
	if err != nil {
		return nil, 0, err
	}
	return s, trainer.PerStep, nil
}

// perEpoch returns a constructor's scheduler, to be stepped every epoch, or its error.
// The error is checked first so that a failed constructor's nil *T does not become a
// non-nil Scheduler.
func perEpoch[T optim.Scheduler](s T, err error) (optim.Scheduler, trainer.Interval, error) {
	if err != nil {
		return nil, 0, err
	}
	return s, trainer.PerEpoch, nil
}

// optimization makes c's optimizer over params and its learning-rate scheduler for
// epochs of the given number of batches (c.Accumulation of them to an optimizer step),
// and sets c.SchedulerInterval to the interval the scheduler steps at.
func optimization(c *Config, params []*torch.Tensor, batches int) (optim.Optimizer, optim.Scheduler, error) {
	opt, err := optimizer(*c, params)
	if err != nil {
		return nil, nil, err
	}
	steps := (batches + max(c.Accumulation, 1) - 1) / max(c.Accumulation, 1)
	sched, interval, err := scheduler(*c, opt, steps)
	if err != nil {
		return nil, nil, err
	}
	c.SchedulerInterval = interval
	return opt, sched, nil
}

func build(c Config, runDir string, pg *distributed.ProcessGroup) (*trainer.Trainer, error) {
	if isHFDir(c.Model) {
		return buildHF(c, runDir, pg)
	}
	spec, err := loadData(c)
	if err != nil {
		return nil, err
	}
	dev, err := trainer.ResolveDevice(rankDevice(c.Device, pg))
	if err != nil {
		return nil, err
	}
	trainLoader, err := data.NewLoader(spec.train, data.LoaderOptions{BatchSize: c.BatchSize, Shuffle: true, Workers: c.Workers, Seed: c.Seed,
		Device: dev, Transform: spec.transform, OnDevice: spec.onDevice(), Rank: pg.Rank(), WorldSize: pg.WorldSize()})
	if err != nil {
		return nil, err
	}
	var valLoader *data.Loader
	if spec.val != nil {
		valBatch := 1000 // small images: few, large validation batches
		if spec.kind != "fashion-mnist" && spec.kind != "synthetic" {
			valBatch = c.BatchSize
		}
		valLoader, err = data.NewLoader(spec.val, data.LoaderOptions{BatchSize: valBatch, Workers: c.Workers, Device: dev,
			Transform: spec.transform, OnDevice: spec.onDevice()})
		if err != nil {
			return nil, err
		}
	}
	if c.Model == defaultConfig().Model { // the default image model reads neither text nor tables
		switch spec.kind {
		case "text", "tokens":
			c.Model = "gpt"
		case "csv":
			c.Model = "mlp"
		}
	}
	torch.ManualSeed(c.Seed) // the model's initial weights depend on the seed only
	m, err := model(c.Model, spec)
	if err != nil {
		return nil, err
	}
	if _, lm := m.(*models.GPT2LMHeadModel); c.FSDPMixedPrecision != "" && !lm {
		return nil, fmt.Errorf("--fsdp-mixed-precision takes a language model (--model gpt, or a Hugging Face directory): --model %s reads fp32 inputs, which bf16 parameters do not take", c.Model)
	}
	nn.ToDevice(m, dev)
	opt, sched, err := optimization(&c, nn.Parameters(m), trainLoader.Len())
	if err != nil {
		return nil, err
	}
	loss := &nn.CrossEntropyLoss{}
	c.ClassNames = spec.names
	opts := append(trainerOptions(c.Config), trainer.WithScheduler(sched, c.SchedulerInterval), trainer.WithRunDir(runDir),
		trainer.WithModelConfig(c.Model), trainer.WithRunConfig(c))
	if pg != nil {
		opts = append(opts, parallelism(c, pg))
	}
	if _, ok := m.(*models.GPT2LMHeadModel); ok && c.Monitor == "val_acc" {
		opts = append(opts, trainer.WithMonitor("val_loss", trainer.Min))
	}
	if spec.kind == "tokens" {
		opts = append(opts, trainer.WithTrainStep(tokenStep))
	} else if gpt, ok := m.(*models.GPT2LMHeadModel); ok {
		out := io.Writer(os.Stdout)
		if pg != nil && !pg.IsMain() {
			out = io.Discard
		}
		opts = append(opts, trainer.WithTrainStep(lmStep),
			trainer.WithCallbacks(&lmCallback{model: gpt, prompt: "\n", tokens: 64, out: out}))
	}
	return trainer.New(m, trainLoader, valLoader, loss, opt, opts...)
}

// parallelism is the trainer's strategy over pg: sharded (--fsdp, --fsdp-reshard,
// --fsdp-mixed-precision) or data-parallel.
func parallelism(c Config, pg *distributed.ProcessGroup) trainer.Option {
	if c.FSDP {
		return trainer.WithStrategy(&trainer.FullyShardedDataParallel{Group: pg, ReshardAfterForward: c.FSDPReshard,
			MixedPrecision: c.fsdpMixedPrecision()})
	}
	return trainer.WithDistributed(pg)
}

// fsdpMixedPrecision is the sharded strategy's mixed-precision policy
// (--fsdp-mixed-precision): bf16 parameters, reduced in fp32.
func (c Config) fsdpMixedPrecision() trainer.FSDPMixedPrecision {
	if c.FSDPMixedPrecision == "bf16" {
		return trainer.FSDPMixedPrecision{ParamDType: torch.BFloat16, ReduceDType: torch.Float32}
	}
	return trainer.FSDPMixedPrecision{}
}

// unsharded runs fn with the whole model on this rank: under sharded training every
// rank must call it (FullyShardedDataParallel.Unsharded gathers), each with its fn.
func unsharded(t *trainer.Trainer, fn func() error) error {
	if f, ok := t.Strategy().(*trainer.FullyShardedDataParallel); ok {
		return f.Unsharded(fn)
	}
	return fn()
}
