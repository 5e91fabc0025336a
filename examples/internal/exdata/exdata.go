// Package exdata builds the examples' data loaders: Fashion-MNIST from Debian's
// dataset-fashion-mnist, or seeded synthetic images of the same shape for machines
// without it (and for the examples' tests).
package exdata

import "github.com/gotrain/gotrain/torch/data"

// Loaders returns shuffled training and sequential test loaders with batch size 128;
// limit > 0 keeps only the first limit samples of each.
func Loaders(synthetic bool, limit int) (train, test *data.Loader, err error) {
	var tr, te data.Dataset
	if synthetic {
		var all *data.SyntheticDataset
		var parts []*data.Subset
		if all, err = data.Synthetic(2560, 10, []int64{1, 28, 28}, 1); err == nil {
			if parts, err = data.RandomSplit(all, []int{2048, 512}, 1); err == nil {
				tr, te = parts[0], parts[1]
			}
		}
	} else if tr, err = data.FashionMNIST("", true); err == nil {
		te, err = data.FashionMNIST("", false)
	}
	if err != nil {
		return nil, nil, err
	}
	if limit > 0 {
		tr, te = data.Head(tr, limit), data.Head(te, limit)
	}
	norm := data.Normalize{Mean: data.FashionMNISTMean, Std: data.FashionMNISTStd}
	if train, err = data.NewLoader(tr, data.LoaderOptions{BatchSize: 128, Shuffle: true, Workers: 2, Seed: 1, Transform: norm}); err != nil {
		return nil, nil, err
	}
	test, err = data.NewLoader(te, data.LoaderOptions{BatchSize: 1000, Workers: 2, Transform: norm})
	return train, test, err
}
