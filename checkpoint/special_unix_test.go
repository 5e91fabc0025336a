//go:build unix

package checkpoint

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testsupport"
)

// TestSpecialFiles: a FIFO (which would block the open until a writer came), a device
// that never ends and a directory are refused by name before anything is read, by
// every reader that takes a path.
func TestSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := testsupport.FIFO(t, dir, "fifo.pt")
	for _, path := range []string{fifo, "/dev/zero", dir} {
		_, err := Read(path)
		require.ErrorContains(t, err, path+" is ")
		require.ErrorContains(t, err, ", not a regular file")
		_, _, err = ReadSafetensors(path)
		require.ErrorContains(t, err, path+" is ")
		require.ErrorContains(t, err, ", not a regular file")
		_, _, m, err := ReadOptions{}.MapSafetensors(path)
		require.ErrorContains(t, err, path+" is ")
		require.ErrorContains(t, err, ", not a regular file")
		require.Nil(t, m)
	}
	// A shard or an index that is a FIFO.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(`{"weight_map":{"a":"fifo.pt"}}`), 0o644))
	_, _, err := ReadSafetensorsDir(dir, "")
	require.ErrorContains(t, err, fifo+" is a named pipe (FIFO), not a regular file")
	_, _, _, err = ReadOptions{}.MapSafetensorsDir(dir, "")
	require.ErrorContains(t, err, fifo+" is a named pipe (FIFO), not a regular file")
	sub := filepath.Join(dir, "sub")
	require.NoError(t, os.Mkdir(sub, 0o755))
	testsupport.FIFO(t, sub, "model.safetensors.index.json")
	_, _, err = ReadSafetensorsDir(sub, "")
	require.ErrorContains(t, err, "model.safetensors.index.json is a named pipe (FIFO), not a regular file")
}

// TestMapSafetensors: a mapped read returns the tensors and metadata a read into Go
// memory does, single file and sharded, with the bytes outside Go's heap (the heap
// grows by far less than the data); it refuses what the read refuses, with the same
// error (a gap between tensors, a budget); Close empties the tensors' storages.
func TestMapSafetensors(t *testing.T) {
	dir := t.TempDir()
	want := NewDict()
	for i := range 4 {
		data := make([]byte, 1<<20)
		for j := range data {
			data[j] = byte(i + j*3)
		}
		want.Set(fmt.Sprintf("t%d", i), NewTensor(Float32, []int64{1 << 18}, data))
	}
	want.Set("empty", NewTensor(Float32, []int64{0}, nil))
	require.NoError(t, WriteSafetensorsDir(dir, "", want, map[string]string{"k": "v"}, 0))
	sharded := filepath.Join(dir, "sharded")
	require.NoError(t, WriteSafetensorsDir(sharded, "", want, map[string]string{"k": "v"}, 1<<20))
	for _, d := range []string{dir, sharded} {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		got, meta, m, err := ReadOptions{}.MapSafetensorsDir(d, "")
		runtime.ReadMemStats(&after)
		require.NoError(t, err)
		require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "%s: the data was read into Go's heap", d)
		require.Equal(t, map[string]string{"k": "v", "format": "pt"}, meta)
		requireSameByName(t, want, got)
		require.NoError(t, m.Close())
		require.NoError(t, m.Close(), "a second Close does nothing")
		v, _ := got.Get("t0")
		require.Nil(t, v.(*Tensor).Storage.Data, "Close empties the storages")
	}

	// What the read refuses, the mapped read refuses with the same error.
	path := filepath.Join(dir, "model.safetensors")
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	n := binary.LittleEndian.Uint64(raw[:8])
	gap := filepath.Join(t.TempDir(), "gap.safetensors")
	header := strings.Replace(string(raw[8:8+n]), `"data_offsets":[0,`, `"data_offsets":[4,`, 1)
	require.NotEqual(t, string(raw[8:8+n]), header)
	require.NoError(t, os.WriteFile(gap, append(append(binary.LittleEndian.AppendUint64(nil, uint64(len(header))), header...), raw[8+n:]...), 0o644))
	for _, o := range []struct {
		path string
		opt  ReadOptions
	}{{gap, ReadOptions{}}, {path, ReadOptions{MaxHeaderEntries: 2}}, {path, ReadOptions{MaxWork: 10}}} {
		_, _, rerr := o.opt.ReadSafetensors(o.path)
		require.Error(t, rerr)
		_, _, m, merr := o.opt.MapSafetensors(o.path)
		require.Nil(t, m)
		require.EqualError(t, merr, rerr.Error())
	}
}
