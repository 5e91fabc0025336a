package checkpoint

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testsupport"
)

// specsOf is the specs of a dict's tensors, in its order.
func specsOf(t *testing.T, d *Dict) []TensorSpec {
	t.Helper()
	var specs []TensorSpec
	for k, v := range d.All() {
		name, tt, err := stTensorOf(k, v)
		require.NoError(t, err)
		specs = append(specs, TensorSpec{Name: name, DType: tt.DType, Shape: tt.Shape})
	}
	return specs
}

// TestSafetensorsDirWriterEqualsWriteSafetensorsDir: written a tensor at a time, the
// weights are the files WriteSafetensorsDir writes, byte for byte, for every shard plan
// of TestShardPlan (a tensor larger than the limit in a shard of its own, written before
// the shard being filled is finished) and one file; the tensor being written is all the
// writer takes (Write returns once its bytes are in the file: the test overwrites each
// tensor's bytes after its Write).
func TestSafetensorsDirWriterEqualsWriteSafetensorsDir(t *testing.T) {
	for _, tc := range []struct {
		sizes []int
		max   int64
	}{
		{[]int{24, 24, 8, 24, 8, 8}, 40},
		{[]int{8, 80, 8, 8}, 40},
		{[]int{8, 80, 36, 80}, 40},
		{[]int{8, 80, 8}, 0},
		{nil, 40},
	} {
		want, got := t.TempDir(), t.TempDir()
		d := sizedTensors(tc.sizes...)
		meta := map[string]string{"note": "x"}
		require.NoError(t, WriteSafetensorsDir(want, ModelWeights, d, meta, tc.max))
		w, err := NewSafetensorsDirWriter(got, "", specsOf(t, d), meta, tc.max)
		require.NoError(t, err)
		for k, v := range d.All() {
			tt := *v.(*Tensor)
			data := bytes.Clone(tt.Storage.Data)
			tt.Storage = &Storage{DType: tt.DType, Data: data}
			require.NoError(t, w.Write(k.(string), &tt))
			for i := range data {
				data[i] = 0xff // written already: the file must not change
			}
		}
		require.NoError(t, w.Close())
		require.Equal(t, testsupport.DirFiles(t, want), testsupport.DirFiles(t, got), "%v / %d", tc.sizes, tc.max)
	}
}

// TestSafetensorsDirWriterRefusals: a tensor out of order, of another shape, one too
// many or missing at Close, and Abort, each leave the directory as it was (an earlier
// save's files, no temporary file), with an error naming the tensor.
func TestSafetensorsDirWriterRefusals(t *testing.T) {
	dir := t.TempDir()
	d := sizedTensors(24, 24, 8)
	require.NoError(t, WriteSafetensorsDir(dir, "", sizedTensors(4), nil, 0))
	before := testsupport.DirFiles(t, dir)
	specs := specsOf(t, d)
	tensor := func(k string) *Tensor { v, _ := d.Get(k); return v.(*Tensor) }
	for _, tc := range []struct {
		name string
		run  func(w *SafetensorsDirWriter) error
		want string
	}{
		{"order", func(w *SafetensorsDirWriter) error { return w.Write("t1", tensor("t1")) }, `tensor "t1" written where "t0" was announced`},
		{"shape", func(w *SafetensorsDirWriter) error {
			require.NoError(t, w.Write("t0", tensor("t0")))
			return w.Write("t1", tensor("t2"))
		}, "announced as"},
		{"missing", func(w *SafetensorsDirWriter) error {
			require.NoError(t, w.Write("t0", tensor("t0")))
			require.NoError(t, w.Write("t1", tensor("t1")))
			return w.Close()
		}, `closed after 2 of the 3 tensors announced ("t2" is next)`},
		{"extra", func(w *SafetensorsDirWriter) error {
			for _, k := range []string{"t0", "t1", "t2"} {
				require.NoError(t, w.Write(k, tensor(k)))
			}
			return w.Write("t3", tensor("t2"))
		}, "one more than the 3 announced"},
		{"abort", func(w *SafetensorsDirWriter) error {
			require.NoError(t, w.Write("t0", tensor("t0")))
			w.Abort()
			return w.Close()
		}, "aborted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := NewSafetensorsDirWriter(dir, "", specs, nil, 40)
			require.NoError(t, err)
			err = tc.run(w)
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, before, testsupport.DirFiles(t, dir))
			require.ErrorContains(t, w.Close(), tc.want, "the error sticks")
		})
	}
	_, err := NewSafetensorsDirWriter(dir, "", []TensorSpec{{Name: "a", DType: Float32}, {Name: "a", DType: Float32}}, nil, 0)
	require.ErrorContains(t, err, `tensor "a" is named twice`)
	_, err = NewSafetensorsDirWriter(dir, "", []TensorSpec{{Name: "__metadata__", DType: Float32}}, nil, 0)
	require.ErrorContains(t, err, "cannot be named")
	for name := range testsupport.DirFiles(t, dir) {
		require.False(t, strings.Contains(name, ".tmp"), name)
	}
}
