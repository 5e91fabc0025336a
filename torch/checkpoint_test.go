package torch_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch"
)

func TestCheckpointBridgeRoundTripsThroughPython(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "go.pt")
	out := filepath.Join(dir, "py.pt")
	torch.WithScope(func() {
		sd := checkpoint.NewOrderedDict()
		sd.Set("w", torch.Arange(0, 6, 1, torch.Float32, torch.CPU).Reshape(2, 3))
		sd.Set("wt", torch.Arange(0, 6, 1, torch.Float64, torch.CPU).Reshape(2, 3).T())
		sd.Set("n", torch.FromSlice([]int64{7}).Reshape())
		root := checkpoint.NewDict()
		root.Set("model", sd)
		root.Set("epoch", int64(3))
		cv, err := torch.ToCheckpoint(root)
		require.NoError(t, err)
		require.NoError(t, checkpoint.Write(in, cv))
	})
	testpy.Run(t, `
import sys, torch
d = torch.load(sys.argv[1])
m = d["model"]
assert m["w"].tolist() == [[0, 1, 2], [3, 4, 5]], m["w"]
assert m["wt"].dtype == torch.float64 and m["wt"].tolist() == [[0, 3], [1, 4], [2, 5]]
assert m["n"].dim() == 0 and m["n"].item() == 7
assert d["epoch"] == 3
base = torch.arange(12.).reshape(3, 4)
torch.save({"view": base[1:, ::2], "half": torch.ones(2, dtype=torch.bfloat16)}, sys.argv[2])
`, []string{"torch"}, in, out)
	v, err := checkpoint.Read(out)
	require.NoError(t, err)
	torch.WithScope(func() {
		tv, err := torch.FromCheckpoint(v, torch.CPU)
		require.NoError(t, err)
		d := tv.(*checkpoint.Dict)
		view, _ := d.Get("view")
		assert.Equal(t, []float32{4, 6, 8, 10}, view.(*torch.Tensor).Float32s())
		assert.Equal(t, []int64{2, 2}, view.(*torch.Tensor).Shape())
		half, _ := d.Get("half")
		assert.Equal(t, torch.BFloat16, half.(*torch.Tensor).DType())
	})
}
