// Custommodel defines a model of its own: a struct that embeds nn.Base, registers its
// layers under PyTorch-style names and implements Forward. Its state dict has the keys
// the same model has in Python (conv.weight, head.0.weight, ...).
//
//	go run ./examples/custommodel -synthetic
package main

import (
	"context"
	"flag"
	"fmt"
	"log"

	"github.com/gotrain/gotrain/examples/internal/exdata"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// Net is a conv layer, global average pooling and a two-layer head.
type Net struct {
	nn.Base
	Conv *nn.Conv2d
	Head *nn.Sequential
}

// NewNet builds the model; the registration names are its state-dict keys.
func NewNet(classes int64) *Net {
	n := &Net{}
	n.Conv = nn.Register(&n.Base, "conv", nn.NewConv2d(1, 16, 3, nn.Padding(1)))
	n.Head = nn.Register(&n.Base, "head", nn.NewSequential(nn.NewLinear(16, 32), nn.NewReLU(), nn.NewLinear(32, classes)))
	return n
}

// Forward maps [N, 1, 28, 28] images to [N, classes] logits.
func (n *Net) Forward(x *torch.Tensor) *torch.Tensor {
	h := n.Conv.Forward(x).ReLU()
	h = torch.AdaptiveAvgPool2d(h, 1, 1).Flatten(1, -1)
	return n.Head.Forward(h)
}

func main() {
	synthetic := flag.Bool("synthetic", false, "use seeded synthetic data instead of Fashion-MNIST")
	flag.Parse()
	if err := run(*synthetic, 4096, 3, "runs/custommodel-example"); err != nil {
		log.Fatal(err)
	}
}

func run(synthetic bool, limit, epochs int, runDir string) error {
	train, test, err := exdata.Loaders(synthetic, limit)
	if err != nil {
		return err
	}
	model := NewNet(10)
	for _, p := range nn.NamedParameters(model) {
		fmt.Println(p.Name, p.Tensor.Shape())
	}
	opt, err := optim.NewAdamW(nn.Parameters(model), optim.AdamOptions{LR: 3e-3, WeightDecay: 0.01})
	if err != nil {
		return err
	}
	t, err := trainer.New(model, train, test, &nn.CrossEntropyLoss{}, opt,
		trainer.WithEpochs(epochs), trainer.WithRunDir(runDir), trainer.WithGradClip(1.0))
	if err != nil {
		return err
	}
	return t.Run(context.Background())
}
