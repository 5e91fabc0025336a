package models_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
)

// TestGenerateRefusesNaNLogits: a model whose logits are NaN (a NaN weight) is an error
// naming them, not a sequence of the first token's id.
func TestGenerateRefusesNaNLogits(t *testing.T) {
	defer torch.NewScope().Close()
	m, _ := savedTinyLlama(t, 1)
	for _, p := range nn.NamedParameters(m) {
		if p.Name == "model.layers.1.mlp.down_proj.weight" {
			torch.NoGrad(func() { p.Tensor.Fill(math.NaN()) })
		}
	}
	for _, sample := range []bool{false, true} {
		seed := int64(1)
		_, err := models.Generate(m, [][]int64{{3, 4, 5}}, models.GenerateOptions{MaxNewTokens: 4, Sample: sample, Temperature: 1, Seed: &seed})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "logits are NaN at new token 1")
	}
}

// TestGeneratePromptLogitsLastOnly is issue 42's long prompt: the prompt's forward
// computes the logits of its last position only. A prompt of the whole context (1000
// tokens, a 32000-token vocabulary) would need 128 MB of logits; the peak of the CPU
// tensors Generate allocates stays under a quarter of that (the attention of the
// prompt, [heads, T, T], and the activations are what remain), and the tokens are the
// full forward's.
func TestGeneratePromptLogitsLastOnly(t *testing.T) {
	defer torch.NewScope().Close()
	torch.CountCPUMemory()
	c := models.DefaultLlamaConfig()
	c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 32000, 16, 32, 1
	c.NumAttentionHeads, c.NumKeyValueHeads, c.MaxPositionEmbeddings = 2, 2, 1024
	c.BOSTokenID, c.EOSTokenID = nil, nil
	torch.ManualSeed(3)
	m, err := models.NewLlamaForCausalLM(c)
	require.NoError(t, err)
	defer nn.Free(m)
	nn.SetTraining(m, false)
	prompt := make([]int64, 1000)
	for i := range prompt {
		prompt[i] = int64(i*7919) % c.VocabSize
	}
	const fullLogits = 1000 * 32000 * 4
	torch.ResetCPUPeakMemory()
	base := torch.CPUMemoryStats().Allocated
	got, err := models.Generate(m, [][]int64{prompt}, models.GenerateOptions{MaxNewTokens: 2})
	require.NoError(t, err)
	peak := torch.CPUMemoryStats().PeakAllocated - base
	t.Logf("peak %d bytes during a %d-token prompt (full logits: %d)", peak, len(prompt), fullLogits)
	assert.Less(t, peak, int64(fullLogits/4))

	// The same first token as the full forward's last row.
	var want int64
	torch.NoGrad(func() {
		ids := torch.FromSlice(prompt).Unsqueeze(0)
		logits := m.Forward(models.DecoderInput{InputIDs: ids})
		want = logits.Select(1, int64(len(prompt))-1).Argmax(-1, false).Int64s()[0]
	})
	assert.Equal(t, want, got[0][0])
}
