// Command resnet18 builds ResNet-18 from gotrain's layers, prints its parameter count
// and runs one forward pass on a random batch.
package main

import (
	"flag"
	"fmt"
	"log"

	"github.com/gotrain/gotrain/examples/resnet"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

func main() {
	classes := flag.Int64("classes", 1000, "number of classes")
	batch := flag.Int64("batch", 2, "batch size")
	size := flag.Int64("size", 224, "image height and width")
	device := flag.String("device", "cpu", "device: cpu or cuda[:n]")
	flag.Parse()
	dev, err := torch.ParseDevice(*device)
	if err != nil {
		log.Fatal(err)
	}

	torch.ManualSeed(0)
	model := resnet.ResNet18(*classes)
	defer nn.Free(model)
	nn.ToDevice(model, dev)
	nn.SetTraining(model, false)
	fmt.Printf("ResNet-18: %d parameters\n", nn.NumParameters(model))

	torch.WithScope(func() {
		torch.NoGrad(func() {
			x := torch.Randn([]int64{*batch, 3, *size, *size}, torch.Float32, dev)
			y := model.Forward(x)
			fmt.Printf("forward: %v -> %v\n", x.Shape(), y.Shape())
		})
	})
}
