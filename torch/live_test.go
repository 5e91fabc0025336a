package torch_test

import (
	"runtime"
	"time"

	"github.com/gotrain/gotrain/torch"
)

// settledLive is torch.LiveTensors once the runtime cleanups of earlier tests' unreachable
// tensors have run: LiveTensors counts the whole process, and a cleanup that frees an
// earlier test's tensor in the middle of a test that counts would be miscounted as its own.
// It collects until two readings a collection apart agree.
func settledLive() int64 {
	n := torch.LiveTensors()
	for range 100 {
		runtime.GC()
		time.Sleep(time.Millisecond) // the cleanup goroutine runs what the collection queued
		m := torch.LiveTensors()
		if m == n {
			return m
		}
		n = m
	}
	return n
}
