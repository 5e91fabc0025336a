package checkpoint

import (
	"bytes"
	"encoding/binary"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func dtypeTensors(t *testing.T) *Dict {
	t.Helper()
	v, err := Read("testdata/dtypes.pt")
	require.NoError(t, err)
	d, err := GetDict(v)
	require.NoError(t, err)
	return d
}

// requireSameTensors is requireSameByName for dicts that must also list their names
// in the same order.
func requireSameTensors(t *testing.T, want, got *Dict) {
	t.Helper()
	require.Equal(t, want.Keys(), got.Keys())
	requireSameByName(t, want, got)
}

func TestSafetensorsRoundTrip(t *testing.T) {
	want := dtypeTensors(t)
	var buf bytes.Buffer
	require.NoError(t, WriteSafetensorsTo(&buf, want, map[string]string{"format": "pt"}))
	require.Zero(t, binary.LittleEndian.Uint64(buf.Bytes())%8, "data must start 8-byte aligned")
	got, meta, err := ReadSafetensorsFrom(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"format": "pt"}, meta)
	requireSameTensors(t, want, got)

	// Truncations and a header that claims too much are errors.
	b := buf.Bytes()
	for _, n := range []int{0, 7, 8, 100, len(b) - 1} {
		_, _, err := ReadSafetensorsFrom(bytes.NewReader(b[:n]), int64(n))
		require.Error(t, err)
	}
}

// TestSafetensorsPython: Go reads a safetensors file written by hand in Python, and
// Python reads the one Go writes (views written contiguously), exactly.
func TestSafetensorsPython(t *testing.T) {
	dir := t.TempDir()
	st := filepath.Join(dir, "py.safetensors")
	runInterop(t, "", "stgen", st)
	got, meta, err := ReadSafetensors(st)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"format": "pt"}, meta)
	requireSameTensors(t, dtypeTensors(t), got)

	views, err := Read("testdata/views.pt")
	require.NoError(t, err)
	vd, _ := GetDict(views)
	out := filepath.Join(dir, "go.safetensors")
	require.NoError(t, WriteSafetensors(out, vd, map[string]string{"format": "pt"}))
	runInterop(t, "", "stcheck", out, "testdata/views.pt")
}
