package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/amp"
	"github.com/gotrain/gotrain/trainer"
)

func TestConfigFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
		return p
	}
	c, err := loadConfig(write("c.yaml", "epochs: 3\nlr: 0.01\namp: bf16\n"), defaultConfig())
	require.NoError(t, err)
	assert.Equal(t, 3, c.Epochs)
	assert.Equal(t, 0.01, c.LR)
	assert.Equal(t, amp.BF16, c.AMP)
	assert.Equal(t, "cnn", c.Model, "unset keys keep the base's values")

	j, err := loadConfig(write("c.json", `{"epochs": 2, "batch_size": 7, "grad_clip": 1.5}`), defaultConfig())
	require.NoError(t, err)
	assert.Equal(t, []any{2, 7, 1.5}, []any{j.Epochs, j.BatchSize, j.GradClip})

	for name, text := range map[string]string{
		"bad.json":   `{"epochz": 3}`,
		"amp.yaml":   "amp: fp8\n",
		"empty.yaml": "\n",
		"two.yaml":   "epochs: 3\n---\nepochs: 4\n",
		"two.json":   `{"epochs": 3} {"epochs": 4}`,
		"lr.yaml":    "lr: -1\n",
	} {
		_, err := loadConfig(write(name, text), defaultConfig())
		assert.Error(t, err, name)
	}
	_, err = loadConfig(dir, defaultConfig())
	assert.ErrorContains(t, err, "not a regular file")
}

// TestValidateNamesTheField: every numeric field of the command's config out of range
// is an error naming it.
func TestValidateNamesTheField(t *testing.T) {
	nan := func() float64 { z := 0.0; return z / z }()
	for field, set := range map[string]func(c *Config){
		"batch_size": func(c *Config) { c.BatchSize = 0 }, "epochs": func(c *Config) { c.Epochs = 0 },
		"lr": func(c *Config) { c.LR = nan }, "momentum": func(c *Config) { c.Momentum = 1.5 },
		"workers": func(c *Config) { c.Workers = -1 }, "val_split": func(c *Config) { c.ValSplit = 1 },
		"weight_decay": func(c *Config) { c.WeightDecay = -1 }, "adam_kernel": func(c *Config) { c.AdamKernel = "fast" },
	} {
		c := defaultConfig()
		set(&c)
		var fe *trainer.FieldError
		require.ErrorAs(t, c.validate(), &fe, field)
		assert.Equal(t, field, fe.Field)
	}
	require.NoError(t, defaultConfig().validate())
}

// TestConfigIsFlat: the command's config and the Trainer's are one flat JSON object,
// as config files write them.
func TestConfigIsFlat(t *testing.T) {
	b, err := json.Marshal(defaultConfig())
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	for _, k := range []string{"epochs", "lr", "model", "amp", "monitor", "batch_size"} {
		assert.Contains(t, m, k)
	}
}

// TestCUDAGraphsFlag: --cuda-graphs on the CPU is refused with the Trainer's reason, and
// with a non-capturable optimizer with that one.
func TestCUDAGraphsFlag(t *testing.T) {
	for _, c := range []struct {
		extra []string
		want  string
	}{
		{[]string{"--device", "cpu"}, "WithCUDAGraphs: CUDA graphs need a CUDA device, and the device is cpu"},
		{[]string{"--optimizer", "rmsprop"}, "WithCUDAGraphs: optimizer RMSprop reads its step count on the host"},
		{[]string{"--optimizer", "adamw", "--adam-kernel", "foreach"}, "AdamW without fused=True"},
	} {
		args := append([]string{"--synthetic", "64", "--epochs", "1", "--runs-dir", t.TempDir(), "--cuda-graphs"}, c.extra...)
		err := run(args)
		require.Error(t, err, "%v", c.extra)
		assert.Contains(t, err.Error(), c.want)
	}
}
