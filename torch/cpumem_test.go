package torch_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
)

// The counting allocator sees exactly the storages made and freed, and its peak.
func TestCPUMemoryCounts(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	torch.CountCPUMemory()
	torch.CountCPUMemory() // a second call changes nothing
	require.True(t, torch.CountingCPUMemory())
	before := torch.CPUMemoryStats()
	a := torch.Zeros([]int64{1 << 20}, torch.Float32, torch.CPU)
	b := torch.Zeros([]int64{1 << 18}, torch.Float64, torch.CPU)
	mid := torch.CPUMemoryStats()
	assert.Equal(t, before.Allocated+(4<<20)+(2<<20), mid.Allocated)
	assert.Equal(t, before.Allocations+2, mid.Allocations)
	v := a.Narrow(0, 0, 10) // a view allocates no storage
	assert.Equal(t, mid.Allocated, torch.CPUMemoryStats().Allocated)
	v.Free()
	a.Free()
	b.Free()
	after := torch.CPUMemoryStats()
	assert.Equal(t, before.Allocated, after.Allocated)
	assert.GreaterOrEqual(t, after.PeakAllocated, mid.Allocated)
	torch.ResetCPUPeakMemory()
	assert.Equal(t, after.Allocated, torch.CPUMemoryStats().PeakAllocated)
}
