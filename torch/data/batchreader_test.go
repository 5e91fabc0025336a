package data

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
)

// samplesOnly hides a dataset's ReadBatch, so the loader takes the per-sample path.
type samplesOnly struct{ Dataset }

// TestReadBatchEqualsSamples: a TensorDataset read whole batches at a time (a view of
// its slices for an unshuffled epoch, a gather for a shuffled one) gives the batches the
// per-sample path gives, the short last batch included, and the dataset's own memory is
// never written, also when the loader's buffers are reused.
func TestReadBatchEqualsSamples(t *testing.T) {
	const n = 37
	in := make([]float32, n*2*3)
	for i := range in {
		in[i] = float32(i) * 0.5
	}
	labels := make([]int64, n)
	for i := range labels {
		labels[i] = int64(i % 5)
	}
	ds, err := NewTensorDataset(in, []int64{2, 3}, labels, nil, nil)
	require.NoError(t, err)
	keep, keepLabels := slices.Clone(in), slices.Clone(labels)
	for _, shuffle := range []bool{false, true} {
		for _, workers := range []int{0, 2} {
			o := LoaderOptions{BatchSize: 8, Shuffle: shuffle, Seed: 3, Workers: workers, Inline: workers == 0}
			for epoch := range 2 {
				want, err := readHost(t, mustLoader(t, samplesOnly{ds}, o), epoch, 0)
				require.NoError(t, err)
				got, err := readHost(t, mustLoader(t, ds, o), epoch, 0)
				require.NoError(t, err)
				require.Len(t, got, 5)
				assert.Equal(t, want, got, "shuffle %v workers %d epoch %d", shuffle, workers, epoch)
			}
		}
	}
	assert.Equal(t, keep, in, "the dataset's inputs are never written")
	assert.Equal(t, keepLabels, labels, "the dataset's labels are never written")
}

// TestReadBatchTargetsAndErrors: a regression TensorDataset's batches carry Target, and
// an index outside the dataset is an error naming it.
func TestReadBatchTargetsAndErrors(t *testing.T) {
	ds, err := NewTensorDataset([]float32{1, 2, 3, 4}, []int64{2}, nil, []float32{5, 6}, []int64{1})
	require.NoError(t, err)
	var s Sample
	require.NoError(t, ds.ReadBatch([]int{1, 0}, &s))
	assert.Equal(t, []float32{3, 4, 1, 2}, Values[float32](s.MustField(Input)))
	assert.Equal(t, []int64{2, 2}, s.MustField(Input).Shape)
	assert.Equal(t, []float32{6, 5}, Values[float32](s.MustField(Target)))
	s.Reset()
	require.NoError(t, ds.ReadBatch([]int{0, 1}, &s))
	assert.Equal(t, []float32{1, 2, 3, 4}, Values[float32](s.MustField(Input)))
	// Setting a borrowed field again writes fresh storage, not the dataset.
	copy(SetValues[float32](&s, Input, 2, 2), []float32{9, 9, 9, 9})
	assert.Equal(t, []float32{1, 2, 3, 4}, ds.Inputs)
	s.Reset()
	assert.ErrorContains(t, ds.ReadBatch([]int{0, 2}, &s), "index 2 out of range [0, 2)")
}

// countingDataset is 23 samples of 3 inputs counting from 0, with labels i*7%10.
func countingDataset(t *testing.T) *TensorDataset {
	ds, err := NewTensorDataset(make([]float32, 23*3), []int64{3}, make([]int64, 23), nil, nil)
	require.NoError(t, err)
	for i := range ds.Inputs {
		ds.Inputs[i] = float32(i)
	}
	for i := range ds.Labels {
		ds.Labels[i] = int64(i * 7 % 10)
	}
	return ds
}

