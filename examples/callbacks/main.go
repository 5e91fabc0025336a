// Callbacks shows early stopping and TensorBoard logging, and a callback of your own
// written as a function.
//
//	go run ./examples/callbacks -synthetic
//	tensorboard --logdir runs/callbacks-example
package main

import (
	"context"
	"flag"
	"fmt"
	"log"

	"github.com/gotrain/gotrain/examples/internal/exdata"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

func main() {
	synthetic := flag.Bool("synthetic", false, "use seeded synthetic data instead of Fashion-MNIST")
	limit := flag.Int("limit", 8192, "use only the first N training samples")
	flag.Parse()
	if err := run(*synthetic, *limit, 20, "runs/callbacks-example"); err != nil {
		log.Fatal(err)
	}
}

func run(synthetic bool, limit, epochs int, runDir string) error {
	train, test, err := exdata.Loaders(synthetic, limit)
	if err != nil {
		return err
	}
	model := models.MLP(28*28, 64, 10)
	opt, err := optim.NewAdam(nn.Parameters(model), optim.AdamOptions{LR: 1e-3})
	if err != nil {
		return err
	}
	// Stop when val_loss has not improved by more than 1e-3 for 2 epochs.
	early, err := trainer.NewEarlyStopping("val_loss", trainer.Min, 2, 1e-3)
	if err != nil {
		return err
	}
	tb := &trainer.TensorBoard{Dir: runDir + "/tb"}
	announce := trainer.CallbackFunc(func(e trainer.Event, t *trainer.Trainer) error {
		if e == trainer.ValidationEnd {
			fmt.Printf("  epoch %d: val_acc %.4f (early stopping wait %d/%d)\n", t.Epoch+1, t.Metrics["val_acc"], early.Wait, early.Patience)
		}
		return nil
	})
	t, err := trainer.New(model, train, test, &nn.CrossEntropyLoss{}, opt,
		trainer.WithEpochs(epochs), trainer.WithRunDir(runDir), trainer.WithMonitor("val_loss", trainer.Min),
		trainer.WithCallbacks(early, tb, announce, &trainer.LRMonitor{TensorBoard: tb}))
	if err != nil {
		return err
	}
	if err := t.Run(context.Background()); err != nil {
		return err
	}
	fmt.Println("stopped:", t.StopReason())
	return nil
}
