package data

import (
	"context"
	"testing"

	"github.com/gotrain/gotrain/torch"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readTensors reads an epoch through Next and copies each batch out of its tensors.
func readTensors(t *testing.T, l *Loader, epoch, start int) []plainBatch {
	t.Helper()
	live := torch.LiveTensors()
	it := l.Iter(context.Background(), epoch, start)
	defer it.Close()
	out := []plainBatch{}
	for {
		scope := torch.NewScope()
		b, ok := it.Next()
		if ok {
			require.Equal(t, int64(b.Size), b.Get(Input).Shape()[0])
			out = append(out, plainBatch{b.Index, append([]int{}, b.Indices...), b.Get(Input).Float32s(), b.Get(Label).Int64s()})
		}
		scope.Close()
		if !ok {
			break
		}
	}
	require.NoError(t, it.Err())
	require.Equal(t, live, torch.LiveTensors(), "every batch tensor is freed with its scope")
	return out
}

func TestNextMatchesHostBatches(t *testing.T) {
	opts := LoaderOptions{BatchSize: 8, Shuffle: true, Seed: 5, Transform: augment, Device: torch.CPU}
	for _, workers := range []int{1, 4} {
		opts.Workers = workers
		for epoch := range 3 {
			want, err := readHost(t, mustLoader(t, synthetic(t, 45), opts), epoch, 0)
			require.NoError(t, err)
			got := readTensors(t, mustLoader(t, synthetic(t, 45), opts), epoch, 0)
			require.Equal(t, want, got, "workers %d epoch %d", workers, epoch)
		}
	}
	a := readTensors(t, mustLoader(t, synthetic(t, 45), opts), 0, 0)
	b := readTensors(t, mustLoader(t, synthetic(t, 45), opts), 1, 0)
	assert.NotEqual(t, a[0].Indices, b[0].Indices)
	assert.NotEqual(t, a[0].Input, b[0].Input)
}

func TestNextShapesAndFloatTargets(t *testing.T) {
	ds, err := NewTensorDataset([]float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, []int64{2}, nil, []float32{10, 11, 12, 13, 14}, []int64{1})
	require.NoError(t, err)
	l := mustLoader(t, ds, LoaderOptions{BatchSize: 2, Workers: 2, Device: torch.CPU})
	scope := torch.NewScope()
	defer scope.Close()
	it := l.Iter(context.Background(), 0, 0)
	defer it.Close()
	var inputs, targets []float32
	for b, ok := it.Next(); ok; b, ok = it.Next() {
		assert.Equal(t, []string{Input, Target}, b.Names())
		assert.Equal(t, []int64{int64(b.Size), 2}, b.Get(Input).Shape())
		assert.Equal(t, []int64{int64(b.Size), 1}, b.Get(Target).Shape())
		inputs = append(inputs, b.Get(Input).Float32s()...)
		targets = append(targets, b.Get(Target).Float32s()...)
	}
	require.NoError(t, it.Err())
	assert.Equal(t, ds.Inputs, inputs)
	assert.Equal(t, ds.Targets, targets)
}