// TestResidentEqualsHost: a Resident loader's batches (views of the stored dataset, or
// gathers for a shuffled epoch) hold what the host path's batches hold, in the same
// order, for every epoch and from a mid-epoch start; Free lets a later epoch load again.
func TestResidentEqualsHost(t *testing.T) {
	ds := countingDataset(t)
	read := func(l *Loader, epoch, start int) (out []plainBatch) {
		torch.WithScope(func() {
			it := l.Iter(context.Background(), epoch, start)
			defer it.Close()
			for b, ok := it.Next(); ok; b, ok = it.Next() {
				out = append(out, plainBatch{b.Index, slices.Clone(b.Indices), b.Get(Input).Float32s(), b.Get(Label).Int64s()})
			}
			require.NoError(t, it.Err())
		})
		return out
	}
	for _, o := range []LoaderOptions{{BatchSize: 5}, {BatchSize: 5, Shuffle: true, Seed: 9}, {BatchSize: 4, Shuffle: true, DropLast: true}} {
		host := mustLoader(t, ds, LoaderOptions{BatchSize: o.BatchSize, Shuffle: o.Shuffle, Seed: o.Seed, DropLast: o.DropLast, Inline: true})
		o.Resident = true
		res := mustLoader(t, ds, o)
		for epoch := range 2 {
			assert.Equal(t, read(host, epoch, 0), read(res, epoch, 0), "%+v epoch %d", o, epoch)
			assert.Equal(t, read(host, epoch, 2), read(res, epoch, 2), "%+v epoch %d from batch 2", o, epoch)
		}
		res.Free()
		assert.Equal(t, read(host, 1, 0), read(res, 1, 0), "after Free")
		res.Free()
	}
	_, err := NewLoader(samplesOnly{ds}, LoaderOptions{Resident: true})
	assert.ErrorContains(t, err, "BatchReader")
	_, err = NewLoader(ds, LoaderOptions{Resident: true, Transform: augment})
	assert.ErrorContains(t, err, "Transform")
}

// TestNextRunEqualsNext: the runs NextRun hands out name the rows Next's whole batches
// hold (by row for an unshuffled epoch, through the epoch's order for a shuffled one),
// from any start batch, in runs of any length, and leave a shorter last batch to Next;
// a loader that is not Resident, or has OnDevice, hands out none.
func TestNextRunEqualsNext(t *testing.T) {
	ds := countingDataset(t)
	for _, o := range []LoaderOptions{{BatchSize: 5}, {BatchSize: 5, Shuffle: true, Seed: 9}, {BatchSize: 4, Shuffle: true, DropLast: true}} {
		o.Resident = true
		l := mustLoader(t, ds, o)
		for _, n := range []int{1, 2, 10} {
			for _, start := range []int{0, 2} {
				var want, got []plainBatch
				torch.WithScope(func() {
					it := l.Iter(context.Background(), 1, start)
					defer it.Close()
					for b, ok := it.Next(); ok; b, ok = it.Next() {
						want = append(want, plainBatch{b.Index, nil, b.Get(Input).Float32s(), b.Get(Label).Int64s()})
					}
					it = l.Iter(context.Background(), 1, start)
					defer it.Close()
					require.True(t, it.Runs(Input, Label))
					var b torch.BatchRun
					fields := []string{Input, Label}
					for first, ok := it.NextRun(n, fields, &b); ok; first, ok = it.NextRun(n, fields, &b) {
						require.LessOrEqual(t, len(b.Starts), n)
						x, y := b.Fields[0], b.Fields[1]
						for i := range b.Starts {
							xb, yb := x.Narrow(0, b.Starts[i], b.Sizes[i]), y.Narrow(0, b.Starts[i], b.Sizes[i])
							if b.Order != nil {
								idx := b.Order.Narrow(0, b.Starts[i], b.Sizes[i])
								xb, yb = x.IndexSelect(0, idx), y.IndexSelect(0, idx)
							}
							got = append(got, plainBatch{first + i, nil, xb.Float32s(), yb.Int64s()})
						}
					}
					for b, ok := it.Next(); ok; b, ok = it.Next() { // the short last batch
						got = append(got, plainBatch{b.Index, nil, b.Get(Input).Float32s(), b.Get(Label).Int64s()})
					}
					require.NoError(t, it.Err())
				})
				assert.Equal(t, want, got, "%+v n=%d start=%d", o, n, start)
			}
		}
		l.Free()
	}
	torch.WithScope(func() {
		host := mustLoader(t, ds, LoaderOptions{BatchSize: 5, Inline: true})
		it := host.Iter(context.Background(), 0, 0)
		defer it.Close()
		var b torch.BatchRun
		assert.False(t, it.Runs(Input, Label))
		_, ok := it.NextRun(2, []string{Input, Label}, &b)
		assert.False(t, ok)
		hooked := mustLoader(t, ds, LoaderOptions{BatchSize: 5, Resident: true, OnDevice: func(*Batch) {}})
		it = hooked.Iter(context.Background(), 0, 0)
		defer it.Close()
		defer hooked.Free()
		assert.False(t, it.Runs(Input, Label))
		res := mustLoader(t, ds, LoaderOptions{BatchSize: 5, Resident: true})
		it = res.Iter(context.Background(), 0, 0)
		defer it.Close()
		assert.False(t, it.Runs(Input, "no such field"))
		defer res.Free()
	})
}
