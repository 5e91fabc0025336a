// Finetune fine-tunes ResNet-18 on an ImageFolder tree (torchvision's layout:
// DIR/train/<class>/*.jpg and DIR/val/<class>/*.jpg) from torchvision's weights, saved in
// Python with
//
//	torch.save(torchvision.models.resnet18(weights="DEFAULT").state_dict(), "resnet18.pth")
//
// The backbone keeps the weights; the classifier (fc) is new, one output per class
// folder. Images are resized, flipped at random, and travel to the device as uint8,
// where they are normalized with ImageNet's statistics.
//
//	go run ./examples/finetune -data DIR -weights resnet18.pth
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"path/filepath"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// options are the example's flags.
type options struct {
	Data, Weights, RunDir string
	Epochs, ImageSize     int
	BatchSize             int
}

// loaders reads DIR/train and DIR/val.
func loaders(o options) (train, val *data.Loader, classes []string, err error) {
	tr, err := data.NewImageFolder(filepath.Join(o.Data, "train"), data.ImageFolderOptions{})
	if err != nil {
		return nil, nil, nil, err
	}
	va, err := data.NewImageFolder(filepath.Join(o.Data, "val"), data.ImageFolderOptions{})
	if err != nil {
		return nil, nil, nil, err
	}
	size := data.Resize{Height: o.ImageSize, Width: o.ImageSize}
	toFloat := func(b *data.Batch) {
		b.Fields[data.Input] = data.NormalizeImages(b.Get(data.Input), data.ImageNetMean, data.ImageNetStd)
	}
	train, err = data.NewLoader(tr, data.LoaderOptions{BatchSize: o.BatchSize, Shuffle: true, Workers: 2, Seed: 1,
		Transform: data.Compose(size, data.RandomHorizontalFlip{P: 0.5}), OnDevice: toFloat})
	if err != nil {
		return nil, nil, nil, err
	}
	val, err = data.NewLoader(va, data.LoaderOptions{BatchSize: o.BatchSize, Workers: 2, Transform: size, OnDevice: toFloat})
	return train, val, tr.Classes, err
}

// pretrained returns ResNet-18 for the classes with torchvision's weights in every layer
// but the classifier, which keeps its fresh initialisation.
func pretrained(weights string, classes int) (*models.ResNet, error) {
	model := models.ResNet18(int64(classes))
	if weights == "" {
		return model, nil
	}
	raw, err := checkpoint.Read(weights)
	if err != nil {
		return nil, err
	}
	var loadErr error
	torch.WithScope(func() {
		v, err := torch.FromCheckpoint(raw, torch.CPU)
		if err != nil {
			loadErr = err
			return
		}
		sd, ok := v.(*checkpoint.Dict)
		if !ok {
			loadErr = fmt.Errorf("%s: holds a %T, not a state dict", weights, v)
			return
		}
		// torchvision's fc has 1000 outputs: the model's own fc takes its place, so the
		// load stays strict about every other key.
		own := nn.StateDict(model)
		for _, k := range []string{"fc.weight", "fc.bias"} {
			t, _ := own.Get(k)
			sd.Set(k, t)
		}
		loadErr = nn.LoadStateDict(model, sd, true)
	})
	return model, loadErr
}

func run(o options) (*trainer.Trainer, error) {
	train, val, classes, err := loaders(o)
	if err != nil {
		return nil, err
	}
	torch.ManualSeed(1)
	model, err := pretrained(o.Weights, len(classes))
	if err != nil {
		return nil, err
	}
	opt, err := optim.NewAdamW(nn.Parameters(model), optim.AdamOptions{LR: 3e-4, WeightDecay: 1e-4})
	if err != nil {
		return nil, err
	}
	t, err := trainer.New(model, train, val, &nn.CrossEntropyLoss{}, opt, trainer.WithEpochs(o.Epochs),
		trainer.WithRunDir(o.RunDir), trainer.WithClassNames(classes), trainer.WithModelConfig("resnet18"))
	if err != nil {
		return nil, err
	}
	return t, t.Run(context.Background())
}

func main() {
	var o options
	flag.StringVar(&o.Data, "data", "", "ImageFolder tree with train/ and val/")
	flag.StringVar(&o.Weights, "weights", "", "torchvision resnet18 state dict (.pth); empty trains from scratch")
	flag.StringVar(&o.RunDir, "run-dir", "runs/finetune-example", "run directory")
	flag.IntVar(&o.Epochs, "epochs", 3, "epochs")
	flag.IntVar(&o.ImageSize, "image-size", 224, "image height and width")
	flag.IntVar(&o.BatchSize, "batch-size", 32, "batch size")
	flag.Parse()
	if _, err := run(o); err != nil {
		log.Fatal(err)
	}
}
