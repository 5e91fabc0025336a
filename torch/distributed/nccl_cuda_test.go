//go:build cuda

package distributed_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/distributed"
	"github.com/gotrain/gotrain/torch/distributed/disttest"
)

// TestNCCLSingleRank runs every collective (all-gather and reduce-scatter too) over NCCL on cuda:0 in a group of one: the
// automatic choice picks NCCL on a GPU, and the results are what one rank's reduction
// gives (sums unchanged, gradients averaged over one rank).
func TestNCCLSingleRank(t *testing.T) {
	if !torch.CUDAIsAvailable() {
		t.Skip("no CUDA device")
	}
	if ok, why := distributed.NCCLAvailable(); !ok {
		t.Fatalf("CUDA build without NCCL: %s", why)
	}
	pg, err := distributed.Init(distributed.Options{WorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: disttest.FreePort(t), Timeout: time.Minute})
	require.NoError(t, err)
	defer pg.Close()
	require.Equal(t, distributed.NCCL, pg.Backend())
	dev := pg.Device()
	require.True(t, dev.IsCUDA())

	torch.WithScope(func() {
		a := torch.FromSlice([]float32{1, 2, 3}).To(dev, false)
		b := torch.FromSlice([]int64{7}).To(dev, false)
		require.NoError(t, pg.Broadcast([]*torch.Tensor{a, b}, 0))
		assert.Equal(t, []float32{1, 2, 3}, a.Float32s())
		assert.Equal(t, []int64{7}, b.Int64s())

		s := torch.FromSlice([]float64{4, 5}).To(dev, false)
		require.NoError(t, pg.AllReduce([]*torch.Tensor{s}, distributed.Sum))
		assert.Equal(t, []float64{4, 5}, s.Float64s())

		m, err := pg.AllReduceFloat64s([]float64{3, -1}, distributed.Max)
		require.NoError(t, err)
		assert.Equal(t, []float64{3, -1}, m)

		p := torch.FromSlice([]float32{1, 1}).To(dev, false)
		p.SetRequiresGrad(true)
		p.MulScalar(3).Sum().Backward()
		require.NoError(t, pg.AllReduceGradients([]*torch.Tensor{p}, 0))
		assert.Equal(t, []float32{3, 3}, p.Grad().Float32s())

		// All-gather and reduce-scatter over NCCL (its own average), single and
		// coalesced: a world of one gathers and scatters its own values.
		in := torch.FromSlice([]float32{1, 2, 3}).To(dev, false)
		out := torch.Zeros([]int64{3}, torch.Float32, dev)
		require.NoError(t, pg.AllGather(out, in))
		assert.Equal(t, []float32{1, 2, 3}, out.Float32s())
		for _, op := range []distributed.ReduceOp{distributed.Sum, distributed.Avg} {
			out := torch.Zeros([]int64{3}, torch.Float32, dev)
			require.NoError(t, pg.ReduceScatter(out, in, op))
			assert.Equal(t, []float32{1, 2, 3}, out.Float32s(), op)
		}
		ins := []*torch.Tensor{in, torch.FromSlice([]int64{4, 5}).To(dev, false)}
		outs := []*torch.Tensor{torch.Zeros([]int64{3}, torch.Float32, dev), torch.Zeros([]int64{2}, torch.Int64, dev)}
		require.NoError(t, pg.AllGatherCoalesced(outs, ins))
		assert.Equal(t, []float32{1, 2, 3}, outs[0].Float32s())
		assert.Equal(t, []int64{4, 5}, outs[1].Int64s())
		outs = []*torch.Tensor{torch.Zeros([]int64{3}, torch.Float32, dev), torch.Zeros([]int64{2}, torch.Int64, dev)}
		require.NoError(t, pg.ReduceScatterCoalesced(outs, ins, distributed.Sum))
		assert.Equal(t, []float32{1, 2, 3}, outs[0].Float32s())
		assert.Equal(t, []int64{4, 5}, outs[1].Int64s())
		// NCCL carries CUDA tensors only: a CPU one is refused before any communication.
		err = pg.AllGather(torch.Zeros([]int64{3}, torch.Float32, torch.CPU), torch.Zeros([]int64{3}, torch.Float32, torch.CPU))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "the NCCL backend needs CUDA tensors")
	})
	require.NoError(t, pg.Barrier())
}
