package torch_test

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
)

func rssBytes(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	require.NoError(t, err)
	f := strings.Fields(string(b))
	pages, err := strconv.ParseInt(f[1], 10, 64)
	require.NoError(t, err)
	return pages * int64(os.Getpagesize())
}

// TestNoLeakOverManySteps runs 10,000 forward+backward steps of a small MLP, each in a
// scope: the live-tensor count must return to its start and RSS must stay flat.
func TestNoLeakOverManySteps(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	torch.ManualSeed(1)
	setup := torch.NewScope()
	w1 := torch.Randn([]int64{32, 64}, torch.Float32, torch.CPU).MulScalar(0.1).SetRequiresGrad(true)
	w2 := torch.Randn([]int64{10, 32}, torch.Float32, torch.CPU).MulScalar(0.1).SetRequiresGrad(true)
	x := torch.Randn([]int64{16, 64}, torch.Float32, torch.CPU)
	y := torch.Randint(0, 10, []int64{16}, torch.Int64, torch.CPU)
	setup.Keep(w1, w2, x, y)
	setup.Close()
	defer func() {
		for _, t := range []*torch.Tensor{w1, w2, x, y} {
			t.Free()
		}
	}()
	start := settledLive()
	var rss1000 int64
	for step := 1; step <= 10000; step++ {
		torch.WithScope(func() {
			h := torch.Linear(x, w1, nil).ReLU()
			loss := torch.CrossEntropy(torch.Linear(h, w2, nil), y, torch.CrossEntropyOptions{})
			loss.Backward()
			torch.NoGrad(func() {
				for _, w := range []*torch.Tensor{w1, w2} {
					w.SubInPlace(w.Grad(), 0.01)
				}
			})
			w1.SetGrad(nil)
			w2.SetGrad(nil)
		})
		if step == 1000 {
			rss1000 = rssBytes(t)
		}
	}
	require.Equal(t, start, torch.LiveTensors(), "every tensor made in a step is freed with its scope")
	rss := rssBytes(t)
	require.InDelta(t, float64(rss1000), float64(rss), 0.05*float64(rss1000), "RSS after step 10000 (%d) within 5%% of step 1000 (%d)", rss, rss1000)
}
