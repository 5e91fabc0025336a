package models_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
)

// TestLoadPeakMemory is issue 42's loading bound: LoadPretrained holds at most the
// model's tensors plus its largest tensor (the one being copied from the checkpoint)
// and 64 KiB, in the CPU tensors the counting allocator sees; the checkpoint's bytes
// are Go memory read shard by shard. The model is built without drawing its
// parameters at random (nn.SkipInit), and the weights it ends with are the file's.
func TestLoadPeakMemory(t *testing.T) {
	defer torch.NewScope().Close()
	torch.CountCPUMemory()
	c := models.DefaultLlamaConfig()
	c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 4000, 64, 128, 4
	c.NumAttentionHeads, c.NumKeyValueHeads, c.MaxPositionEmbeddings = 4, 2, 128
	c.BOSTokenID, c.EOSTokenID = nil, nil
	m, err := models.NewLlamaForCausalLM(c)
	require.NoError(t, err)
	var weights, largest int64
	for _, e := range nn.StateTensors(m) {
		n := e.Tensor.Numel() * int64(e.Tensor.DType().Size())
		weights += n
		largest = max(largest, n)
	}
	dir := t.TempDir()
	require.NoError(t, models.SavePretrained(dir, m, models.SaveOptions{}))
	defer nn.Free(m)
	torch.ResetCPUPeakMemory()
	base := torch.CPUMemoryStats().Allocated
	lm, err := models.LoadPretrained(dir, models.LoadOptions{})
	require.NoError(t, err)
	defer nn.Free(lm)
	peak := torch.CPUMemoryStats().PeakAllocated - base
	t.Logf("weights %d, largest %d, peak %d (%.2fx)", weights, largest, peak, float64(peak)/float64(weights))
	assert.LessOrEqual(t, peak, weights+largest+64<<10)
	requireSameState(t, m, lm)
}

// requireSameState checks that b's state tensors equal a's, name by name.
func requireSameState(t *testing.T, a, b nn.Module) {
	t.Helper()
	sa, sb := nn.StateTensors(a), nn.StateTensors(b)
	require.Equal(t, len(sa), len(sb))
	for i := range sa {
		require.Equal(t, sa[i].Name, sb[i].Name)
		require.Equal(t, sa[i].Tensor.Float64s(), sb[i].Tensor.Float64s(), sa[i].Name)
	}
}

// TestSkipInit: inside nn.SkipInit the Init functions leave a tensor as it is on this
// goroutine, while another goroutine initialises as usual.
func TestSkipInit(t *testing.T) {
	defer torch.NewScope().Close()
	x := torch.Full([]int64{4}, 7, torch.Float32, torch.CPU)
	nn.SkipInit(func() {
		nn.InitNormal(x, 0, 1)
		nn.InitConstant(x, 3)
		done := make(chan []float64)
		go func() {
			defer torch.NewScope().Close()
			y := torch.Full([]int64{4}, 7, torch.Float32, torch.CPU)
			nn.InitConstant(y, 3)
			done <- y.Float64s()
		}()
		assert.Equal(t, []float64{3, 3, 3, 3}, <-done, "another goroutine initialises")
	})
	assert.Equal(t, []float64{7, 7, 7, 7}, x.Float64s())
	nn.InitConstant(x, 3)
	assert.Equal(t, []float64{3, 3, 3, 3}, x.Float64s(), "after SkipInit, Init works again")
}
