// Amp trains with automatic mixed precision: bfloat16 autocast (on the CPU, or on a
// GPU), or float16 with a GradScaler on CUDA. The history records the loss scale and
// skipped steps.
//
//	go run ./examples/amp -synthetic            # bf16
//	go run ./examples/amp -mode fp16 -device cuda
package main

import (
	"context"
	"flag"
	"log"

	"github.com/gotrain/gotrain/amp"
	"github.com/gotrain/gotrain/examples/internal/exdata"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

func main() {
	synthetic := flag.Bool("synthetic", false, "use seeded synthetic data instead of Fashion-MNIST")
	mode := amp.BF16
	flag.TextVar(&mode, "mode", mode, "bf16 or fp16 (fp16 needs CUDA)")
	device := flag.String("device", "auto", "device")
	flag.Parse()
	if err := run(*synthetic, 4096, 2, mode, *device, "runs/amp-example"); err != nil {
		log.Fatal(err)
	}
}

func run(synthetic bool, limit, epochs int, mode amp.Mode, device, runDir string) error {
	train, test, err := exdata.Loaders(synthetic, limit)
	if err != nil {
		return err
	}
	model := models.SmallCNN(10)
	opt, err := optim.NewAdam(nn.Parameters(model), optim.AdamOptions{LR: 1e-3})
	if err != nil {
		return err
	}
	t, err := trainer.New(model, train, test, &nn.CrossEntropyLoss{}, opt,
		trainer.WithEpochs(epochs), trainer.WithRunDir(runDir), trainer.WithAMP(mode), trainer.WithDevice(device))
	if err != nil {
		return err
	}
	return t.Run(context.Background())
}
