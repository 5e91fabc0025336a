package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCallbacksExampleRuns(t *testing.T) {
	require.NoError(t, run(true, 512, 3, t.TempDir()))
}
