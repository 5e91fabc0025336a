package trainer

import (
	"encoding/json"
	"math"
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
	back := DefaultConfig()
	require.NoError(t, json.Unmarshal(b, &back))
	require.NoError(t, back.Validate())
	assert.Equal(t, c, back)

	var y Config
	require.NoError(t, yaml.Unmarshal([]byte("amp: fp16\nscheduler_interval: epoch\nmonitor_mode: min\n"), &y))
	assert.Equal(t, []any{amp.FP16, PerEpoch, Min}, []any{y.AMP, y.SchedulerInterval, y.MonitorMode})
	out, err := yaml.Marshal(y)
	require.NoError(t, err)
	assert.Contains(t, string(out), "amp: fp16")

	for _, bad := range []string{`{"amp":"fp8"}`, `{"scheduler_interval":"hourly"}`, `{"monitor_mode":"up"}`} {
		c := DefaultConfig()
		err := json.Unmarshal([]byte(bad), &c)
		if err == nil {
			err = c.Validate()
		}
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
	_, err := NewEarlyStopping("val_reward", Auto, 1, 0)
	require.ErrorContains(t, err, `monitor "val_reward" is not a known metric name`)
	e, err := NewEarlyStopping("val_reward", Max, 1, 0)
	require.NoError(t, err)
	assert.Equal(t, Max, e.Mode)
}

// TestCallbackConstructorsRejectBadArguments: a monitor, a patience or a top-k often
// comes from a flag or a config, so a bad one is an error naming it.
func TestCallbackConstructorsRejectBadArguments(t *testing.T) {
	for _, c := range []struct {
		name string
		make func() (Callback, error)
		want string
	}{
		{"early stopping patience", func() (Callback, error) { return NewEarlyStopping("val_loss", Auto, -1, 0) }, "EarlyStopping: patience must be >= 0, got -1"},
		{"early stopping min_delta", func() (Callback, error) {
			return NewEarlyStopping("val_loss", Auto, 1, math.NaN())
		}, "EarlyStopping: min_delta must be a finite number, got NaN"},
		{"early stopping monitor", func() (Callback, error) { return NewEarlyStopping("reward", Auto, 1, 0) }, `EarlyStopping: trainer: monitor "reward"`},
		{"checkpoint top_k", func() (Callback, error) { return NewModelCheckpoint(t.TempDir(), "val_loss", Auto, -2) }, "ModelCheckpoint: top_k must be >= 0, got -2"},
		{"checkpoint monitor", func() (Callback, error) { return NewModelCheckpoint(t.TempDir(), "reward", Auto, 1) }, `ModelCheckpoint: trainer: monitor "reward"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.make()
			require.ErrorContains(t, err, c.want)
		})
	}
}

// TestValidateNamesTheField: every numeric field out of range is an error naming it.
func TestValidateNamesTheField(t *testing.T) {
	nan := func() float64 { z := 0.0; return z / z }()
	for field, set := range map[string]func(c *Config){
		"epochs": func(c *Config) { c.Epochs = 0 }, "grad_clip": func(c *Config) { c.GradClip = nan },
		"accumulation": func(c *Config) { c.Accumulation = 0 }, "top_k": func(c *Config) { c.TopK = -1 },
		"patience": func(c *Config) { c.Patience = -1 }, "log_every": func(c *Config) { c.LogEvery = -1 },
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
