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

// TestGradientCheckpointingKeepsGradients: with each decoder layer's activations
// recomputed in backward, a training step's loss and gradients are those of the plain
// step, to the bit — with dropout too, whose draws are replayed.
func TestGradientCheckpointingKeepsGradients(t *testing.T) {
	llama := func() models.CausalLM {
		c := models.DefaultLlamaConfig()
		c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 40, 32, 64, 2
		c.NumAttentionHeads, c.NumKeyValueHeads, c.MaxPositionEmbeddings = 4, 2, 32
		m, err := models.NewLlamaForCausalLM(c)
		require.NoError(t, err)
		return m
	}
	gpt2 := func() models.CausalLM {
		c := tinyGPT2Config()
		c.ResidPdrop, c.EmbdPdrop, c.AttnPdrop = 0.1, 0.1, 0.1
		m, err := models.NewGPT2LMHeadModel(c)
		require.NoError(t, err)
		return m
	}
	for name, build := range map[string]func() models.CausalLM{"llama": llama, "gpt2": gpt2} {
		t.Run(name, func(t *testing.T) {
			defer torch.NewScope().Close()
			grads := func(checkpointing bool) (float64, [][]float64) {
				torch.ManualSeed(3)
				m := build()
				defer nn.Free(m)
				require.NoError(t, models.SetGradientCheckpointing(m, checkpointing))
				ids := torch.Randint(0, 40, []int64{2, 12}, torch.Int64, torch.CPU)
				loss := models.CausalLMLoss(m.Forward(models.DecoderInput{InputIDs: ids}), ids)
				loss.Backward()
				var out [][]float64
				for _, p := range nn.Parameters(m) {
					require.NotNil(t, p.Grad(), "every parameter gets a gradient")
					out = append(out, p.Grad().Float64s())
				}
				return loss.Item(), out
			}
			plainLoss, plain := grads(false)
			ckptLoss, ckpt := grads(true)
			assert.Equal(t, math.Float64bits(plainLoss), math.Float64bits(ckptLoss))
			assert.Equal(t, plain, ckpt)
		})
	}
}
