package models_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
)

// Documents packed into rows, with positions restarting at each and the first label of
// each IgnoreIndex (data.LMOptions.SeparateDocuments), give each document the logits and
// the loss it has alone: Llama, Qwen2 with a sliding window shorter than a document, and
// GPT-2; with and without an all-ones attention mask, as padded batches carry.
func TestPackedDocumentsRunAsOneByOne(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer torch.NewScope().Close()
	torch.ManualSeed(4)
	const vocab = 53
	lc := models.DefaultLlamaConfig()
	lc.VocabSize, lc.HiddenSize, lc.IntermediateSize, lc.NumHiddenLayers = vocab, 16, 24, 2
	lc.NumAttentionHeads, lc.NumKeyValueHeads, lc.MaxPositionEmbeddings = 2, 1, 32
	qc := models.DefaultQwen2Config()
	qc.VocabSize, qc.HiddenSize, qc.IntermediateSize, qc.NumHiddenLayers = vocab, 16, 24, 2
	qc.NumAttentionHeads, qc.NumKeyValueHeads, qc.MaxPositionEmbeddings = 2, 1, 32
	window := int64(3)
	qc.UseSlidingWindow, qc.SlidingWindow, qc.MaxWindowLayers = true, &window, 1
	gc := models.DefaultGPT2Config()
	gc.VocabSize, gc.NPositions, gc.NEmbd, gc.NLayer, gc.NHead = vocab, 32, 16, 2, 2
	gc.BOSTokenID, gc.EOSTokenID = nil, nil

	// Two rows of 14 tokens: documents of 5, 3 and 6 tokens, and of 7 and 7.
	rows := [][]int64{{5, 3, 6}, {7, 7}}
	const width = 14
	var docs [][]int64
	var ids, labels, pos []int64
	for _, r := range rows {
		for _, n := range r {
			d := torch.Randint(0, vocab, []int64{n}, torch.Int64, torch.CPU).Int64s()
			docs = append(docs, d)
			for j, id := range d {
				ids, pos = append(ids, id), append(pos, int64(j))
				if j == 0 {
					id = models.IgnoreIndex
				}
				labels = append(labels, id)
			}
		}
	}
	packedIDs, packedLabels := torch.FromSlice(ids, 2, width), torch.FromSlice(labels, 2, width)
	positions := torch.FromSlice(pos, 2, width)

	for name, build := range map[string]func() (models.CausalLM, error){
		"llama":         func() (models.CausalLM, error) { return models.NewLlamaForCausalLM(lc) },
		"qwen2 sliding": func() (models.CausalLM, error) { return models.NewQwen2ForCausalLM(qc) },
		"gpt2":          func() (models.CausalLM, error) { return models.NewGPT2LMHeadModel(gc) },
	} {
		m, err := build()
		require.NoError(t, err, name)
		defer nn.Free(m)
		nn.SetTraining(m, false) // no dropout
		var wantSum float64
		var wantCount int64
		var wantLogits []float64
		for _, d := range docs {
			x := torch.FromSlice(d, 1, int64(len(d)))
			sum, count := models.LMLossSum(m, models.DecoderInput{InputIDs: x}, x, models.LossFull)
			wantSum += sum.Item()
			wantCount += int64(count.Item())
			wantLogits = append(wantLogits, m.Forward(models.DecoderInput{InputIDs: x}).Float64s()...)
		}
		for _, mask := range []*torch.Tensor{nil, torch.Ones([]int64{2, width}, torch.Int64, torch.CPU)} {
			in := models.DecoderInput{InputIDs: packedIDs, PositionIDs: positions, AttentionMask: mask}
			sum, count := models.LMLossSum(m, in, packedLabels, models.LossFull)
			require.InDelta(t, wantSum, sum.Item(), 1e-5, "%s (mask %v)", name, mask != nil)
			require.Equal(t, wantCount, int64(count.Item()), name)
			require.InDeltaSlice(t, wantLogits, m.Forward(in).Float64s(), 1e-5, "%s (mask %v)", name, mask != nil)
		}
	}
}
