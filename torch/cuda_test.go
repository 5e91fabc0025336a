//go:build cuda

package torch_test

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
)

// The CUDA tests run with -tags cuda (scripts/gpu/run.sh) and skip where no GPU is usable.

func needCUDA(t *testing.T) {
	t.Helper()
	if !torch.CUDAIsAvailable() {
		t.Skip("no usable CUDA device (run on a GPU machine: scripts/gpu/run.sh)")
	}
}

func TestCUDAPlacementAndPinnedCopies(t *testing.T) {
	needCUDA(t)
	torch.WithScope(func() {
		host := torch.FromSlicePinned([]float32{1, 2, 3, 4}, 2, 2)
		dev := host.To(torch.CUDA(0), true)
		assert.Equal(t, torch.CUDA(0), dev.Device())
		require.NoError(t, torch.CUDASynchronize(0))
		assert.Equal(t, []float32{1, 2, 3, 4}, dev.Float32s())
		back := dev.MulScalar(2).To(torch.CPU, false)
		assert.Equal(t, torch.CPU, back.Device())
		assert.Equal(t, []float32{2, 4, 6, 8}, back.Float32s())
		name, err := torch.CUDADeviceName(0)
		require.NoError(t, err)
		assert.NotEmpty(t, name)
		mem, err := torch.CUDAMemoryStats(0)
		require.NoError(t, err)
		assert.Greater(t, mem.Allocated, int64(0))
	})
}

func TestCUDAOutOfMemoryIsAnError(t *testing.T) {
	needCUDA(t)
	total, err := torch.CUDATotalMemory(0)
	require.NoError(t, err)
	err = func() (err error) {
		defer torch.Recover(&err, "allocating twice the device")
		torch.Empty([]int64{2 * total / 4}, torch.Float32, torch.CUDA(0)).Free()
		return nil
	}()
	require.Error(t, err)
	assert.True(t, errors.Is(err, torch.ErrOutOfMemory), "%v", err)
	torch.WithScope(func() { // the process survives and CUDA still works
		assert.Equal(t, 6.0, torch.Full([]int64{3}, 2, torch.Float32, torch.CUDA(0)).Sum().Item())
	})
	require.NoError(t, torch.CUDAEmptyCache())
}

func TestCUDADeterministicRunsAreBitwiseEqual(t *testing.T) {
	needCUDA(t)
	torch.SetDeterministic(true)
	defer torch.SetDeterministic(false)
	run := func() []float32 {
		var out []float32
		torch.WithScope(func() {
			torch.ManualSeed(3)
			x := torch.Randn([]int64{8, 3, 32, 32}, torch.Float32, torch.CUDA(0))
			w := torch.Randn([]int64{16, 3, 3, 3}, torch.Float32, torch.CUDA(0)).SetRequiresGrad(true)
			y := torch.Conv2d(x, w, nil, torch.Conv2dOptions{Padding: [2]int64{1, 1}}).Sum()
			y.Backward()
			out = w.Grad().Float32s()
		})
		return out
	}
	assert.Equal(t, run(), run())
}

// TestCUDAVisibleDevicesRemaps runs a child that sees only the last GPU: it must be cuda:0.
func TestCUDAVisibleDevicesRemaps(t *testing.T) {
	needCUDA(t)
	if os.Getenv("GOTRAIN_CHILD_DEVICES") == "1" {
		assert.Equal(t, 1, torch.CUDADeviceCount())
		return
	}
	n := torch.CUDADeviceCount()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestCUDAVisibleDevicesRemaps$", "-test.count=1")
	cmd.Env = append(os.Environ(), "GOTRAIN_CHILD_DEVICES=1", "CUDA_VISIBLE_DEVICES="+strconv.Itoa(n-1))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "PASS")
}
