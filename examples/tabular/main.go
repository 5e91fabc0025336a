// Tabular trains a classifier on a CSV file: the header names the columns, one column
// holds the class labels (names or integers), every other column is a numeric feature.
// String labels become the sorted class names, recorded in config.json and in every
// checkpoint. The features are standardized with the training rows' mean and standard
// deviation, as scikit-learn's StandardScaler would be fitted.
//
//	go run ./examples/tabular -data table.csv -label species
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand/v2"

	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// standardize returns a transform fitted on the training rows: each feature becomes
// (x - mean) / std, with the rows' mean and standard deviation.
func standardize(ds data.Dataset) (data.Transform, error) {
	var sum, sq []float64
	var s data.Sample
	for i := range ds.Len() {
		s.Reset()
		if err := ds.Get(i, &s); err != nil {
			return nil, err
		}
		x := data.Values[float32](s.MustField(data.Input))
		if sum == nil {
			sum, sq = make([]float64, len(x)), make([]float64, len(x))
		}
		for j, v := range x {
			sum[j] += float64(v)
			sq[j] += float64(v) * float64(v)
		}
	}
	n := float64(ds.Len())
	mean, std := make([]float32, len(sum)), make([]float32, len(sum))
	for j := range sum {
		m := sum[j] / n
		mean[j], std[j] = float32(m), float32(max(math.Sqrt(max(sq[j]/n-m*m, 0)), 1e-6))
	}
	return data.TransformFunc(func(s *data.Sample, _ *rand.Rand) error {
		x := data.Values[float32](s.MustField(data.Input))
		for j := range x {
			x[j] = (x[j] - mean[j]) / std[j]
		}
		return nil
	}), nil
}

func run(path, label string, epochs int, runDir string) (*trainer.Trainer, error) {
	table, err := data.ReadCSV(path, data.CSVOptions{Label: label})
	if err != nil {
		return nil, err
	}
	classes := table.Classes
	if classes == nil {
		return nil, fmt.Errorf("%s: column %q holds integers; this example expects class names", path, label)
	}
	held := table.Len() / 5
	parts, err := data.RandomSplit(table, []int{table.Len() - held, held}, 1)
	if err != nil {
		return nil, err
	}
	tf, err := standardize(parts[0])
	if err != nil {
		return nil, err
	}
	train, err := data.NewLoader(parts[0], data.LoaderOptions{BatchSize: 16, Shuffle: true, Seed: 1, Transform: tf})
	if err != nil {
		return nil, err
	}
	val, err := data.NewLoader(parts[1], data.LoaderOptions{BatchSize: 64, Transform: tf})
	if err != nil {
		return nil, err
	}
	model := models.MLP(int64(len(table.Features)), 64, int64(len(classes)))
	opt, err := optim.NewAdam(nn.Parameters(model), optim.AdamOptions{LR: 3e-3})
	if err != nil {
		return nil, err
	}
	t, err := trainer.New(model, train, val, &nn.CrossEntropyLoss{}, opt, trainer.WithEpochs(epochs),
		trainer.WithRunDir(runDir), trainer.WithClassNames(classes), trainer.WithSeed(1))
	if err != nil {
		return nil, err
	}
	return t, t.Run(context.Background())
}

func main() {
	path := flag.String("data", "", "CSV file with a header line")
	label := flag.String("label", "label", "the column of class names")
	epochs := flag.Int("epochs", 20, "epochs")
	flag.Parse()
	t, err := run(*path, *label, *epochs, "runs/tabular-example")
	if err != nil {
		log.Fatal(err)
	}
	r := t.History[len(t.History)-1]
	fmt.Printf("classes %v: val_acc %.4f\n", t.Config().ClassNames, r.ValAcc)
}
