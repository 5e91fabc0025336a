package data

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recordingDataset records the indices Get is called with and fails on the ones in fail.
type recordingDataset struct {
	Dataset
	mu   sync.Mutex
	got  map[int]int
	fail map[int]bool
}

func record(ds Dataset) *recordingDataset { return &recordingDataset{Dataset: ds, got: map[int]int{}} }

func (d *recordingDataset) Get(i int, s *Sample) error {
	d.mu.Lock()
	d.got[i]++
	fail := d.fail[i]
	d.mu.Unlock()
	if fail {
		return fmt.Errorf("sample %d is unreadable", i)
	}
	return d.Dataset.Get(i, s)
}

// plainBatch is a host batch copied out of the loader's reused buffer.
type plainBatch struct {
	Index   int
	Indices []int
	Input   []float32
	Labels  []int64
}

func readHost(t *testing.T, l *Loader, epoch, start int) ([]plainBatch, error) {
	t.Helper()
	it := l.Iter(context.Background(), epoch, start)
	defer it.Close()
	out := []plainBatch{}
	for {
		hb, ok := it.nextHost()
		if !ok {
			return out, it.Err()
		}
		out = append(out, plainBatch{hb.index, slices.Clone(hb.indices),
			slices.Clone(Values[float32](hb.out.MustField(Input))), slices.Clone(Values[int64](hb.out.MustField(Label)))})
		l.putBuf(hb)
	}
}

func synthetic(t *testing.T, n int) *SyntheticDataset {
	ds, err := Synthetic(n, 10, []int64{1, 4, 4}, 7)
	require.NoError(t, err)
	return ds
}

var augment = Compose(RandomCrop{Height: 4, Width: 4, Padding: 1}, RandomHorizontalFlip{P: 0.5}, Normalize{Mean: []float32{0.5}, Std: []float32{2}})

func TestLoaderSameSeedSameBatchesAnyWorkers(t *testing.T) {
	ds := synthetic(t, 103)
	epochs := map[int][]plainBatch{}
	for _, workers := range []int{0, 1, 4} { // 0: Inline, no worker goroutines
		l, err := NewLoader(ds, LoaderOptions{BatchSize: 8, Shuffle: true, Workers: workers, Inline: workers == 0, Seed: 3, Transform: augment})
		require.NoError(t, err)
		require.Equal(t, 13, l.Len())
		for epoch := range 3 {
			got, err := readHost(t, l, epoch, 0)
			require.NoError(t, err)
			require.Len(t, got, 13)
			assert.Len(t, got[12].Labels, 103-12*8)
			if prev, ok := epochs[epoch]; ok {
				assert.Equal(t, prev, got, "epoch %d with %d workers", epoch, workers)
			}
			epochs[epoch] = got
		}
	}
	assert.NotEqual(t, epochs[0][0].Indices, epochs[1][0].Indices)
	assert.NotEqual(t, epochs[1][0].Indices, epochs[2][0].Indices)
}

func TestLoaderStartsAtBatchK(t *testing.T) {
	full, err := readHost(t, mustLoader(t, synthetic(t, 50), LoaderOptions{BatchSize: 4, Shuffle: true, Workers: 3, Seed: 11, Transform: augment}), 2, 0)
	require.NoError(t, err)
	for _, k := range []int{1, 5, 12, 13} {
		rec := record(synthetic(t, 50))
		l := mustLoader(t, rec, LoaderOptions{BatchSize: 4, Shuffle: true, Workers: 3, Inline: k == 5, Seed: 11, Transform: augment})
		got, err := readHost(t, l, 2, k)
		require.NoError(t, err)
		require.Equal(t, full[k:], got, "start %d", k)
		for _, b := range full[:k] {
			for _, i := range b.Indices {
				assert.Zero(t, rec.got[i], "start %d read sample %d of batch %d", k, i, b.Index)
			}
		}
	}
	_, err = readHost(t, mustLoader(t, synthetic(t, 50), LoaderOptions{BatchSize: 4}), 0, 14)
	assert.ErrorContains(t, err, "start batch 14 is outside an epoch of 13 batches")
}

func TestLoaderDropLastAndUnshuffledOrder(t *testing.T) {
	l := mustLoader(t, synthetic(t, 10), LoaderOptions{BatchSize: 4, DropLast: true, Workers: 2})
	require.Equal(t, 2, l.Len())
	got, err := readHost(t, l, 0, 0)
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, []int{4, 5, 6, 7}, got[1].Indices)
	assert.Equal(t, []int64{4, 5, 6, 7}, got[1].Labels)
}

