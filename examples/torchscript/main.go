// Torchscript fine-tunes a model that Python wrote with torch.jit.save: gotrain loads
// it, trains it with the Trainer, and writes checkpoints whose model_state_dict loads
// back into the Python model.
//
//	python -c 'import torch; m = torch.jit.script(torch.nn.Sequential(torch.nn.Flatten(),
//	    torch.nn.Linear(784, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))); m.save("mlp.pt")'
//	go run ./examples/torchscript -model mlp.pt -synthetic
package main

import (
	"context"
	"flag"
	"log"

	"github.com/gotrain/gotrain/examples/internal/exdata"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

func main() {
	path := flag.String("model", "model.pt", "a TorchScript file saved by torch.jit.save, mapping [N,1,28,28] to [N,10]")
	synthetic := flag.Bool("synthetic", false, "use seeded synthetic data instead of Fashion-MNIST")
	flag.Parse()
	if err := run(*path, *synthetic, 4096, 2, "runs/torchscript-example"); err != nil {
		log.Fatal(err)
	}
}

func run(path string, synthetic bool, limit, epochs int, runDir string) error {
	train, test, err := exdata.Loaders(synthetic, limit)
	if err != nil {
		return err
	}
	model, err := nn.LoadScript(path, torch.CPU)
	if err != nil {
		return err
	}
	opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDOptions{LR: 0.05, Momentum: 0.9})
	if err != nil {
		return err
	}
	t, err := trainer.New(model, train, test, &nn.CrossEntropyLoss{}, opt,
		trainer.WithEpochs(epochs), trainer.WithRunDir(runDir), trainer.WithDevice("cpu"))
	if err != nil {
		return err
	}
	return t.Run(context.Background())
}
