package distributed_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/distributed"
	"github.com/gotrain/gotrain/torch/distributed/disttest"
)

// shardedChild runs shardedCollectives alone: the three-rank world of
// TestShardedCollectivesThreeRanks (the two-rank world runs it inside collectivesChild,
// in TestCollectives' launch).
func shardedChild() error {
	pg, err := disttest.Join(10 * time.Second)
	if err != nil {
		return err
	}
	defer pg.Close()
	if err := shardedCollectives(pg); err != nil {
		return err
	}
	return pg.Barrier()
}

// TestShardedCollectivesThreeRanks: all-gather and reduce-scatter in a world of three,
// where chunks are neither halves nor the whole (two ranks run the same checks in
// TestCollectives).
func TestShardedCollectivesThreeRanks(t *testing.T) {
	res := disttest.Spawn(t, "sharded", 3, nil)
	for r, c := range res {
		require.NoErrorf(t, c.Err, "rank %d:\n%s", r, c.Output)
	}
}

// value is element k of rank q's input in these checks: distinct across ranks and
// elements, and exact in every dtype used.
func value(q, k int) float64 { return float64(100*q + k + 1) }

// rankInput is rank q's input of n elements (value(q, 0..n-1)) in dtype dt.
func rankInput(q, n int, dt torch.DType) *torch.Tensor {
	return torch.FromSlice(values(q, n)).ToDType(dt)
}

// same compares got with want element by element.
func same(what string, got, want []float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("%s: element %d is %v, want %v (got %v, want %v)", what, i, got[i], want[i], got, want)
		}
	}
	return nil
}

// values is rank q's n-element input, as float64s.
func values(q, n int) []float64 {
	vs := make([]float64, n)
	for k := range vs {
		vs[k] = value(q, k)
	}
	return vs
}

// gathered is what an all-gather of every rank's n-element rankInput holds.
func gathered(world, n int) []float64 {
	var out []float64
	for q := 0; q < world; q++ {
		out = append(out, values(q, n)...)
	}
	return out
}

// reduced is rank r's chunk (of n/world elements) of the reduction over every rank's
// n-element rankInput.
func reduced(world, rank, n int, op distributed.ReduceOp) []float64 {
	m := n / world
	out := make([]float64, m)
	for j := range out {
		k := rank*m + j
		acc := value(0, k)
		for q := 1; q < world; q++ {
			v := value(q, k)
			switch op {
			case distributed.Sum, distributed.Avg:
				acc += v
			case distributed.Max:
				acc = max(acc, v)
			case distributed.Min:
				acc = min(acc, v)
			}
		}
		if op == distributed.Avg {
			acc /= float64(world)
		}
		out[j] = acc
	}
	return out
}

