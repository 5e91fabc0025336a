package data_test

import (
	"context"
	"fmt"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
)

// A loader reads epochs in an order fixed by (seed, epoch); a resumed run starts an
// epoch at the batch it stopped at.
func Example() {
	ds, err := data.Synthetic(1000, 10, []int64{1, 28, 28}, 1)
	if err != nil {
		panic(err)
	}
	loader, err := data.NewLoader(ds, data.LoaderOptions{
		BatchSize: 64,
		Shuffle:   true,
		Workers:   4,
		Seed:      42,
		Transform: data.Compose(data.RandomCrop{Height: 28, Width: 28, Padding: 2}, data.RandomHorizontalFlip{P: 0.5}),
		Device:    torch.CPU,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("batches per epoch:", loader.Len())

	// Resume epoch 3 at batch 14, as after a checkpoint written there.
	it := loader.Iter(context.Background(), 3, 14)
	defer it.Close()
	for {
		scope := torch.NewScope() // the trainer opens one per step
		b, ok := it.Next()
		if ok {
			fmt.Println(b.Index, b.Get(data.Input).Shape(), b.Get(data.Label).Shape())
		}
		scope.Close()
		if !ok {
			break
		}
	}
	if err := it.Err(); err != nil {
		panic(err)
	}
	// Output:
	// batches per epoch: 16
	// 14 [64 1 28 28] [64]
	// 15 [40 1 28 28] [40]
}
