package checkpoint

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGetters(t *testing.T) {
	ck, err := Read("testdata/training_checkpoint.pt")
	require.NoError(t, err)

	ea, err := GetTensor(ck, "optimizer_state_dict", "state", 0, "exp_avg")
	require.NoError(t, err)
	require.Equal(t, Float32, ea.DType)
	require.Equal(t, []int64{8, 4}, ea.Shape)
	step, err := GetTensor(ck, "optimizer_state_dict", "state", 0, "step")
	require.NoError(t, err)
	require.Empty(t, step.Shape)
	require.Equal(t, []float64{2}, step.Float64s())

	epoch, err := GetInt(ck, "epoch")
	require.NoError(t, err)
	require.EqualValues(t, 3, epoch)
	lr, err := GetFloat(ck, "optimizer_state_dict", "param_groups", 0, "lr")
	require.NoError(t, err)
	require.Equal(t, 1e-3, lr)
	beta2, err := GetFloat(ck, "optimizer_state_dict", "param_groups", 0, "betas", -1)
	require.NoError(t, err)
	require.Equal(t, 0.999, beta2)
	name, err := GetString(ck, "model_config", "name")
	require.NoError(t, err)
	require.Equal(t, "run-é", name)
	sd, err := GetDict(ck, "model_state_dict")
	require.NoError(t, err)
	require.Equal(t, OrderedDict, sd.Kind)
	require.Equal(t, "0.weight", sd.Keys()[0])
	_, ok := sd.Attrs.Get("_metadata")
	require.True(t, ok)
	hist, err := GetList(ck, "history")
	require.NoError(t, err)
	require.Len(t, hist, 2)
	tk, err := GetString(ck, "keys", Tuple{1, "a"})
	require.NoError(t, err)
	require.Equal(t, "tuple key", tk)

	_, err = GetTensor(ck, "optimizer_state_dict", "state", 99, "exp_avg")
	require.EqualError(t, err, "checkpoint: optimizer_state_dict.state: key 99 not found")
	_, err = GetInt(ck, "best_metric")
	require.EqualError(t, err, "checkpoint: best_metric: is a float, not an int64")
	_, err = Get(ck, "history", 5)
	require.EqualError(t, err, "checkpoint: history: index 5 out of range (length 2)")
	_, err = Get(ck, "epoch", "x")
	require.EqualError(t, err, `checkpoint: epoch: cannot look up "x" in a int`)
}

func TestTensorViews(t *testing.T) {
	v, err := Read("testdata/views.pt")
	require.NoError(t, err)
	base, _ := GetTensor(v, "base")
	tr, _ := GetTensor(v, "t")
	col, _ := GetTensor(v, "col")
	same, _ := GetTensor(v, "same")
	require.Same(t, base, same)
	require.Same(t, base.Storage, tr.Storage)
	require.False(t, tr.IsContiguous())
	require.Equal(t, []float64{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}, tr.Float64s())
	require.Equal(t, []float64{2, 6, 10}, col.Float64s())
}

func TestDTypeValues(t *testing.T) {
	v, err := Read("testdata/dtypes.pt")
	require.NoError(t, err)
	i8, _ := GetTensor(v, "torch.int8")
	require.Equal(t, []float64{-128, 127, 0, 1, 7, -1}, i8.Float64s())
	u8, _ := GetTensor(v, "torch.uint8")
	require.Equal(t, []float64{0, 255, 0, 1, 7, 2}, u8.Float64s())
	b, _ := GetTensor(v, "torch.bool")
	require.Equal(t, []float64{1, 0, 0, 1}, b.Float64s())
	p, _ := GetTensor(v, "param")
	require.True(t, p.RequiresGrad)
	h := NewTensor(Float16, []int64{6}, []byte{0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b, 0x01, 0x00, 0x00, 0x7c, 0x00, 0x80})
	require.Equal(t, []float64{1, -2, 65504, math.Ldexp(1, -24), math.Inf(1), 0}, h.Float64s())
	bf := NewTensor(BFloat16, []int64{2}, []byte{0x80, 0x3f, 0x20, 0xc1})
	require.Equal(t, []float64{1, -10}, bf.Float64s())
}

// TestWrittenLayout checks the zip layout torch expects: one root folder, records in
// torch's order, stored, 64-byte aligned data, valid CRCs.
func TestWrittenLayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ck.pt")
	require.NoError(t, Write(path, goCheckpoint()))
	zr, err := zip.OpenReader(path)
	require.NoError(t, err)
	defer zr.Close()
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
		require.Equal(t, zip.Store, f.Method)
		off, err := f.DataOffset()
		require.NoError(t, err)
		require.Zero(t, off%64, f.Name)
		rc, err := f.Open()
		require.NoError(t, err)
		_, err = io.Copy(io.Discard, rc) // verifies the CRC
		require.NoError(t, err, f.Name)
	}
	require.Equal(t, "ck/data.pkl", names[0])
	require.Equal(t, "ck/byteorder", names[1])
	require.Equal(t, "ck/data/0", names[2])
	require.Equal(t, "ck/version", names[len(names)-1])
}

