package models_test

import (
	"encoding/json"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
)

// TestLoadPeakMemory is issue 42's loading bound: LoadPretrained holds at most the
// model's tensors plus its largest tensor (the one being copied from the checkpoint)
// and loadOverhead, counting both the CPU tensors the counting allocator sees and every
// byte the Go heap allocates during the load (runtime.MemStats.TotalAlloc, which bounds
// the heap's peak from above). The safetensors files are memory-mapped, not read into
// Go memory: a load that read a file whole into the heap would add the weights
// (12.9 MB for the Llama) and break the bound, single file or sharded; a mixture of
// experts' per-expert tensors are copied into its fused parameters one at a time
// (fusing them in Go first would add the experts' 6 MB). The model is built without
// drawing its parameters at random (nn.SkipInit), and the weights it ends with are the
// file's.
func TestLoadPeakMemory(t *testing.T) {
	defer torch.NewScope().Close()
	torch.CountCPUMemory()
	c := models.DefaultLlamaConfig()
	c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 8000, 128, 256, 8
	c.NumAttentionHeads, c.NumKeyValueHeads, c.MaxPositionEmbeddings = 4, 2, 128
	c.BOSTokenID, c.EOSTokenID = nil, nil
	llama, err := models.NewLlamaForCausalLM(c)
	require.NoError(t, err)
	defer nn.Free(llama)
	mc := tinyMixtralJSON()
	mc["vocab_size"], mc["hidden_size"], mc["intermediate_size"], mc["num_hidden_layers"] = 4000, 128, 256, 4
	raw, err := json.Marshal(mc)
	require.NoError(t, err)
	mixtral := newDecoder(t, buildMixtral, raw)
	for _, tc := range []struct {
		name  string
		m     nn.Module
		shard int64
	}{{"llama", llama, 0}, {"llama sharded", llama, 3 << 20}, {"mixtral sharded", mixtral, 2 << 20}} {
		m := tc.m.(models.CausalLM)
		var weights, largest int64
		for _, e := range nn.StateTensors(m) {
			n := e.Tensor.Numel() * int64(e.Tensor.DType().Size())
			weights += n
			largest = max(largest, n)
		}
		require.Greater(t, weights, largest+2*loadOverhead, "%s: the model is too small for the bound to tell a whole-file read", tc.name)
		dir := t.TempDir()
		require.NoError(t, models.SavePretrained(dir, m, models.SaveOptions{MaxShardSize: tc.shard}))
		runtime.GC()
		torch.ResetCPUPeakMemory()
		base := torch.CPUMemoryStats().Allocated
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		lm, err := models.LoadPretrained(dir, models.LoadOptions{})
		runtime.ReadMemStats(&after)
		require.NoError(t, err, tc.name)
		peak := torch.CPUMemoryStats().PeakAllocated - base
		goAlloc := int64(after.TotalAlloc - before.TotalAlloc)
		t.Logf("%s: weights %d, largest %d, tensor peak %d (%.2fx), Go allocated %d, sum %.2fx",
			tc.name, weights, largest, peak, float64(peak)/float64(weights), goAlloc, float64(peak+goAlloc)/float64(weights))
		assert.LessOrEqual(t, peak, weights+largest+64<<10, "%s: tensors", tc.name)
		assert.LessOrEqual(t, peak+goAlloc, weights+largest+loadOverhead, "%s: tensors and Go heap", tc.name)
		requireSameState(t, m, lm)
		nn.Free(lm)
	}
}

// loadOverhead is what loading may allocate besides the model and its largest tensor:
// the config, the safetensors headers and index, the names and dicts of the tensors,
// the model's Go structs (docs/llm-finetune.md states it).
const loadOverhead = 2 << 20

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
