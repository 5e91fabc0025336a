package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestResumeExampleRuns(t *testing.T) {
	require.NoError(t, run(true, 512, t.TempDir()))
}
