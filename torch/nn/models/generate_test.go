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
