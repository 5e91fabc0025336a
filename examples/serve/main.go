// Serve shows gotrain inside a Go service: a model is trained (or its weights loaded from
// a checkpoint), then several goroutines classify the test set at the same time, each
// with scopes of its own, and the tensors they made are all freed when they finish.
//
//	go run ./examples/serve -synthetic
//	go run ./examples/serve -checkpoint runs/ID/checkpoints/best_model.pth
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"sync"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/examples/internal/exdata"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

func main() {
	synthetic := flag.Bool("synthetic", false, "use seeded synthetic data instead of Fashion-MNIST")
	limit := flag.Int("limit", 4096, "use only the first N samples of each split")
	ckpt := flag.String("checkpoint", "", "a SmallCNN checkpoint of cmd/train (default: train one epoch first)")
	workers := flag.Int("goroutines", 4, "goroutines classifying at once")
	flag.Parse()
	res, err := run(*synthetic, *limit, *ckpt, *workers)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d goroutines classified %d samples: accuracy %.4f (the trainer's validation: %.4f)\n",
		*workers, res.samples, res.accuracy, res.valAcc)
}

type result struct {
	samples            int
	accuracy, valAcc   float64
	liveBefore, liveAt int64
}

func run(synthetic bool, limit int, ckpt string, goroutines int) (*result, error) {
	train, test, err := exdata.Loaders(synthetic, limit)
	if err != nil {
		return nil, err
	}
	torch.ManualSeed(3)
	model := models.SmallCNN(10)
	res := &result{valAcc: -1}
	if ckpt != "" {
		v, err := checkpoint.Read(ckpt)
		if err != nil {
			return nil, err
		}
		sd, err := checkpoint.GetDict(v, "model_state_dict")
		if err != nil {
			return nil, err
		}
		if err := nn.LoadStateDict(model, sd, true); err != nil {
			return nil, err
		}
	} else {
		opt, err := optim.NewAdam(nn.Parameters(model), optim.AdamOptions{LR: 1e-3, Fused: true})
		if err != nil {
			return nil, err
		}
		t, err := trainer.New(model, train, test, &nn.CrossEntropyLoss{}, opt, trainer.WithEpochs(1))
		if err != nil {
			return nil, err
		}
		if err := t.Run(context.Background()); err != nil {
			return nil, err
		}
		res.valAcc = t.History[len(t.History)-1].ValAcc
	}
	nn.SetTraining(model, false) // inference: forward passes only read the model

	// Each goroutine classifies its own shard of the test set through its own loader.
	ds := test.Dataset()
	res.liveBefore = torch.LiveTensors()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		correct float64
		errs    []error
	)
	for g := range goroutines {
		var idx []int
		for i := g; i < ds.Len(); i += goroutines {
			idx = append(idx, i)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, n, err := classify(model, &data.Subset{Dataset: ds, Indices: idx})
			mu.Lock()
			defer mu.Unlock()
			correct += c
			res.samples += n
			if err != nil {
				errs = append(errs, fmt.Errorf("goroutine %d: %w", g, err))
			}
		}()
	}
	wg.Wait()
	res.liveAt = torch.LiveTensors()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	res.accuracy = correct / float64(res.samples)
	return res, nil
}

// classify counts the correct predictions on a shard. Every batch's tensors live in a
// scope of this goroutine, so other goroutines' scopes never touch them.
func classify(model nn.Layer, shard data.Dataset) (correct float64, n int, err error) {
	defer torch.Recover(&err, "classify")
	l, err := data.NewLoader(shard, data.LoaderOptions{BatchSize: 250, Inline: true,
		Transform: data.Normalize{Mean: data.FashionMNISTMean, Std: data.FashionMNISTStd}})
	if err != nil {
		return 0, 0, err
	}
	it := l.Iter(context.Background(), 0, 0)
	defer it.Close()
	for more := true; more; {
		torch.WithScope(func() {
			b, ok := it.Next()
			if !ok {
				more = false
				return
			}
			torch.NoGrad(func() {
				correct += model.Forward(b.Get(data.Input)).Argmax(1, false).Eq(b.Get(data.Label)).Sum().Item()
			})
			n += b.Size
		})
	}
	return correct, n, it.Err()
}
