package torch_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
)

// TestAccumulate runs the CPU's direct path and the device path (ATen ops, what a CUDA
// accumulator takes) over the same batches: both give the sums a float64 loop gives,
// track the latest loss and the first non-finite step, and skip non-finite values on
// request.
func TestAccumulate(t *testing.T) {
	losses := []float32{0.5, 0.25, float32(math.NaN()), 2, float32(math.Inf(1))}
	accs := []float64{0.75, 1, 0.5, 0, 0.25}
	for _, path := range []struct {
		name  string
		flags torch.AccumulateFlags
	}{{"cpu", 0}, {"device", torch.AccumulateOnDevice}} {
		t.Run(path.name, func(t *testing.T) {
			torch.WithScope(func() {
				acc := torch.FromSlice([]float64{0, 0, 0, math.Inf(1)})
				finite := torch.FromSlice([]float64{0})
				var want [2]float64
				for i, l := range losses {
					loss := torch.FromSlice([]float32{l}).Reshape() // a 0-dim loss
					a := torch.FromSlice([]float64{accs[i]})        // a 1-element metric
					before := torch.HostReads()
					torch.Accumulate(acc, []*torch.Tensor{loss, a}, 16, int64(i+1), torch.AccumulateTrack|path.flags)
					torch.Accumulate(finite, []*torch.Tensor{loss}, 1, 0, torch.AccumulateSkipNonfinite|path.flags)
					assert.Equal(t, before, torch.HostReads(), "accumulating reads nothing back to Go")
					want[0] += 16 * float64(l)
					want[1] += 16 * accs[i]
				}
				got := acc.Float64s()
				assert.True(t, math.IsNaN(got[0]), "a NaN loss poisons the loss sum, as in a float64 loop")
				assert.Equal(t, want[1], got[1])
				assert.True(t, math.IsInf(got[2], 1), "the latest loss is the last batch's")
				assert.Equal(t, 3.0, got[3], "the first non-finite loss was step 3")
				assert.Equal(t, []float64{0.5 + 0.25 + 2}, finite.Float64s(), "non-finite values are skipped")
			})
		})
	}
}

// TestAccumulateMisuse: a wrong accumulator or value panics with a *torch.Error naming
// the problem.
func TestAccumulateMisuse(t *testing.T) {
	torch.WithScope(func() {
		v := torch.FromSlice([]float32{1})
		for name, c := range map[string]struct {
			acc  *torch.Tensor
			vals []*torch.Tensor
			want string
		}{
			"float32 accumulator": {torch.FromSlice([]float32{0, 0, 0}), []*torch.Tensor{v}, "float64"},
			"too short":           {torch.FromSlice([]float64{0, 0}), []*torch.Tensor{v}, "at least 3"},
			"vector value":        {torch.FromSlice([]float64{0, 0, 0}), []*torch.Tensor{torch.FromSlice([]float32{1, 2})}, "2 elements"},
		} {
			var err error
			func() {
				defer torch.Recover(&err, name)
				torch.Accumulate(c.acc, c.vals, 1, 1, torch.AccumulateTrack)
			}()
			require.Error(t, err, name)
			var te *torch.Error
			require.ErrorAs(t, err, &te, name)
			assert.Contains(t, err.Error(), c.want, name)
		}
	})
}
