//go:build cuda

package trainer_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/trainer"
)

// TestCUDAExactResume is TestExactResume on the GPU: interrupted mid-epoch and resumed,
// the deterministic run ends bitwise equal to an uninterrupted one.
func TestCUDAExactResume(t *testing.T) {
	if !torch.CUDAIsAvailable() {
		t.Skip("no usable CUDA device")
	}
	t.Setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
	ref := newCNN(t, t.TempDir(), trainer.WithDevice("cuda:0"))
	require.NoError(t, ref.Run(context.Background()))
	want := snap(t, ref)

	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := trainer.CallbackFunc(func(e trainer.Event, tt *trainer.Trainer) error {
		if e == trainer.BatchEnd && tt.Epoch == 1 && tt.BatchInEpoch == 3 {
			cancel()
		}
		return nil
	})
	first := newCNN(t, dir, trainer.WithDevice("cuda:0"), trainer.WithCallbacks(stop))
	var ie *trainer.InterruptedError
	require.True(t, errors.As(first.Run(ctx), &ie))
	resumed := newCNN(t, dir, trainer.WithDevice("cuda:0"))
	require.NoError(t, resumed.LoadCheckpoint(ie.Checkpoint))
	require.NoError(t, resumed.Run(context.Background()))
	got := snap(t, resumed)
	assert.Equal(t, want.model, got.model)
	assert.Equal(t, want.optimizer, got.optimizer)
}
