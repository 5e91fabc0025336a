// Ddp trains the small CNN with data-parallel training over torch.distributed: every
// rank holds the whole model, trains on its own share of each epoch (the loader's Rank
// and WorldSize) and averages gradients with the others after backward.
//
// Start it the torchrun way, or without a launcher as a single process:
//
//	go build -o ddp ./examples/ddp
//	torchrun --standalone --no-python --nproc-per-node 2 ./ddp -synthetic
//	./ddp -synthetic                  # one process
//
// Only rank 0 prints and writes runs/ddp. On CUDA, rank r trains on cuda:LOCAL_RANK.
package main

import (
	"context"
	"flag"
	"log"
	"time"

	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/distributed"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

func main() {
	synthetic := flag.Bool("synthetic", false, "use seeded synthetic data instead of Fashion-MNIST")
	epochs := flag.Int("epochs", 3, "epochs")
	timeout := flag.Duration("timeout", 5*time.Minute, "how long to wait for a lost or stuck rank")
	flag.Parse()
	if err := run(context.Background(), *synthetic, *epochs, *timeout, "runs/ddp"); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, synthetic bool, epochs int, timeout time.Duration, runDir string) error {
	// The environment torchrun sets (RANK, WORLD_SIZE, MASTER_ADDR, ...) says which
	// group to join; without it this is a single process and pg stays nil.
	var pg *distributed.ProcessGroup
	if distributed.Launched() {
		o, err := distributed.EnvOptions()
		if err != nil {
			return err
		}
		o.Timeout = timeout
		if pg, err = distributed.Init(o); err != nil {
			return err
		}
		defer pg.Close()
	}
	train, test, err := datasets(synthetic)
	if err != nil {
		return err
	}
	norm := data.Normalize{Mean: data.FashionMNISTMean, Std: data.FashionMNISTStd}
	// Batch size is per rank: the effective batch is 64 * WorldSize.
	trainLoader, err := data.NewLoader(train, data.LoaderOptions{BatchSize: 64, Shuffle: true, Workers: 2, Seed: 1,
		Transform: norm, Rank: pg.Rank(), WorldSize: pg.WorldSize()})
	if err != nil {
		return err
	}
	testLoader, err := data.NewLoader(test, data.LoaderOptions{BatchSize: 500, Workers: 2, Transform: norm,
		Rank: pg.Rank(), WorldSize: pg.WorldSize()})
	if err != nil {
		return err
	}
	model := models.SmallCNN(10)
	opt, err := optim.NewAdam(nn.Parameters(model), optim.AdamOptions{LR: 1e-3})
	if err != nil {
		return err
	}
	opts := []trainer.Option{trainer.WithEpochs(epochs), trainer.WithRunDir(runDir), trainer.WithSeed(1)}
	if pg != nil {
		opts = append(opts, trainer.WithDistributed(pg))
	}
	t, err := trainer.New(model, trainLoader, testLoader, &nn.CrossEntropyLoss{}, opt, opts...)
	if err != nil {
		return err
	}
	return t.Run(ctx)
}

func datasets(synthetic bool) (train, test data.Dataset, err error) {
	if !synthetic {
		if train, err = data.FashionMNIST("", true); err != nil {
			return nil, nil, err
		}
		test, err = data.FashionMNIST("", false)
		return train, test, err
	}
	all, err := data.Synthetic(1280, 10, []int64{1, 28, 28}, 1)
	if err != nil {
		return nil, nil, err
	}
	parts, err := data.RandomSplit(all, []int{1024, 256}, 1)
	if err != nil {
		return nil, nil, err
	}
	return parts[0], parts[1], nil
}
