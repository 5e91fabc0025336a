package models_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
)

// handlesLeft returns the tensor handles f leaves in its caller's scope.
func handlesLeft(f func()) (n int64) {
	torch.WithScope(func() {
		before := torch.LiveTensors()
		f()
		n = torch.LiveTensors() - before
	})
	return n
}

// The blocks of ViT and GPT-2 free their temporaries when they return (issue 35): a
// forward leaves one handle per block (its output, which the next block's LayerNorm
// saves), not the dozen each block makes, so two more blocks leave two more handles.
func TestBlocksLeaveOnlyTheirOutputs(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	vit := func(layers int64) int64 {
		torch.ManualSeed(1)
		m, err := models.NewVisionTransformer(models.ViTConfig{ImageSize: 16, PatchSize: 4, NumLayers: layers, NumHeads: 2,
			HiddenDim: 16, MLPDim: 32, NumClasses: 3})
		require.NoError(t, err)
		defer nn.Free(m)
		x := torch.Randn([]int64{2, 3, 16, 16}, torch.Float32, torch.CPU)
		defer x.Free()
		return handlesLeft(func() { m.Forward(x) })
	}
	gpt := func(layers int64) int64 {
		torch.ManualSeed(1)
		c := models.DefaultGPT2Config()
		c.VocabSize, c.NPositions, c.NEmbd, c.NLayer, c.NHead = 32, 16, 16, layers, 2
		c.BOSTokenID, c.EOSTokenID = nil, nil
		m, err := models.NewGPT2LMHeadModel(c)
		require.NoError(t, err)
		defer nn.Free(m)
		ids := torch.Randint(0, 32, []int64{2, 8}, torch.Int64, torch.CPU)
		defer ids.Free()
		return handlesLeft(func() { m.Forward(models.DecoderInput{InputIDs: ids}) })
	}
	for name, f := range map[string]func(int64) int64{"vit": vit, "gpt2": gpt} {
		two, four := f(2), f(4)
		assert.Equal(t, int64(2), four-two, "%s: handles left by 4 blocks (%d) less those left by 2 (%d)", name, four, two)
	}
}

// ResNet's block leaves only its output, and its batch norms' outputs are freed as
// torchvision's in-place ReLU overwrites them: after the block, the CPU bytes it holds are
// those of a block run in a scope that keeps only the output (the saved set).
func TestBasicBlockHoldsTheSavedSet(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	torch.CountCPUMemory()
	torch.ManualSeed(1)
	b := models.NewBasicBlock(8, 16, 2) // with a downsample
	defer nn.Free(b)
	x := torch.Randn([]int64{2, 8, 16, 16}, torch.Float32, torch.CPU).SetRequiresGrad(true)
	defer x.Free()
	held := func(f func() *torch.Tensor) (bytes int64) {
		torch.WithScope(func() {
			start := torch.CPUMemoryStats().Allocated
			f()
			bytes = torch.CPUMemoryStats().Allocated - start
		})
		return bytes
	}
	saved := held(func() *torch.Tensor {
		s := torch.NewScope()
		defer s.Close()
		return s.Keep(b.Forward(x))
	})
	assert.Equal(t, saved, held(func() *torch.Tensor { return b.Forward(x) }))
	assert.Equal(t, int64(1), handlesLeft(func() { b.Forward(x) }))
	// and the block makes tensors it does not keep: a plain chain of its ops holds more.
	plain := held(func() *torch.Tensor {
		out := b.BN2.Forward(b.Conv2.Forward(b.BN1.Forward(b.Conv1.Forward(x)).ReLU()))
		return out.Add(b.Downsample.Forward(x)).ReLU()
	})
	assert.Greater(t, plain, saved)
}
