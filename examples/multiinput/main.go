// Multiinput trains a model with two inputs — a small image and a variable-length
// sequence of token ids — through a training step of its own. The loader pads the token
// field to the longest in each batch and adds its mask ("tokens_mask"); the step reads
// the batch's fields by name and returns the loss and an accuracy. The Trainer still
// does the rest: bf16 autocast, gradient accumulation, checkpoints, resume and, with a
// process group, data parallelism (main_test.go trains it on two ranks).
//
//	go run ./examples/multiinput
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"math/rand/v2"

	"github.com/gotrain/gotrain/amp"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/distributed"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// The fields of a sample.
const (
	Image  = "image"  // float32 [1, 8, 8]
	Tokens = "tokens" // int64 [length], 1 <= length <= 6, 0 is padding
)

const (
	classes = 4
	vocab   = 1 + 10*classes
	seed    = 3
)

// Pairs is a seeded data set of (image, tokens, label) samples. Both inputs carry some
// of the label: the image a bright row, the tokens a range of ids, each with noise.
type Pairs struct{ N int }

// Len returns N.
func (d Pairs) Len() int { return d.N }

// Get writes sample i: a function of i alone, so every rank and every run sees the same.
func (d Pairs) Get(i int, s *data.Sample) error {
	r := rand.New(rand.NewPCG(uint64(i), seed))
	label := int64(r.IntN(classes))
	img := data.SetValues[float32](s, Image, 1, 8, 8)
	for j := range img {
		img[j] = float32(r.NormFloat64())
		if j/8 == int(label)*2 {
			img[j] += 1.5
		}
	}
	toks := data.SetValues[int64](s, Tokens, int64(1+r.IntN(6)))
	for j := range toks {
		toks[j] = 1 + int64(r.IntN(10))
		if r.IntN(3) > 0 {
			toks[j] += 10 * label
		}
	}
	data.SetScalar(s, data.Label, label)
	return nil
}

// Net embeds the tokens (mean over the real ones), projects the image, and classifies
// the two together.
type Net struct {
	nn.Base
	Embed *nn.Embedding
	Image *nn.Linear
	Head  *nn.Linear
}

// NewNet builds the model.
func NewNet() *Net {
	n := &Net{}
	n.Embed = nn.Register(&n.Base, "embed", nn.NewEmbedding(vocab, 8, nn.PaddingIdx(0)))
	n.Image = nn.Register(&n.Base, "image", nn.NewLinear(64, 8))
	n.Head = nn.Register(&n.Base, "head", nn.NewLinear(16, classes))
	return n
}

// Forward maps images [B, 1, 8, 8], token ids [B, L] and their mask [B, L] to logits:
// the forward this model needs, which its step calls.
func (n *Net) Forward(image, tokens, mask *torch.Tensor) *torch.Tensor {
	e := n.Embed.Forward(tokens)               // [B, L, 8]
	m := mask.ToDType(e.DType()).Unsqueeze(-1) // [B, L, 1]
	text := e.Mul(m).SumDims([]int64{1}, false).Div(m.SumDims([]int64{1}, false))
	img := n.Image.Forward(image.Flatten(1, -1)).ReLU()
	return n.Head.Forward(torch.Cat([]*torch.Tensor{text.ToDType(img.DType()), img}, 1))
}

var ce = &nn.CrossEntropyLoss{}

// Step is the training and evaluation step: the batch's fields by name in, the loss and
// the accuracy out. It takes the model as a *Net, so it calls Net's own forward.
func Step(model *Net, b data.Batch) (*torch.Tensor, trainer.Metrics) {
	logits := model.Forward(b.Get(Image), b.Get(Tokens), b.Get(data.MaskName(Tokens)))
	labels := b.Get(data.Label)
	acc := logits.Argmax(1, false).Eq(labels).ToDType(torch.Float32).Mean()
	return ce.Forward(logits, labels), trainer.Metrics{"acc": acc}
}

// Build makes the trainer: 96 training samples in batches of 8 per rank, bf16 autocast,
// two micro-batches per optimizer step. pg is nil for one process.
func Build(pg *distributed.ProcessGroup, runDir string, epochs int, out io.Writer, callbacks ...trainer.Callback) (*trainer.Trainer, error) {
	pad := map[string]float64{Tokens: 0}
	train, err := data.NewLoader(Pairs{N: 96}, data.LoaderOptions{BatchSize: 8, Shuffle: true, Seed: seed, Pad: pad,
		Rank: pg.Rank(), WorldSize: pg.WorldSize()})
	if err != nil {
		return nil, err
	}
	val, err := data.NewLoader(&data.Subset{Dataset: Pairs{N: 128}, Indices: seq(96, 128)}, data.LoaderOptions{BatchSize: 16, Pad: pad})
	if err != nil {
		return nil, err
	}
	torch.ManualSeed(seed)
	model := NewNet()
	opt, err := optim.NewAdamW(nn.Parameters(model), optim.AdamOptions{LR: 1e-2, WeightDecay: 0.01})
	if err != nil {
		return nil, err
	}
	opts := []trainer.Option{trainer.WithTrainStep(Step), trainer.WithAMP(amp.BF16), trainer.WithAccumulation(2),
		trainer.WithEpochs(epochs), trainer.WithSeed(seed), trainer.WithDeterministic(true), trainer.WithDevice("cpu"),
		trainer.WithRunDir(runDir), trainer.WithOutput(out), trainer.WithCallbacks(callbacks...)}
	if pg != nil {
		opts = append(opts, trainer.WithDistributed(pg))
	}
	return trainer.New(model, train, val, nil, opt, opts...)
}

func seq(from, to int) []int {
	s := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

func run(epochs int, runDir string) error {
	t, err := Build(nil, runDir, epochs, io.Discard)
	if err != nil {
		return err
	}
	if err := t.Run(context.Background()); err != nil {
		return err
	}
	for _, r := range t.History {
		fmt.Printf("epoch %d: train_loss %.4f, val_loss %.4f, val_acc %.4f\n", r.Epoch, r.TrainLoss, r.ValLoss, r.ValAcc)
	}
	return nil
}

func main() {
	if err := run(8, "runs/multiinput-example"); err != nil {
		log.Fatal(err)
	}
}
