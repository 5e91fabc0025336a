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

// TestSavePretrainedReplacesLinks: a save into a directory whose files are symlinks to
// a file elsewhere (config.json, the shards, the index, a single file the sharded save
// drops) leaves that file as it was and fills the directory with regular files holding
// the save's bytes, the same as a save into an empty directory.
func TestSavePretrainedReplacesLinks(t *testing.T) {
	torch.ManualSeed(3)
	m := newGPT2(t, tinyGPT2Config())
	o := models.SaveOptions{MaxShardSize: 4 << 10}
	ref := t.TempDir()
	require.NoError(t, models.SavePretrained(ref, m, o))
	ents, err := os.ReadDir(ref)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	require.Contains(t, names, "model.safetensors.index.json", "the save is sharded")

	outside := filepath.Join(t.TempDir(), "outside")
	require.NoError(t, os.WriteFile(outside, []byte("not to be overwritten"), 0o644))
	dir := t.TempDir()
	for _, name := range append(names, "model.safetensors") {
		require.NoError(t, os.Symlink(outside, filepath.Join(dir, name)))
	}
	require.NoError(t, models.SavePretrained(dir, m, o))
	kept, err := os.ReadFile(outside)
	require.NoError(t, err)
	assert.Equal(t, "not to be overwritten", string(kept), "a link in the output directory was written through")
	ents, err = os.ReadDir(dir)
	require.NoError(t, err)
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
		assert.True(t, e.Type().IsRegular(), "%s is %v, not a regular file", e.Name(), e.Type())
		want, err := os.ReadFile(filepath.Join(ref, e.Name()))
		require.NoError(t, err)
		have, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		assert.Equal(t, want, have, e.Name())
	}
	assert.Equal(t, names, got, "the single file's link is removed, as a stale single file is")
}
