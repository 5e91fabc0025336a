// Quickstart is the seed's ten-line usage: build loaders, a model and an optimizer, make
// a trainer and call it — first to epoch 3 (the seed's trainer(3)), then on to the
// configured epochs (trainer()).
//
//	go run ./examples/quickstart            # Fashion-MNIST, 5 epochs
//	go run ./examples/quickstart -synthetic # seeded synthetic data, for machines without it
package main

import (
	"context"
	"flag"
	"log"

	"github.com/gotrain/gotrain/examples/internal/exdata"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

func main() {
	synthetic := flag.Bool("synthetic", false, "use seeded synthetic data instead of Fashion-MNIST")
	epochs := flag.Int("epochs", 5, "epochs")
	limit := flag.Int("limit", 0, "use only the first N training samples")
	flag.Parse()
	if err := run(context.Background(), *synthetic, *epochs, *limit, "runs/quickstart"); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, synthetic bool, epochs, limit int, runDir string) error {
	trainLoader, testLoader, err := exdata.Loaders(synthetic, limit)
	if err != nil {
		return err
	}
	model := models.SmallCNN(10)
	opt, err := optim.NewAdam(nn.Parameters(model), optim.AdamOptions{LR: 1e-3})
	if err != nil {
		return err
	}
	t, err := trainer.New(model, trainLoader, testLoader, &nn.CrossEntropyLoss{}, opt,
		trainer.WithEpochs(epochs), trainer.WithRunDir(runDir))
	if err != nil {
		return err
	}
	if err := t.RunTo(ctx, min(3, epochs)); err != nil { // trainer(3)
		return err
	}
	return t.Run(ctx) // trainer(): on to the configured epochs
}
