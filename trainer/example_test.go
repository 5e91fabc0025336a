package trainer_test

import (
	"context"
	"fmt"
	"io"
	"log"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// exampleLoaders are 256 seeded synthetic 28x28 images of 10 classes, and 64 more to
// validate on.
func exampleLoaders() (train, val *data.Loader) {
	all, err := data.Synthetic(320, 10, []int64{1, 28, 28}, 1)
	if err != nil {
		log.Fatal(err)
	}
	parts, err := data.RandomSplit(all, []int{256, 64}, 1)
	if err != nil {
		log.Fatal(err)
	}
	train, err = data.NewLoader(parts[0], data.LoaderOptions{BatchSize: 32, Shuffle: true, Seed: 1})
	if err != nil {
		log.Fatal(err)
	}
	val, err = data.NewLoader(parts[1], data.LoaderOptions{BatchSize: 64})
	if err != nil {
		log.Fatal(err)
	}
	return train, val
}

// The default step is classification: loss(model(input), label), with the validation
// accuracy recorded as val_acc.
func ExampleNew() {
	train, val := exampleLoaders()
	torch.ManualSeed(1)
	model := models.MLP(28*28, 32, 10)
	opt, err := optim.NewAdam(nn.Parameters(model), optim.AdamOptions{LR: 1e-3})
	if err != nil {
		log.Fatal(err)
	}
	t, err := trainer.New(model, train, val, &nn.CrossEntropyLoss{}, opt,
		trainer.WithEpochs(2), trainer.WithDevice("cpu"), trainer.WithOutput(io.Discard))
	if err != nil {
		log.Fatal(err)
	}
	if err := t.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("epochs:", t.Epoch, "optimizer steps:", t.GlobalStep)
	fmt.Println("val_acc recorded:", len(t.History) == 2 && t.History[1].ValAcc >= 0)
	// Output:
	// epochs: 2 optimizer steps: 16
	// val_acc recorded: true
}

// A user-owned step reads the batch's named fields and returns the loss and metrics;
// the Trainer keeps autocast, accumulation, scheduling, checkpoints and the rest.
// Metrics are recorded as train_<name> and val_<name>, here val_top1, which also picks
// the best checkpoint.
func ExampleWithTrainStep() {
	train, val := exampleLoaders()
	torch.ManualSeed(1)
	model := models.MLP(28*28, 32, 10)
	opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDOptions{LR: 0.05, Momentum: 0.9})
	if err != nil {
		log.Fatal(err)
	}
	smoothed := &nn.CrossEntropyLoss{CrossEntropyOptions: torch.CrossEntropyOptions{LabelSmoothing: 0.1}}
	step := func(m *nn.Sequential, b data.Batch) (*torch.Tensor, trainer.Metrics) {
		logits := m.Forward(b.Get(data.Input))
		labels := b.Get(data.Label)
		top1 := logits.Argmax(1, false).Eq(labels).ToDType(torch.Float32).Mean()
		return smoothed.Forward(logits, labels), trainer.Metrics{"top1": top1}
	}
	t, err := trainer.New(model, train, val, nil, opt,
		trainer.WithTrainStep(step), trainer.WithMonitor("val_top1", trainer.Max),
		trainer.WithAccumulation(2), trainer.WithEpochs(1), trainer.WithDevice("cpu"), trainer.WithOutput(io.Discard))
	if err != nil {
		log.Fatal(err)
	}
	if err := t.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
	_, ok := t.History[0].Metrics["val_top1"]
	fmt.Println("optimizer steps:", t.GlobalStep, "val_top1 recorded:", ok)
	// Output:
	// optimizer steps: 4 val_top1 recorded: true
}

// A Resident loader keeps the dataset in libtorch memory, and the Trainer then runs its
// one-call steps in runs, several in one call into libtorch, as long as nothing listens
// between steps: a callback at Logged (each logging point) is fine, one at BatchEnd
// brings back one step per call. The results are the same to the bit either way.
func ExampleWithStepsPerCall() {
	inputs := make([]float32, 256*28*28)
	labels := make([]int64, 256)
	for i := range labels {
		labels[i] = int64(i % 10)
		inputs[i*28*28+i%10] = 1 // a pixel that gives the class away
	}
	ds, err := data.NewTensorDataset(inputs, []int64{1, 28, 28}, labels, nil, nil)
	if err != nil {
		log.Fatal(err)
	}
	train, err := data.NewLoader(ds, data.LoaderOptions{BatchSize: 16, Shuffle: true, Seed: 1, Resident: true})
	if err != nil {
		log.Fatal(err)
	}
	defer train.Free()
	run := func(cb trainer.Callback) (*trainer.Trainer, float64) {
		torch.ManualSeed(1)
		model := models.MLP(28*28, 32, 10)
		opt, err := optim.NewAdam(nn.Parameters(model), optim.AdamOptions{LR: 1e-2, Fused: true})
		if err != nil {
			log.Fatal(err)
		}
		t, err := trainer.New(model, train, nil, &nn.CrossEntropyLoss{}, opt, trainer.WithCallbacks(cb),
			trainer.WithLogEvery(8), trainer.WithEpochs(2), trainer.WithSeed(1), trainer.WithDevice("cpu"), trainer.WithOutput(io.Discard))
		if err != nil {
			log.Fatal(err)
		}
		if err := t.Run(context.Background()); err != nil {
			log.Fatal(err)
		}
		return t, t.History[1].TrainLoss
	}
	logs := 0
	runs, loss := run(trainer.On(func(trainer.Event, *trainer.Trainer) error { logs++; return nil }, trainer.Logged))
	steps, same := run(trainer.On(func(trainer.Event, *trainer.Trainer) error { return nil }, trainer.BatchEnd))
	fmt.Println("at most", runs.StepsPerCall(), "steps a call;", runs.GlobalStep, "steps,", logs, "logging points")
	fmt.Println("with a callback at BatchEnd:", steps.StepsPerCall(), "step a call; same loss:", loss == same)
	// Output:
	// at most 64 steps a call; 32 steps, 4 logging points
	// with a callback at BatchEnd: 1 step a call; same loss: true
}
