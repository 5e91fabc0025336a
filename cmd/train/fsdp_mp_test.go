package main

import (
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/trainer"
)

// TestFSDPMixedPrecisionFlag: --fsdp-mixed-precision bf16 sets the sharded strategy's
// policy (bf16 parameters, fp32 reduce); another value, or the flag without --fsdp, is
// an error naming fsdp_mixed_precision.
func TestFSDPMixedPrecisionFlag(t *testing.T) {
	c := defaultConfig()
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	bindFlags(fs, &c)
	require.NoError(t, fs.Parse([]string{"--fsdp", "--fsdp-mixed-precision", "bf16"}))
	require.NoError(t, c.validate())
	assert.Equal(t, trainer.FSDPMixedPrecision{ParamDType: torch.BFloat16, ReduceDType: torch.Float32}, c.fsdpMixedPrecision())
	assert.Equal(t, trainer.FSDPMixedPrecision{}, defaultConfig().fsdpMixedPrecision())

	for _, set := range []func(c *Config){
		func(c *Config) { c.FSDP, c.FSDPMixedPrecision = true, "fp16" },
		func(c *Config) { c.FSDPMixedPrecision = "bf16" },
	} {
		c := defaultConfig()
		set(&c)
		var fe *trainer.FieldError
		require.ErrorAs(t, c.validate(), &fe)
		assert.Equal(t, "fsdp_mixed_precision", fe.Field)
	}
}

// TestLaunchFSDPMixedPrecision: --fsdp --fsdp-mixed-precision bf16, with and without
// --fsdp-reshard, fine-tunes a Hugging Face Llama on two ranks, and the hf/last it
// exports (streamed from the shards) holds the fp32 master weights and loads; an image
// model is refused.
func TestLaunchFSDPMixedPrecision(t *testing.T) {
	model, pairs, runs := tinyLlamaDir(t), pairsFile(t), t.TempDir()
	for _, reshard := range []bool{false, true} {
		args := []string{"--nproc-per-node", "2", "--fsdp", "--fsdp-mixed-precision", "bf16", "--model", model,
			"--data", pairs, "--batch-size", "4", "--optimizer", "adamw", "--lr", "1e-2", "--scheduler", "none", "--threads", "1",
			"--workers", "1", "--epochs", "1", "--runs-dir", runs, "--experiment", fmt.Sprint("mp-", reshard)}
		if reshard {
			args = append(args, "--fsdp-reshard")
		}
		out, err := child(args...).CombinedOutput()
		require.NoError(t, err, string(out))
		assert.Contains(t, string(out), "continuation: ", "the sample on the bf16 model")
		last := filepath.Join(runs, fmt.Sprint("mp-", reshard), "hf", "last")
		d, _, err := checkpoint.ReadSafetensorsDir(last, "")
		require.NoError(t, err)
		n := 0
		for k, v := range d.All() {
			ct, ok := v.(*checkpoint.Tensor)
			require.True(t, ok, "%v", k)
			assert.Equal(t, "float32", ct.DType.String(), "%v (reshard %v)", k, reshard)
			n++
		}
		assert.Positive(t, n)
		m, err := models.LoadPretrained(last, models.LoadOptions{})
		require.NoError(t, err, "hf/last loads")
		nn.Free(m)
	}

	out, err := child(append([]string{"--nproc-per-node", "2", "--fsdp", "--fsdp-mixed-precision", "bf16", "--runs-dir", t.TempDir()}, small...)...).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "--fsdp-mixed-precision takes a language model")
}
