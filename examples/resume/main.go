// Resume shows that nothing is lost when a run stops: it trains, is interrupted in the
// middle of epoch 2 (as Ctrl-C would), and a new trainer resumes from last.pt and
// finishes, with exactly the batches the first run had not seen.
//
//	go run ./examples/resume -synthetic
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"path/filepath"

	"github.com/gotrain/gotrain/examples/internal/exdata"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

func main() {
	synthetic := flag.Bool("synthetic", false, "use seeded synthetic data instead of Fashion-MNIST")
	limit := flag.Int("limit", 4096, "use only the first N training samples")
	flag.Parse()
	if err := run(*synthetic, *limit, "runs/resume-example"); err != nil {
		log.Fatal(err)
	}
}

func newTrainer(synthetic bool, limit int, runDir string, extra ...trainer.Option) (*trainer.Trainer, error) {
	train, test, err := exdata.Loaders(synthetic, limit)
	if err != nil {
		return nil, err
	}
	torch.ManualSeed(7)
	model := models.MLP(28*28, 128, 10)
	opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDOptions{LR: 0.05, Momentum: 0.9})
	if err != nil {
		return nil, err
	}
	opts := append([]trainer.Option{trainer.WithEpochs(3), trainer.WithRunDir(runDir), trainer.WithSeed(7)}, extra...)
	return trainer.New(model, train, test, &nn.CrossEntropyLoss{}, opt, opts...)
}

func run(synthetic bool, limit int, runDir string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Interrupt halfway through epoch 2, as a SIGINT would.
	interrupt := trainer.CallbackFunc(func(e trainer.Event, t *trainer.Trainer) error {
		if e == trainer.BatchEnd && t.Epoch == 1 && t.BatchInEpoch == t.Train.Len()/2 {
			cancel()
		}
		return nil
	})
	t, err := newTrainer(synthetic, limit, runDir, trainer.WithCallbacks(interrupt))
	if err != nil {
		return err
	}
	err = t.Run(ctx)
	var ie *trainer.InterruptedError
	if !errors.As(err, &ie) {
		return fmt.Errorf("expected an interruption, got %v", err)
	}
	fmt.Println("first run:", err)

	t2, err := newTrainer(synthetic, limit, runDir)
	if err != nil {
		return err
	}
	if err := t2.LoadCheckpoint(filepath.Join(runDir, "checkpoints", "last.pt")); err != nil {
		return err
	}
	return t2.Run(context.Background())
}
