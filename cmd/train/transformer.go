package main

// The transformer models of cmd/train (--model gpt, --model vit): their construction,
// the language-model step, and the callback that records perplexity and prints a
// generated sample after each epoch. build.go wires them in.

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/trainer"

	"github.com/gotrain/gotrain/internal/fsutil"
)

// gptVocab is the byte-level vocabulary: a token is one byte of the text.
const gptVocab = 256

// gptConfig is cmd/train's GPT: byte-level, 4 layers of width 128 with 4 heads, a
// context of blockSize tokens, dropout 0.1 (GPT-2's). Small enough to learn a corpus on
// two CPU cores in minutes.
func gptConfig(blockSize int) models.GPT2Config {
	c := models.DefaultGPT2Config()
	c.VocabSize, c.NPositions, c.NEmbd, c.NLayer, c.NHead = gptVocab, int64(blockSize), 128, 4, 4
	c.BOSTokenID, c.EOSTokenID = nil, nil
	return c
}

// vitModel is cmd/train's ViT for images of the given [C, H, W] shape: patches of 7
// pixels for 28×28 images (16 tokens), else of 4; 4 layers of width 64 with 4 heads.
func vitModel(shape []int64, classes int64) (*models.VisionTransformer, error) {
	if len(shape) != 3 || shape[1] != shape[2] {
		return nil, fmt.Errorf("--model vit takes square images, the data's samples have shape %v", shape)
	}
	patch := int64(4)
	if shape[1]%7 == 0 {
		patch = 7
	}
	m, err := models.NewVisionTransformer(models.ViTConfig{ImageSize: shape[1], PatchSize: patch, NumLayers: 4, NumHeads: 4,
		HiddenDim: 64, MLPDim: 128, NumClasses: classes, InChannels: shape[0]})
	if err != nil {
		return nil, fmt.Errorf("--model vit: %w", err)
	}
	return m, nil
}

// lmStep is the language-model step: the next-token cross-entropy of the model's logits
// for the batch's input_ids (against its labels when it has them, as transformers'
// labels=). Models that are not language models are a misuse.
func lmStep(model models.CausalLM, b data.Batch) (*torch.Tensor, trainer.Metrics) {
	ids := b.Get(data.LMInputIDs)
	labels := ids
	if b.Has(data.LMLabels) {
		labels = b.Get(data.LMLabels)
	}
	return models.CausalLMLoss(model.Forward(models.DecoderInput{InputIDs: ids}), labels), nil
}

// byteText is a byte-level language-modelling data set: the text cut into consecutive
// windows of seq bytes, each a sample with an int64 input_ids field [seq].
type byteText struct {
	text []byte
	seq  int
}

// Len returns the number of whole windows.
func (d *byteText) Len() int { return len(d.text) / d.seq }

// Get writes window i.
func (d *byteText) Get(i int, s *data.Sample) error {
	ids := data.SetValues[int64](s, data.LMInputIDs, int64(d.seq))
	for j, c := range d.text[i*d.seq : (i+1)*d.seq] {
		ids[j] = int64(c)
	}
	return nil
}

// maxByteText bounds a byte-level text corpus, which is read whole into memory.
const maxByteText = 4 << 30

// readByteText reads a text corpus and splits it into training and validation windows
// of seq bytes, the last valFrac of the text (10% when 0) for validation.
func readByteText(path string, seq int, valFrac float64) (train, val data.Dataset, err error) {
	text, err := fsutil.ReadFile(path, maxByteText)
	if err != nil {
		return nil, nil, fmt.Errorf("--data: %w", err)
	}
	if valFrac <= 0 || valFrac >= 1 {
		valFrac = 0.1
	}
	cut := len(text) - int(float64(len(text))*valFrac)
	tr, va := &byteText{text[:cut], seq}, &byteText{text[cut:], seq}
	if tr.Len() == 0 || va.Len() == 0 {
		return nil, nil, fmt.Errorf("--data %s: %d bytes make no training or validation window of %d", path, len(text), seq)
	}
	return tr, va, nil
}

// perplexityRecord returns the record of the evaluation that e announces, completed
// with the validation perplexity (exp of the mean validation loss per token) as metric
// "val_perplexity"; nil when e is not Evaluated or nothing is recorded.
func perplexityRecord(e trainer.Event, t *trainer.Trainer) *trainer.Record {
	if e != trainer.Evaluated || len(t.History) == 0 {
		return nil
	}
	rec := &t.History[len(t.History)-1]
	if rec.Metrics == nil {
		rec.Metrics = map[string]float64{}
	}
	rec.Metrics["val_perplexity"] = math.Exp(rec.ValLoss)
	return rec
}

// lmCallback completes each epoch's record of a language model with the validation
// perplexity (exp of the mean validation loss) as metric "val_perplexity", and prints a
// greedy continuation of Prompt. Greedy decoding draws no random numbers, so the sample
// leaves a resumed run's generator where an uninterrupted one has it.
type lmCallback struct {
	model  *models.GPT2LMHeadModel
	prompt string
	tokens int
	out    io.Writer
}

// Events says that it acts only at evaluations (so a step may run in one call or as a
// CUDA graph).
func (c *lmCallback) Events() trainer.EventSet { return trainer.Events(trainer.Evaluated) }

// OnEvent acts at each evaluation.
func (c *lmCallback) OnEvent(e trainer.Event, t *trainer.Trainer) error {
	rec := perplexityRecord(e, t)
	if rec == nil {
		return nil
	}
	training := c.model.Training()
	nn.SetTraining(c.model, false)
	defer nn.SetTraining(c.model, training)
	ids := make([]int64, len(c.prompt))
	for i := range c.prompt {
		ids[i] = int64(c.prompt[i])
	}
	n := min(c.tokens, int(c.model.Config.NPositions)-len(ids))
	gens, err := models.Generate(c.model, [][]int64{ids}, models.GenerateOptions{MaxNewTokens: n, IgnoreEOS: true})
	if err != nil {
		return err
	}
	gen := gens[0]
	sample := make([]byte, len(gen))
	for i, v := range gen {
		sample[i] = byte(v)
	}
	fmt.Fprintf(c.out, "epoch %d: val perplexity %.2f; sample: %q\n", rec.Epoch, rec.Metrics["val_perplexity"],
		c.prompt+strings.ToValidUTF8(string(sample), "?"))
	return nil
}

// tokenStep is the step of a token file's windows: their labels are already the next
// tokens (nanoGPT's (x, y)), so the cross-entropy compares position by position.
func tokenStep(model models.CausalLM, b data.Batch) (*torch.Tensor, trainer.Metrics) {
	logits := model.Forward(models.DecoderInput{InputIDs: b.Get(data.LMInputIDs)})
	v := logits.Size(-1)
	return torch.CrossEntropy(logits.Reshape(-1, v), b.Get(data.LMLabels).Reshape(-1), torch.CrossEntropyOptions{}), nil
}