// TestForbiddenGlobal: a pickle that calls os.system is refused, naming the global,
// before anything is called.
func TestForbiddenGlobal(t *testing.T) {
	for _, tc := range []struct{ pkl, name string }{
		{"\x80\x02cos\nsystem\nX\x04\x00\x00\x00echoq\x00\x85R.", "os.system"},
		{"\x80\x02cposix\nsystem\nX\x04\x00\x00\x00echo\x85R.", "posix.system"},
		{"\x80\x02c__builtin__\neval\nX\x01\x00\x00\x001\x85R.", "builtins.eval"},
		{"\x80\x04\x8c\x08builtins\x8c\x04exec\x93.", "builtins.exec"},
		{"\x80\x02ctorch\nload\n.", "torch.load"},
	} {
		_, err := readRaw(t, tc.pkl, nil)
		require.ErrorContains(t, err, tc.name)
		var fg *ForbiddenGlobalError
		require.True(t, errors.As(err, &fg), "%v", err)
	}
}

// TestMaliciousTorchFile: torch.save of an object whose __reduce__ calls os.system.
func TestMaliciousTorchFile(t *testing.T) {
	_, err := Read("testdata/malicious.pt")
	var fg *ForbiddenGlobalError
	require.True(t, errors.As(err, &fg), "%v", err)
	require.Equal(t, "posix.system", fg.Module+"."+fg.Name)
	require.ErrorContains(t, err, "posix.system")
}

// TestTruncated: every prefix of a real file is an error, not a panic.
func TestTruncated(t *testing.T) {
	for _, name := range []string{"state_dict.pt", "legacy.pt"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		require.NoError(t, err)
		for n := 0; n < len(data); n++ {
			_, err := ReadFrom(bytes.NewReader(data[:n]), int64(n))
			require.Error(t, err, "%s[:%d]", name, n)
		}
	}
}

func TestStorageTooShort(t *testing.T) {
	tn := &Tensor{DType: Float32, Shape: []int64{4}, Strides: []int64{1}, Offset: 1,
		Storage: &Storage{DType: Float32, Data: make([]byte, 16)}}
	err := WriteTo(io.Discard, tn)
	require.ErrorContains(t, err, "needs 5 elements; storage has 4")
}

func TestCycleRefused(t *testing.T) {
	d := NewDict()
	d.Set("self", d)
	require.ErrorContains(t, WriteTo(io.Discard, d), "cycle")
	// A pickled list that contains itself.
	pkl := "\x80\x02]q\x00(h\x00e."
	_, err := newUnpickler([]byte(pkl), nil, nil).load()
	require.ErrorIs(t, err, errCycle)
}

func TestDict(t *testing.T) {
	d := NewDict()
	d.Set("b", 1)
	d.Set(2, "x")
	d.Set("a", 3)
	d.Set("b", 4)
	require.Equal(t, []any{"b", int64(2), "a"}, d.Keys())
	v, ok := d.Get(int64(2))
	require.True(t, ok)
	require.Equal(t, "x", v)
	d.Delete("b")
	require.Equal(t, []any{int64(2), "a"}, d.Keys())
	v, ok = d.Get("a")
	require.True(t, ok)
	require.Equal(t, 3, v)
	require.Panics(t, func() { d.Set([]any{}, 1) })
}

// TestDictLookup checks that Lookup finds what Get finds, by linear search and through
// the index of a larger dict, without allocating.
func TestDictLookup(t *testing.T) {
	for _, n := range []int{3, smallDict + 4} {
		d := NewDict()
		for i := range n {
			d.Set(fmt.Sprintf("k%d", i), float64(i))
		}
		d.Set(7, "int key")
		for i := range n {
			key := fmt.Sprintf("k%d", i)
			v, ok := d.Lookup(key)
			require.True(t, ok)
			g, _ := d.Get(key)
			require.Equal(t, g, v)
			require.Equal(t, float64(i), v)
		}
		_, ok := d.Lookup("7")
		require.False(t, ok, "the int key 7 is not the string \"7\"")
		_, ok = d.Lookup("missing")
		require.False(t, ok)
		key := fmt.Sprintf("k%d", 1) // not a constant, which the compiler boxes for free
		require.Zero(t, testing.AllocsPerRun(100, func() { _, _ = d.Lookup(key) }))
	}
	var nilDict *Dict
	_, ok := nilDict.Lookup("a")
	require.False(t, ok)
}

func TestUnsupportedStorage(t *testing.T) {
	_, err := newUnpickler([]byte("\x80\x02ctorch\nQInt8Storage\n."), nil, nil).load()
	require.ErrorContains(t, err, "unsupported tensor storage torch.QInt8Storage")
}

