package models_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
)

// TestLoadPretrainedErrors: what a directory gotrain cannot open says.
func TestLoadPretrainedErrors(t *testing.T) {
	write := func(t *testing.T, config string) string {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, models.ConfigFile), []byte(config), 0o644))
		return dir
	}
	_, err := models.LoadPretrained(write(t, `{"model_type": "t5"}`), models.LoadOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `model_type "t5" is not supported (supported: `)
	assert.Contains(t, err.Error(), "gpt2")

	_, err = models.LoadPretrained(write(t, `{"vocab_size": 10}`), models.LoadOptions{})
	assert.ErrorContains(t, err, "has no model_type")

	_, err = models.LoadPretrained(write(t, `{"model_type": "gpt2"`), models.LoadOptions{})
	assert.ErrorContains(t, err, "config.json")

	_, err = models.LoadPretrained(t.TempDir(), models.LoadOptions{})
	assert.ErrorContains(t, err, "config.json")

	// A config whose sizes disagree with the weights.
	torch.ManualSeed(1)
	m := newGPT2(t, tinyGPT2Config())
	dir := t.TempDir()
	require.NoError(t, m.SavePretrained(dir))
	c := tinyGPT2Config()
	c.NEmbd = 32
	raw, err := json.Marshal(c)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, models.ConfigFile), raw, 0o644))
	_, err = models.LoadPretrained(dir, models.LoadOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "transformer.wte.weight")

	// Sizes that would overflow or exhaust memory are refused before anything is built.
	for field, v := range map[string]any{"vocab_size": int64(1) << 40, "n_embd": int64(1) << 31, "n_inner": -4, "n_layer": 100000, "resid_pdrop": 5} {
		var cfg map[string]any
		raw, _ := json.Marshal(tinyGPT2Config())
		require.NoError(t, json.Unmarshal(raw, &cfg))
		cfg[field] = v
		raw, _ = json.Marshal(cfg)
		_, err := models.LoadPretrained(write(t, string(raw)), models.LoadOptions{})
		require.Error(t, err, field)
		assert.Contains(t, err.Error(), field)
	}
}

// TestLoadPretrainedDType: weights load in the dtype asked for.
func TestLoadPretrainedDType(t *testing.T) {
	torch.ManualSeed(2)
	m := newGPT2(t, tinyGPT2Config())
	dir := t.TempDir()
	require.NoError(t, models.SavePretrained(dir, m, models.SaveOptions{MaxShardSize: 2 << 10}))
	b, err := models.LoadPretrained(dir, models.LoadOptions{DType: torch.BFloat16})
	require.NoError(t, err)
	defer nn.Free(b)
	for _, p := range nn.NamedParameters(b) {
		assert.Equal(t, torch.BFloat16, p.Tensor.DType(), p.Name)
	}
	want := nn.NamedParameters(m)[0].Tensor.ToDType(torch.BFloat16).Float64s()
	assert.Equal(t, want, nn.NamedParameters(b)[0].Tensor.Float64s())
}
