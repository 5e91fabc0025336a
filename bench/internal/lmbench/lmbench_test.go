package lmbench

import (
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFlagsKeepDefaultsAndParse(t *testing.T) {
	r := Run{Batch: 16, Seq: 128, Warmup: 3, Steps: 20, NewTokens: 128, Threads: 2}
	fs := flag.NewFlagSet("lm", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	r.Flags(fs)
	require.NoError(t, fs.Parse([]string{"-batch", "4", "-new", "7", "-threads", "1"}))
	assert.Equal(t, Run{Batch: 4, Seq: 128, Warmup: 3, Steps: 20, NewTokens: 7, Threads: 1}, r)
	assert.Equal(t, "16", fs.Lookup("batch").DefValue)
}
