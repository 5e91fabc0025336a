package trainer_test

import (
	"context"
	"io"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/distributed"
	"github.com/gotrain/gotrain/torch/distributed/disttest"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// The token-weighted loss (trainer.NumItems) is tested on a per-token classifier: 12
// sequences of 6 tokens, each token 4 features and a class out of 5, with a different
// number of masked (-100) labels in every sequence, so that micro-batches hold
// different numbers of label tokens.
const (
	itemSeqs, itemLen, itemFeat, itemClasses = 12, 6, 4, 5
	itemBatch, itemK                         = 2, 3
)

// itemData is the sequences and their labels (as float32 targets), masked from the end:
// sequence i keeps 1 + i%itemLen labels.
func itemData() (*data.TensorDataset, error) {
	var x []float32
	torch.WithScope(func() {
		torch.ManualSeed(11)
		x = torch.Randn([]int64{itemSeqs, itemLen, itemFeat}, torch.Float32, torch.CPU).Float32s()
	})
	y := make([]float32, itemSeqs*itemLen)
	for i := range itemSeqs {
		for j := range itemLen {
			y[i*itemLen+j] = float32((i*7 + j*3) % itemClasses)
			if j > i%itemLen {
				y[i*itemLen+j] = -100
			}
		}
	}
	return data.NewTensorDataset(x, []int64{itemLen, itemFeat}, nil, y, []int64{itemLen})
}

// tokenSumStep is a language model's kind of step: the sum of the label tokens' losses,
// and their number under trainer.NumItems.
func tokenSumStep(m nn.Layer, b data.Batch) (*torch.Tensor, trainer.Metrics) {
	logits := m.Forward(b.Get(data.Input))
	labels := b.Get(data.Target).ToDType(torch.Int64).Reshape(-1)
	sum := torch.CrossEntropy(logits.Reshape(-1, itemClasses), labels, torch.CrossEntropyOptions{Reduction: torch.ReductionSum})
	return sum, trainer.Metrics{trainer.NumItems: labels.NeScalar(-100).Sum()}
}

// itemStep is an optimizer step as a BeforeOptimizerStep callback sees it: the weights
// and the gradients about to be applied to them, flattened in parameter order.
type itemStep struct{ Weights, Grads []float32 }

// itemTrainer trains the classifier for one epoch, one rank of pg's when pg is set,
// and returns its optimizer steps.
func itemTrainer(pg *distributed.ProcessGroup) (*trainer.Trainer, []itemStep, error) {
	ds, err := itemData()
	if err != nil {
		return nil, nil, err
	}
	lo := data.LoaderOptions{BatchSize: itemBatch}
	if pg != nil {
		lo.Rank, lo.WorldSize = pg.Rank(), pg.WorldSize()
	}
	tr, err := data.NewLoader(ds, lo)
	if err != nil {
		return nil, nil, err
	}
	va, err := data.NewLoader(ds, data.LoaderOptions{BatchSize: 5})
	if err != nil {
		return nil, nil, err
	}
	torch.ManualSeed(seed)
	m := nn.NewLinear(itemFeat, itemClasses)
	opt, err := optim.NewSGD(nn.Parameters(m), optim.SGDOptions{LR: 0.5})
	if err != nil {
		return nil, nil, err
	}
	var steps []itemStep
	record := trainer.On(func(_ trainer.Event, t *trainer.Trainer) error {
		var s itemStep
		torch.WithScope(func() {
			for _, p := range nn.Parameters(t.Model) {
				s.Weights = append(s.Weights, p.Float32s()...)
				s.Grads = append(s.Grads, p.Grad().Float32s()...)
			}
		})
		steps = append(steps, s)
		return nil
	}, trainer.BeforeOptimizerStep)
	opts := []trainer.Option{trainer.WithDevice("cpu"), trainer.WithOutput(io.Discard), trainer.WithEpochs(1),
		trainer.WithSeed(seed), trainer.WithAccumulation(itemK), trainer.WithTrainStep(tokenSumStep),
		trainer.WithMonitor("val_loss", trainer.Min), trainer.WithCallbacks(record)}
	if pg != nil {
		opts = append(opts, trainer.WithDistributed(pg))
	}
	tt, err := trainer.New(m, tr, va, nil, opt, opts...)
	if err != nil {
		return nil, nil, err
	}
	return tt, steps, tt.Run(context.Background())
}

// oneBatchGrads returns the gradients at weights of the mean loss over every label
// token of sequences [from, to) in one batch.
func oneBatchGrads(t *testing.T, weights []float32, from, to int) []float32 {
	ds, err := itemData()
	require.NoError(t, err)
	m := nn.NewLinear(itemFeat, itemClasses)
	var g []float32
	torch.WithScope(func() {
		w := torch.FromSlice(weights)
		off := int64(0)
		torch.NoGrad(func() {
			for _, p := range nn.Parameters(m) {
				p.CopyFrom(w.Narrow(0, off, p.Numel()).Reshape(p.Shape()...), false)
				off += p.Numel()
			}
		})
		n := int64(to - from)
		x := torch.FromSlice(ds.Inputs).Reshape(itemSeqs, itemLen, itemFeat).Narrow(0, int64(from), n)
		y := torch.FromSlice(ds.Targets).Reshape(itemSeqs, itemLen).Narrow(0, int64(from), n).ToDType(torch.Int64).Reshape(-1)
		torch.CrossEntropy(m.Forward(x).Reshape(-1, itemClasses), y, torch.CrossEntropyOptions{}).Backward()
		for _, p := range nn.Parameters(m) {
			g = append(g, p.Grad().Float32s()...)
		}
	})
	return g
}

// TestTokenWeightedAccumulation: with k micro-batches holding different numbers of label
// tokens, the gradient of a step is that of one batch of all their tokens (not the mean
// of the micro-batches' means), and the validation loss is the mean over every label
// token of the validation set.
func TestTokenWeightedAccumulation(t *testing.T) {
	tt, steps, err := itemTrainer(nil)
	require.NoError(t, err)
	window := itemBatch * itemK
	require.Len(t, steps, itemSeqs/window)
	for s, st := range steps {
		want := oneBatchGrads(t, st.Weights, s*window, (s+1)*window)
		require.Len(t, st.Grads, len(want))
		for i := range want {
			require.InDelta(t, want[i], st.Grads[i], 1e-6, "step %d gradient %d", s+1, i)
		}
	}
	// The validation loss over the final weights: the sum of every token's loss over the
	// number of label tokens, though the batches of 5 hold different numbers of them.
	ds, err := itemData()
	require.NoError(t, err)
	var want float64
	torch.WithScope(func() {
		x := torch.FromSlice(ds.Inputs).Reshape(itemSeqs, itemLen, itemFeat)
		y := torch.FromSlice(ds.Targets).ToDType(torch.Int64)
		torch.NoGrad(func() {
			want = torch.CrossEntropy(tt.Model.(nn.Layer).Forward(x).Reshape(-1, itemClasses), y, torch.CrossEntropyOptions{}).Item()
		})
	})
	assert.InDelta(t, want, tt.History[0].ValLoss, 1e-6)
	assert.False(t, math.IsNaN(tt.History[0].TrainLoss))
}

// TestTokenWeightedAccumulationOnTwoRanks: two Gloo ranks, each with k micro-batches,
// give every step the gradient of one batch of all the tokens of both ranks' windows.
func TestTokenWeightedAccumulationOnTwoRanks(t *testing.T) {
	_, ranks := spawnRanks[[]itemStep](t, "items", "items", 2)
	// The ranks' windows together are sequences [0, 12): rank r reads r, r+2, ...
	require.Len(t, ranks[0], 1)
	want := oneBatchGrads(t, ranks[0][0].Weights, 0, itemSeqs)
	for r := range ranks {
		for i := range want {
			require.InDelta(t, want[i], ranks[r][0].Grads[i], 1e-6, "rank %d gradient %d", r, i)
		}
	}
}

func itemsChild() error {
	pg, err := disttest.Join(10 * time.Second)
	if err != nil {
		return err
	}
	defer pg.Close()
	_, grads, err := itemTrainer(pg)
	if err != nil {
		return err
	}
	return writeRankResult(pg, "items", grads)
}