// readRaw reads a hand-made archive: data.pkl, the given data records, version.
func readRaw(t *testing.T, pkl string, records map[string][]byte) (any, error) {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	add := func(name string, data []byte) {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: "archive/" + name, Method: zip.Store})
		require.NoError(t, err)
		_, err = w.Write(data)
		require.NoError(t, err)
	}
	add("data.pkl", []byte(pkl))
	for k, v := range records {
		add("data/"+k, v)
	}
	add("version", []byte("3\n"))
	require.NoError(t, zw.Close())
	return ReadFrom(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
}

// tensorPickle is a pickle of one float32 tensor with the given storage numel (as an
// 8-byte LONG1) and size.
func tensorPickle(numel, size uint64) string {
	le := func(v uint64) string {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], v)
		return string(b[:])
	}
	return "\x80\x02ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\n" +
		"X\x01\x00\x00\x000X\x03\x00\x00\x00cpu\x8a\x08" + le(numel) + "tQK\x00\x8a\x08" + le(size) +
		"\x85K\x01\x85\x89}tR."
}

// TestAbsurdSizes: sizes claimed by the pickle are checked against the records before
// anything is allocated.
func TestAbsurdSizes(t *testing.T) {
	rec := map[string][]byte{"0": make([]byte, 8)}
	v, err := readRaw(t, tensorPickle(2, 2), rec)
	require.NoError(t, err)
	require.Equal(t, []float64{0, 0}, v.(*Tensor).Float64s())

	_, err = readRaw(t, tensorPickle(1<<60, 2), rec)
	require.ErrorContains(t, err, "storage data/0 holds 8 bytes")
	_, err = readRaw(t, tensorPickle(1<<62, 2), rec)
	require.ErrorContains(t, err, "storage data/0 holds 8 bytes")
	_, err = readRaw(t, tensorPickle(2, 1<<60), rec)
	require.ErrorContains(t, err, "storage has 2")
	_, err = readRaw(t, tensorPickle(2, 3), rec)
	require.ErrorContains(t, err, "needs 3 elements; storage has 2")
	_, err = readRaw(t, tensorPickle(2, 2), nil)
	require.ErrorContains(t, err, "storage record data/0 is missing")
	// A string that claims 4 GiB.
	_, err = readRaw(t, "\x80\x02X\xff\xff\xff\xffabc.", nil)
	require.ErrorContains(t, err, "truncated")
}

// TestNewDTypesRoundTrip: tensors of the dtypes torch pickles with _rebuild_tensor_v3
// (and complex ones, with their storage classes) and torch dtype objects as values come
// back from Write as they went in; safetensors refuses complex tensors by name.
func TestNewDTypesRoundTrip(t *testing.T) {
	d := NewDict()
	d.Set("u16", NewTensor(Uint16, []int64{2}, []byte{1, 0, 0xff, 0xff}))
	d.Set("u64", NewTensor(Uint64, []int64{1}, []byte{0, 0, 0, 0, 0, 0, 0, 0x80}))
	d.Set("f8", NewTensor(Float8E4M3FN, []int64{3}, []byte{0x38, 0xc0, 0x7f}))
	d.Set("e5m2", NewTensor(Float8E5M2, []int64{2}, []byte{0x7c, 0x3c}))
	d.Set("c64", NewTensor(Complex64, []int64{1}, f32s(1.5, -2)))
	d.Set("dtype", Float16)
	path := filepath.Join(t.TempDir(), "new.pt")
	require.NoError(t, Write(path, d))
	v, err := Read(path)
	require.NoError(t, err)
	for _, k := range []string{"u16", "u64", "f8", "e5m2", "c64"} {
		want, _ := d.Get(k)
		got, err := GetTensor(v, k)
		require.NoError(t, err, k)
		require.Equal(t, want.(*Tensor).DType, got.DType, k)
		require.Equal(t, want.(*Tensor).Storage.Data, got.Storage.Data, k)
	}
	dt, err := Get(v, "dtype")
	require.NoError(t, err)
	require.Equal(t, Float16, dt)
	f8, _ := GetTensor(v, "f8")
	require.Equal(t, 1.0, f8.Float64s()[0])
	require.Equal(t, -2.0, f8.Float64s()[1])
	require.True(t, math.IsNaN(f8.Float64s()[2]))
	e5, _ := GetTensor(v, "e5m2")
	require.True(t, math.IsInf(e5.Float64s()[0], 1))
	require.Equal(t, 1.0, e5.Float64s()[1])
	c, _ := GetTensor(v, "c64")
	require.Equal(t, []complex128{complex(1.5, -2)}, c.Complex128s())
	u, _ := GetTensor(v, "u64")
	require.Equal(t, float64(1<<63), u.Float64s()[0])

	st := NewDict()
	st.Set("c", NewTensor(Complex64, []int64{1}, f32s(1, 2)))
	err = WriteSafetensors(filepath.Join(t.TempDir(), "c.safetensors"), st, nil)
	require.ErrorContains(t, err, "the format has no complex64 dtype")
}