func TestLoaderGetErrorStopsEpoch(t *testing.T) {
	for _, workers := range []int{0, 1, 4} { // 0: Inline
		rec := record(synthetic(t, 64))
		rec.fail = map[int]bool{21: true}
		l := mustLoader(t, rec, LoaderOptions{BatchSize: 4, Workers: workers, Inline: workers == 0, Prefetch: 2})
		got, err := readHost(t, l, 0, 0)
		require.Error(t, err)
		assert.ErrorContains(t, err, "batch 5: sample 21: sample 21 is unreadable")
		assert.Len(t, got, 5, "the batches before the failing one are delivered")
	}
}

type panicky struct{ Dataset }

func (panicky) Get(i int, s *Sample) error { panic("boom") }

func TestLoaderPanicBecomesError(t *testing.T) {
	_, err := readHost(t, mustLoader(t, panicky{synthetic(t, 8)}, LoaderOptions{BatchSize: 4, Workers: 2}), 0, 0)
	assert.ErrorContains(t, err, "panic in dataset, transform or collate: boom")
}

func mustLoader(t *testing.T, ds Dataset, o LoaderOptions) *Loader {
	t.Helper()
	l, err := NewLoader(ds, o)
	require.NoError(t, err)
	return l
}

// blocking blocks every Get until ctx ends.
type blocking struct {
	Dataset
	ctx context.Context
}

func (b blocking) Get(i int, s *Sample) error {
	<-b.ctx.Done()
	return b.ctx.Err()
}

// settledGoroutines waits for the goroutine count to drop to at most want and returns it.
func settledGoroutines(want int) int {
	n := runtime.NumGoroutine()
	for i := 0; i < 200 && n > want; i++ {
		time.Sleep(5 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	return n
}

func TestLoaderNoGoroutinesLeft(t *testing.T) {
	base := runtime.NumGoroutine()

	// Normal end, without Close.
	l := mustLoader(t, synthetic(t, 40), LoaderOptions{BatchSize: 4, Shuffle: true, Workers: 4})
	it := l.Iter(context.Background(), 0, 0)
	for hb, ok := it.nextHost(); ok; hb, ok = it.nextHost() {
		l.putBuf(hb)
	}
	require.NoError(t, it.Err())
	assert.LessOrEqual(t, settledGoroutines(base), base, "after a normal end")

	// Cancel while workers are blocked inside Get and the consumer waits in Next.
	ctx, cancel := context.WithCancel(context.Background())
	l = mustLoader(t, blocking{synthetic(t, 40), ctx}, LoaderOptions{BatchSize: 4, Workers: 4})
	it = l.Iter(ctx, 0, 0)
	time.AfterFunc(10*time.Millisecond, cancel)
	_, ok := it.nextHost()
	assert.False(t, ok)
	assert.True(t, errors.Is(it.Err(), context.Canceled))
	assert.LessOrEqual(t, settledGoroutines(base), base, "after cancel")

	// Close part-way, with workers blocked on full slots.
	l = mustLoader(t, synthetic(t, 400), LoaderOptions{BatchSize: 4, Workers: 4, Prefetch: 2})
	it = l.Iter(context.Background(), 0, 0)
	hb, ok := it.nextHost()
	require.True(t, ok)
	l.putBuf(hb)
	it.Close()
	assert.NoError(t, it.Err())
	assert.LessOrEqual(t, settledGoroutines(base), base, "after Close")
}

func TestLoaderRanksCoverTheEpoch(t *testing.T) {
	count := map[int]int{}
	for rank := range 2 {
		l := mustLoader(t, synthetic(t, 45), LoaderOptions{BatchSize: 4, Shuffle: true, Seed: 1, Rank: rank, WorldSize: 2, Workers: 2})
		require.Equal(t, 6, l.Len(), "23 samples per rank")
		got, err := readHost(t, l, 4, 0)
		require.NoError(t, err)
		for _, b := range got {
			for _, i := range b.Indices {
				count[i]++
			}
		}
	}
	require.Len(t, count, 45)
	dup := 0
	for _, c := range count {
		dup += c - 1
	}
	assert.Equal(t, 1, dup, "one sample repeats to pad 45 to 46")
}
