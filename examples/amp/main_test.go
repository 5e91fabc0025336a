package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAMPExampleRuns(t *testing.T) {
	require.NoError(t, run(true, 512, 1, "bf16", "cpu", t.TempDir()))
}
