package main

import (
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
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
