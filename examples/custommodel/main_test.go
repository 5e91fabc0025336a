package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch/nn"
)

func TestCustomModelExampleRuns(t *testing.T) {
	names := []string{}
	for _, p := range nn.NamedParameters(NewNet(10)) {
		names = append(names, p.Name)
	}
	require.Equal(t, []string{"conv.weight", "conv.bias", "head.0.weight", "head.0.bias", "head.2.weight", "head.2.bias"}, names)
	require.NoError(t, run(true, 512, 2, t.TempDir()))
}
