package checkpoint

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLayout: a layout that cuts "w" [2, 2, 3] into its two [2, 3] halves and renames
// "r" gives the files' specs in order, splits the data at the parts' offsets, keeps the
// other tensors and values as they are, and refuses a part outside its tensor.
func TestLayout(t *testing.T) {
	data := make([]byte, 12*4)
	for i := range data {
		data[i] = byte(i)
	}
	w := NewTensor(Float32, []int64{2, 2, 3}, data)
	r := NewTensor(Float32, []int64{3}, data[:12])
	k := NewTensor(Float32, []int64{1}, data[:4])
	var l Layout = func(s TensorSpec) []Part {
		switch s.Name {
		case "w":
			half := TensorSpec{DType: s.DType, Shape: []int64{2, 3}}
			a, b := half, half
			a.Name, b.Name = "w.0", "w.1"
			return []Part{{a, 0}, {b, 24}}
		case "r":
			return []Part{{TensorSpec{Name: "router", DType: s.DType, Shape: s.Shape}, 0}}
		case "bad":
			return []Part{{TensorSpec{Name: "bad.0", DType: s.DType, Shape: []int64{4}}, 8}}
		}
		return nil
	}
	specs := l.Specs([]TensorSpec{{"w", Float32, w.Shape}, {"k", Float32, k.Shape}, {"r", Float32, r.Shape}})
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	assert.Equal(t, []string{"w.0", "w.1", "k", "router"}, names)
	assert.Equal(t, []int64{2, 3}, specs[1].Shape)

	d := NewDict()
	d.Set("w", w)
	d.Set("k", k)
	d.Set("r", r)
	d.Set("step", int64(3))
	out, err := l.Apply(d)
	require.NoError(t, err)
	var keys []any
	for key, v := range out.All() {
		keys = append(keys, key)
		if key == "w.1" {
			raw, err := v.(*Tensor).ReadBytes()
			require.NoError(t, err)
			assert.Equal(t, data[24:], raw)
		}
	}
	assert.Equal(t, []any{"w.0", "w.1", "k", "router", "step"}, keys)
	kept, _ := out.Get("k")
	assert.Same(t, k, kept)
	assert.Equal(t, specs, Layout(nil).Specs(specs))

	err = l.Split("bad", NewTensor(Float32, []int64{4}, data[:16]), func(string, *Tensor) error { return nil })
	require.Error(t, err)
	assert.Contains(t, err.Error(), "part bad.0 takes bytes [8, 24) of 16")
}
