package torch_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gotrain/gotrain/torch"
)

// onOSThread runs f on a goroutine locked to its own OS thread, for each function sent,
// until the channel closes.
func onOSThread(work <-chan func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for f := range work {
		f()
	}
}

// TestSetNumThreadsReachesEveryThread: libtorch's own setting reaches only the calling
// OS thread and threads that have not yet run a parallel op, so a goroutine that moved
// threads (the Trainer's loop after a resume, say) could compute with another thread
// count than --threads asked for, and reductions would differ in their last bits.
// torch.SetNumThreads governs every thread, including one that ran ops before it.
func TestSetNumThreadsReachesEveryThread(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	old := torch.NumThreads()
	defer torch.SetNumThreads(old)

	work := make(chan func())
	defer close(work)
	go onOSThread(work)
	on := func(f func() int) int {
		done := make(chan int)
		work <- func() { done <- f() }
		return <-done
	}
	before := on(func() int {
		torch.WithScope(func() { torch.Randn([]int64{1 << 20}, torch.Float32, torch.CPU).Sum() })
		return torch.NumThreads()
	})
	want := before + 1
	torch.SetNumThreads(want)
	assert.Equal(t, want, torch.NumThreads(), "the calling thread")
	assert.Equal(t, want, on(torch.NumThreads), "a thread that ran a parallel op before the setting")

	fresh := make(chan func())
	defer close(fresh)
	go onOSThread(fresh)
	done := make(chan int)
	fresh <- func() { done <- torch.NumThreads() }
	assert.Equal(t, want, <-done, "a thread that never ran an op")
}
