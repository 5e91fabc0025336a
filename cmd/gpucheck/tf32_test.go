package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gotrain/gotrain/torch"
)

func TestMatmulLabelNamesTF32OnlyForFloat32(t *testing.T) {
	t.Setenv(tf32Env, "")
	assert.Equal(t, "float32", matmulLabel(torch.Float32))
	t.Setenv(tf32Env, "1")
	assert.Equal(t, "tf32", matmulLabel(torch.Float32))
	assert.Equal(t, "bfloat16", matmulLabel(torch.BFloat16))
}