// shardedCollectives checks AllGather, ReduceScatter and their coalesced forms in one
// launch, for any world size: single pairs (contiguous and strided outputs, several
// dtypes), every reduce op, lists that mix dtypes, a gather-then-scatter round trip,
// and the argument errors that are refused before any communication.
func shardedCollectives(pg *distributed.ProcessGroup) error {
	w, r := pg.WorldSize(), pg.Rank()
	var failed error
	fail := func(err error) bool {
		if err != nil && failed == nil {
			failed = err
		}
		return failed != nil
	}
	torch.WithScope(func() {
		// All-gather into a flat buffer of another shape, float32 and int64.
		for _, dt := range []torch.DType{torch.Float32, torch.Int64} {
			in := rankInput(r, 3, dt)
			out := torch.Zeros([]int64{int64(w), 3}, dt, torch.CPU)
			if fail(pg.AllGather(out, in)) || fail(same(fmt.Sprint("all-gather ", dt), out.Float64s(), gathered(w, 3))) {
				return
			}
		}
		// A strided output (a transpose's view) is filled through a copy.
		in := rankInput(r, 2, torch.Float64)
		strided := torch.Zeros([]int64{2, int64(w)}, torch.Float64, torch.CPU).T()
		if fail(pg.AllGather(strided, in)) || fail(same("all-gather into a strided output", strided.Float64s(), gathered(w, 2))) {
			return
		}

		// Reduce-scatter with every op; the input is left as it was.
		for _, op := range []distributed.ReduceOp{distributed.Sum, distributed.Avg, distributed.Max, distributed.Min} {
			in := rankInput(r, 2*w, torch.Float32)
			out := torch.Zeros([]int64{2}, torch.Float32, torch.CPU)
			if fail(pg.ReduceScatter(out, in, op)) || fail(same(fmt.Sprint("reduce-scatter ", op), out.Float64s(), reduced(w, r, 2*w, op))) ||
				fail(same(fmt.Sprint("reduce-scatter ", op, "'s input afterwards"), in.Float64s(), values(r, 2*w))) {
				return
			}
		}
		// Shapes: a [w, 2] gradient's rank-r row, into a strided [2] output.
		in2 := rankInput(r, 2*w, torch.Float64).Reshape(int64(w), 2)
		out2 := torch.Zeros([]int64{2, 2}, torch.Float64, torch.CPU).Select(1, 0)
		if fail(pg.ReduceScatter(out2, in2, distributed.Sum)) || fail(same("reduce-scatter into a strided output", out2.Float64s(), reduced(w, r, 2*w, distributed.Sum))) {
			return
		}

		// Coalesced: three pairs, two dtypes (two collectives), shapes that differ.
		ins := []*torch.Tensor{rankInput(r, 2, torch.Float32), rankInput(r, 4, torch.Float32).Reshape(2, 2), rankInput(r, 1, torch.Int64)}
		outs := []*torch.Tensor{
			torch.Zeros([]int64{int64(2 * w)}, torch.Float32, torch.CPU),
			torch.Zeros([]int64{int64(2 * w), 2}, torch.Float32, torch.CPU),
			torch.Zeros([]int64{int64(w)}, torch.Int64, torch.CPU),
		}
		if fail(pg.AllGatherCoalesced(outs, ins)) {
			return
		}
		for i, n := range []int{2, 4, 1} {
			if fail(same(fmt.Sprint("coalesced all-gather pair ", i), outs[i].Float64s(), gathered(w, n))) {
				return
			}
		}
		for _, op := range []distributed.ReduceOp{distributed.Sum, distributed.Avg} {
			sizes := []int{2 * w, 3 * w, w}
			ins := []*torch.Tensor{rankInput(r, sizes[0], torch.Float32), rankInput(r, sizes[1], torch.Float32).Reshape(int64(w), 3),
				rankInput(r, sizes[2], torch.Float64)}
			outs := []*torch.Tensor{torch.Zeros([]int64{2}, torch.Float32, torch.CPU), torch.Zeros([]int64{3}, torch.Float32, torch.CPU),
				torch.Zeros([]int64{1}, torch.Float64, torch.CPU)}
			if fail(pg.ReduceScatterCoalesced(outs, ins, op)) {
				return
			}
			for i, n := range sizes {
				if fail(same(fmt.Sprint("coalesced reduce-scatter ", op, " pair ", i), outs[i].Float64s(), reduced(w, r, n, op))) {
					return
				}
			}
		}

		// Round trip, as a sharded step does it: gather the shards into the full
		// parameter, then reduce-scatter a full gradient back into a shard.
		shard := rankInput(r, 3, torch.Float32)
		full := torch.Zeros([]int64{int64(3 * w)}, torch.Float32, torch.CPU)
		back := torch.Zeros([]int64{3}, torch.Float32, torch.CPU)
		if fail(pg.AllGather(full, shard)) || fail(pg.ReduceScatter(back, full, distributed.Avg)) ||
			fail(same("all-gather then reduce-scatter avg", back.Float64s(), shard.Float64s())) {
			return
		}

		// Refused before any communication, with the sizes named.
		x := torch.Zeros([]int64{3}, torch.Float32, torch.CPU)
		for _, c := range []struct {
			err  error
			want string
		}{
			{pg.AllGather(torch.Zeros([]int64{int64(3*w + 1)}, torch.Float32, torch.CPU), x),
				fmt.Sprintf("all-gather: output [%d] has %d elements, and must have world size %d × input [3]'s 3 = %d", 3*w+1, 3*w+1, w, 3*w)},
			{pg.ReduceScatter(x, torch.Zeros([]int64{int64(3*w + 1)}, torch.Float32, torch.CPU), distributed.Sum),
				fmt.Sprintf("reduce-scatter: input [%d] has %d elements, which do not split into %d equal chunks", 3*w+1, 3*w+1, w)},
			{pg.ReduceScatter(torch.Zeros([]int64{2}, torch.Float32, torch.CPU), torch.Zeros([]int64{int64(3 * w)}, torch.Float32, torch.CPU), distributed.Sum),
				fmt.Sprintf("reduce-scatter: output [2] has 2 elements, and must have input [%d]'s %d / world size %d = 3", 3*w, 3*w, w)},
			{pg.AllGather(torch.Zeros([]int64{int64(3 * w)}, torch.Float64, torch.CPU), x), "all-gather: output is float64, input is float32"},
			{pg.ReduceScatter(torch.Zeros([]int64{1}, torch.Int64, torch.CPU), torch.Zeros([]int64{int64(w)}, torch.Int64, torch.CPU), distributed.Avg),
				"reduce op avg needs floating-point tensors; tensor 0 is int64"},
			{pg.ReduceScatter(x, torch.Zeros([]int64{int64(3 * w)}, torch.Float32, torch.CPU), distributed.ReduceOp(9)), "unknown reduce op 9"},
			{pg.AllGatherCoalesced([]*torch.Tensor{torch.Zeros([]int64{int64(3 * w)}, torch.Float32, torch.CPU), x}, []*torch.Tensor{x, x}),
				fmt.Sprintf("all-gather: pair 1: output [3] has 3 elements, and must have world size %d × input [3]'s 3 = %d", w, 3*w)},
			{pg.ReduceScatterCoalesced([]*torch.Tensor{x}, nil, distributed.Sum), "reduce-scatter: 1 outputs for 0 inputs"},
			{pg.AllGather(nil, x), "all-gather: nil tensor"},
		} {
			if c.err == nil {
				fail(fmt.Errorf("no error, want %q", c.want))
				return
			}
			if !strings.Contains(c.err.Error(), c.want) {
				fail(fmt.Errorf("error %q, want it to contain %q", c.err, c.want))
				return
			}
		}
	})
	if failed != nil {
		return fmt.Errorf("world %d: %w", w, failed)
	}
	// The group still works after the refusals.
	sum, err := pg.AllReduceFloat64s([]float64{1}, distributed.Sum)
	if err != nil {
		return err
	}
	if sum[0] != float64(w) {
		return errors.New("all-reduce after the sharded checks is wrong")
	}
	return nil
}
