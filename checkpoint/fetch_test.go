package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// fetchFile is a state dict of n float32 tensors of distinct contents, written by WriteTo.
func fetchFile(t *testing.T, n, numel int) []byte {
	t.Helper()
	sd := NewOrderedDict()
	for i := range n {
		data := make([]byte, 4*numel)
		for j := range data {
			data[j] = byte(i*7 + j)
		}
		sd.Set(fmt.Sprintf("w%d", i), NewTensor(Float32, []int64{int64(numel)}, data))
	}
	var buf bytes.Buffer
	require.NoError(t, WriteTo(&buf, sd))
	return buf.Bytes()
}

// watchedReader counts the ReadAt calls in flight, and fails (or panics) on reads of
// exactly bad bytes, the storage records' reads.
type watchedReader struct {
	b                 []byte
	bad               int
	panics            bool
	inFlight, maxSeen atomic.Int64
}

func (w *watchedReader) ReadAt(p []byte, off int64) (int, error) {
	n := w.inFlight.Add(1)
	defer w.inFlight.Add(-1)
	for {
		m := w.maxSeen.Load()
		if n <= m || w.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	if w.bad > 0 && len(p) == w.bad {
		if w.panics {
			panic("disk on fire")
		}
		return 0, errors.New("disk on fire")
	}
	return bytes.NewReader(w.b).ReadAt(p, off)
}

// TestReadStoragesConcurrently reads many storages (in parallel where the machine has
// several cores) and checks every byte lands in its own tensor.
func TestReadStoragesConcurrently(t *testing.T) {
	const n, numel = 40, 3000
	file := fetchFile(t, n, numel)
	r := &watchedReader{b: file}
	v, err := ReadFrom(r, int64(len(file)))
	require.NoError(t, err)
	require.Zero(t, r.inFlight.Load(), "a read still in flight after ReadFrom returned")
	requireFetched(t, v, n, numel)
	// From a file, whose reads fill buffers that are not cleared first.
	path := filepath.Join(t.TempDir(), "sd.pt")
	require.NoError(t, os.WriteFile(path, file, 0o600))
	v, err = Read(path)
	require.NoError(t, err)
	requireFetched(t, v, n, numel)
}

// requireFetched checks v is fetchFile's state dict of n tensors of numel elements.
func requireFetched(t *testing.T, v any, n, numel int) {
	t.Helper()
	d, err := GetDict(v)
	require.NoError(t, err)
	require.Equal(t, n, d.Len())
	for i := range n {
		tn, err := GetTensor(v, fmt.Sprintf("w%d", i))
		require.NoError(t, err)
		require.Len(t, tn.Storage.Data, 4*numel)
		for j, c := range tn.Storage.Data {
			if c != byte(i*7+j) {
				require.Failf(t, "wrong byte", "tensor %d byte %d: %d", i, j, c)
			}
		}
	}
}

// TestReadStorageFailure checks a failed or panicking storage read is an error naming the
// record, returned only once no read is in flight.
func TestReadStorageFailure(t *testing.T) {
	file := fetchFile(t, 12, 5000)
	for _, panics := range []bool{false, true} {
		r := &watchedReader{b: file, bad: 4 * 5000, panics: panics}
		v, err := ReadFrom(r, int64(len(file)))
		require.Nil(t, v)
		require.ErrorContains(t, err, "data/")
		require.ErrorContains(t, err, "disk on fire")
		require.Zero(t, r.inFlight.Load(), "a read still in flight after ReadFrom returned")
	}
}

// TestMakeNoZero checks makeNoZero's buffers have the length asked for and are separate
// allocations.
func TestMakeNoZero(t *testing.T) {
	require.NotNil(t, makeNoZero(0))
	require.Empty(t, makeNoZero(0))
	a, b := makeNoZero(1<<20+3), makeNoZero(1<<20+3)
	require.Len(t, a, 1<<20+3)
	for i := range a {
		a[i], b[i] = 1, 2
	}
	require.Equal(t, bytes.Repeat([]byte{1}, len(a)), a)
	require.Equal(t, bytes.Repeat([]byte{2}, len(b)), b)
}
