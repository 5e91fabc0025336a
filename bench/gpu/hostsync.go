package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"

	"github.com/gotrain/gotrain/amp"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// hostSyncResult is what `gpu hostsync` prints: the reads of tensor values back to Go
// (torch.HostReads, each a device→host copy and so a synchronisation on CUDA) made
// while the Trainer ran optimizer steps, split into the batches that ended at a logging
// point and the ones between.
type hostSyncResult struct {
	Model     string `json:"model"`
	Precision string `json:"precision"`
	Device    string `json:"device"`
	Batches   int    `json:"batches"`
	LogEvery  int    `json:"log_every"`
	// BetweenSteps counts the optimizer steps whose interval (from the previous
	// batch's end to this one's: the previous optimizer step and this batch's forward
	// and backward) had no logging point, and BetweenReads the reads they made.
	BetweenSteps int   `json:"between_steps"`
	BetweenReads int64 `json:"between_reads"`
	LogPoints    int   `json:"log_points"`
	LogReads     int64 `json:"log_reads"`
	Pass         bool  `json:"pass"`
}

// randomSamples is a dataset of n random samples, each drawn in Go by fill from a
// generator seeded with its index, so that Get never calls libtorch.
type randomSamples struct {
	n    int
	fill func(r *rand.Rand, s *data.Sample)
}

func (d randomSamples) Len() int { return d.n }

func (d randomSamples) Get(i int, s *data.Sample) error {
	d.fill(rand.New(rand.NewPCG(uint64(i), 1)), s)
	return nil
}

func runHostSync(o options) (any, bool, error) {
	const logPoints = 2
	logEvery := o.steps
	res := &hostSyncResult{Model: o.model, Precision: o.precision, Device: o.device.String(), LogEvery: logEvery, Batches: logEvery * logPoints}
	mode := amp.Off
	if o.precision == "bf16" {
		mode = amp.BF16
	}
	torch.ManualSeed(0)
	var (
		model nn.Module
		ds    data.Dataset
		batch int64
		opts  []trainer.Option
	)
	switch o.model {
	case "gpt":
		c, b, seq := gptSetup(o.size())
		g, err := models.NewGPT2LMHeadModel(c)
		if err != nil {
			return nil, false, err
		}
		// Token windows: field input_ids.
		model, batch = g, b
		ds = randomSamples{n: res.Batches * int(b), fill: func(r *rand.Rand, s *data.Sample) {
			for j, ids := 0, data.SetValues[int64](s, data.LMInputIDs, seq); j < len(ids); j++ {
				ids[j] = r.Int64N(c.VocabSize)
			}
		}}
		// The language-modelling step: no metrics, only the loss the Trainer sums.
		opts = append(opts, trainer.WithTrainStep(func(m nn.Module, b data.Batch) (*torch.Tensor, trainer.Metrics) {
			ids := b.Get(data.LMInputIDs)
			return models.LMLoss(g, models.DecoderInput{InputIDs: ids}, ids, models.LossFull), nil
		}))
	case "vit":
		c, b := vitSetup(o.size())
		// Images and labels: fields input and label, for the default classification step.
		v, err := models.NewVisionTransformer(c)
		if err != nil {
			return nil, false, err
		}
		model, batch = v, b
		ds = randomSamples{n: res.Batches * int(b), fill: func(r *rand.Rand, s *data.Sample) {
			for j, x := 0, data.SetValues[float32](s, data.Input, 3, c.ImageSize, c.ImageSize); j < len(x); j++ {
				x[j] = float32(r.NormFloat64())
			}
			data.SetScalar(s, data.Label, r.Int64N(c.NumClasses))
		}}
	default:
		return nil, false, fmt.Errorf("-model %q is not gpt or vit", o.model)
	}
	defer nn.Free(model)
	loader, err := data.NewLoader(ds, data.LoaderOptions{BatchSize: int(batch), Inline: true, Device: o.device})
	if err != nil {
		return nil, false, err
	}
	opt, err := optim.NewAdamW(nn.Parameters(model), optim.AdamOptions{LR: 1e-4, WeightDecay: 0.01, Fused: true})
	if err != nil {
		return nil, false, err
	}
	// The default classification step's loss, for the ViT.
	ce := &nn.CrossEntropyLoss{}
	opts = append(opts, trainer.WithOutput(io.Discard), trainer.WithDevice(o.device.String()), trainer.WithAMP(mode),
		trainer.WithEpochs(1), trainer.WithLogEvery(logEvery), trainer.WithCallbacks(countReads(res)))
	tr, err := trainer.New(model, loader, nil, ce, opt, opts...)
	if err != nil {
		return nil, false, err
	}
	if err := tr.Run(context.Background()); err != nil {
		return nil, false, err
	}
	res.Pass = res.BetweenSteps > 0 && res.BetweenReads == 0
	return res, res.Pass, nil
}

// countReads returns the callback that splits torch.HostReads among res's logging points
// and the optimizer steps between them, one interval per batch end.
func countReads(res *hostSyncResult) trainer.Callback {
	last := int64(-1)
	return trainer.CallbackFunc(func(e trainer.Event, t *trainer.Trainer) error {
		if e != trainer.BatchEnd {
			return nil
		}
		now := torch.HostReads()
		// The first batch's interval holds the Trainer's start-up; it is not a step.
		if last >= 0 {
			if t.LogPoint {
				res.LogPoints++
				res.LogReads += now - last
			} else {
				res.BetweenSteps++
				res.BetweenReads += now - last
			}
		}
		last = now
		return nil
	})
}
