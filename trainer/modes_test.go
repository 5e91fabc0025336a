package trainer

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/gotrain/gotrain/amp"
)

// TestModesKeepTheirConfigStrings: the typed modes read and write the strings that
// config.json and YAML files have always held.
func TestModesKeepTheirConfigStrings(t *testing.T) {
	c := DefaultConfig()
	c.AMP, c.SchedulerInterval, c.MonitorMode = amp.BF16, PerStep, Max
	b, err := json.Marshal(c)
	require.NoError(t, err)
	for _, kv := range []string{`"amp":"bf16"`, `"scheduler_interval":"step"`, `"monitor_mode":"max"`} {
		assert.Contains(t, string(b), kv)
	}
	back, err := ParseConfigJSON(string(b), DefaultConfig())
	require.NoError(t, err)
	assert.Equal(t, c, back)

	var y Config
	require.NoError(t, yaml.Unmarshal([]byte("amp: fp16\nscheduler_interval: epoch\nmonitor_mode: min\n"), &y))
	assert.Equal(t, []any{amp.FP16, PerEpoch, Min}, []any{y.AMP, y.SchedulerInterval, y.MonitorMode})
	out, err := yaml.Marshal(y)
	require.NoError(t, err)
	assert.Contains(t, string(out), "amp: fp16")

	for _, bad := range []string{`{"amp":"fp8"}`, `{"scheduler_interval":"hourly"}`, `{"monitor_mode":"up"}`} {
		_, err := ParseConfigJSON(bad, DefaultConfig())
		assert.Error(t, err, bad)
	}
	assert.Equal(t, "none", amp.Off.String())
}

// TestDirectionOf: the direction of a monitored metric comes from a list of known
// names, with or without a train_/val_/test_ prefix, never from a substring.
func TestDirectionOf(t *testing.T) {
	for name, want := range map[string]Direction{"val_loss": Min, "train_loss": Min, "loss": Min, "val_acc": Max,
		"val_f1": Max, "test_top5": Max, "val_perplexity": Min, "val_mse": Min} {
		got, ok := DirectionOf(name)
		assert.True(t, ok, name)
		assert.Equal(t, want, got, name)
	}
	for _, name := range []string{"val_lossy_score", "closs", "val_reward", "glossary"} {
		_, ok := DirectionOf(name)
		assert.False(t, ok, "%s is not a known name", name)
	}
	c := DefaultConfig()
	c.Monitor = "val_reward"
	require.ErrorContains(t, c.Validate(), "monitor_mode")
	c.MonitorMode = Max
	require.NoError(t, c.Validate())
	assert.Equal(t, Max, c.MonitorDirection())
	assert.Panics(t, func() { NewEarlyStopping("val_reward", Auto, 1, 0) })
	assert.Equal(t, Max, NewEarlyStopping("val_reward", Max, 1, 0).Mode)
}

// TestValidateNamesTheField: every numeric field out of range is an error naming it.
func TestValidateNamesTheField(t *testing.T) {
	nan := func() float64 { z := 0.0; return z / z }()
	for field, set := range map[string]func(c *Config){
		"batch_size": func(c *Config) { c.BatchSize = 0 }, "epochs": func(c *Config) { c.Epochs = 0 },
		"lr": func(c *Config) { c.LR = nan }, "grad_clip": func(c *Config) { c.GradClip = -1 },
		"momentum": func(c *Config) { c.Momentum = 1.5 }, "accumulation": func(c *Config) { c.Accumulation = 0 },
		"workers": func(c *Config) { c.Workers = -1 }, "val_split": func(c *Config) { c.ValSplit = 1 },
		"weight_decay": func(c *Config) { c.WeightDecay = -1 }, "top_k": func(c *Config) { c.TopK = -1 },
	} {
		c := DefaultConfig()
		set(&c)
		err := c.Validate()
		var fe *FieldError
		require.ErrorAs(t, err, &fe, field)
		assert.Equal(t, field, fe.Field)
	}
	require.NoError(t, DefaultConfig().Validate())
}
