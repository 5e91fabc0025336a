package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServeExample: four goroutines classifying at once with their own scopes get the
// accuracy the trainer's validation measured on the same samples, and free every tensor
// they made.
func TestServeExample(t *testing.T) {
	res, err := run(true, 512, "", 4)
	require.NoError(t, err)
	assert.Equal(t, 512, res.samples)
	assert.InDelta(t, res.valAcc, res.accuracy, 1e-9, "concurrent inference must agree with validation")
	assert.Equal(t, res.liveBefore, res.liveAt, "the goroutines' tensors are all freed")
}
