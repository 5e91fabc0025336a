package trainer_test

import (
	"context"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// afterForward is what a Trainer holds right after a step's forward (at BeforeBackward of
// its first batch), counted from just before Run: CPU tensor bytes and tensor handles.
type afterForward struct{ bytes, handles int64 }

// tinyViT is a ViT small enough for a test whose forward still makes temporaries autograd
// does not save (the patch embedding's output, the position embedding's sum, the logits).
func tinyViT(t *testing.T) *models.VisionTransformer {
	m, err := models.NewVisionTransformer(models.ViTConfig{ImageSize: 16, PatchSize: 4, NumLayers: 2, NumHeads: 4,
		HiddenDim: 64, MLPDim: 128, NumClasses: 10})
	require.NoError(t, err)
	return m
}

// runToBackward trains m for one batch with step and returns what the Trainer held at
// BeforeBackward.
func runToBackward(t *testing.T, m *models.VisionTransformer, step trainer.Step[nn.Layer]) afterForward {
	ds, err := data.Synthetic(8, 10, []int64{3, 16, 16}, seed)
	require.NoError(t, err)
	// Inline: no worker prefetches a batch at a moment that differs between runs.
	loader, err := data.NewLoader(ds, data.LoaderOptions{BatchSize: 8, Inline: true})
	require.NoError(t, err)
	opt, err := optim.NewAdamW(nn.Parameters(m), optim.AdamOptions{})
	require.NoError(t, err)
	defer opt.Free()
	var got afterForward
	seen := false
	probe := trainer.On(func(e trainer.Event, tt *trainer.Trainer) error {
		if !seen {
			seen = true
			got = afterForward{torch.CPUMemoryStats().Allocated, torch.LiveTensors()}
		}
		return nil
	}, trainer.BeforeBackward)
	tr, err := trainer.New(m, loader, nil, &nn.CrossEntropyLoss{}, opt, trainer.WithTrainStep(step),
		trainer.WithDevice("cpu"), trainer.WithOutput(io.Discard), trainer.WithEpochs(1), trainer.WithSeed(seed),
		trainer.WithCallbacks(probe))
	require.NoError(t, err)
	settle()
	before := afterForward{torch.CPUMemoryStats().Allocated, torch.LiveTensors()}
	require.NoError(t, tr.Run(context.Background()))
	require.True(t, seen)
	return afterForward{got.bytes - before.bytes, got.handles - before.handles}
}

// settle runs the collector until no cleanup of an earlier test's unreachable tensor is
// left to run: one that ran during a measured step would count as that step freeing
// tensors (a fresh-clone CI run saw -31 handles where 4 were held).
func settle() {
	for n, i := int64(-1), 0; n != torch.LiveTensors() && i < 100; i++ {
		n = torch.LiveTensors()
		runtime.GC()
		time.Sleep(time.Millisecond) // the cleanup goroutine runs what the collection queued
	}
}

// TestStepFreesWhatAutogradDidNotSave is issue 35's check that a training step holds no
// more memory than eager PyTorch: right after the forward, the Trainer's default step
// holds exactly what a step holds that frees every tensor of its forward but the loss by
// hand, which leaves the loss and the tensors autograd saved for backward (the saved set)
// and nothing else. Were the forward's other outputs kept to the end of the step, as
// gotrain did before, backward could not free the saved ones as it goes either.
func TestStepFreesWhatAutogradDidNotSave(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	torch.CountCPUMemory()
	ce := &nn.CrossEntropyLoss{}
	savedOnly := func(m nn.Layer, b data.Batch) (*torch.Tensor, trainer.Metrics) {
		s := torch.NewScope()
		defer s.Close()
		return s.Keep(ce.Forward(m.Forward(b.Get(data.Input)), b.Get(data.Label))), nil
	}

	torch.ManualSeed(seed)
	m := tinyViT(t)
	defer nn.Free(m)
	want := runToBackward(t, m, savedOnly)
	torch.ManualSeed(seed)
	m2 := tinyViT(t)
	defer nn.Free(m2)
	got := runToBackward(t, m2, trainer.LossStep(ce))
	assert.Equal(t, want.bytes, got.bytes, "CPU bytes held right after the forward: the saved set and the loss")
	assert.Equal(t, want.handles, got.handles, "tensor handles held right after the forward")

	// The check can fail: the same forward with every tensor kept holds more.
	ds, err := data.Synthetic(8, 10, []int64{3, 16, 16}, seed)
	require.NoError(t, err)
	loader, err := data.NewLoader(ds, data.LoaderOptions{BatchSize: 8, Inline: true})
	require.NoError(t, err)
	b, ok := loader.Iter(context.Background(), 0, 0).Next()
	require.True(t, ok)
	torch.WithScope(func() {
		x, y := b.Get(data.Input), b.Get(data.Label)
		start := torch.CPUMemoryStats().Allocated
		l, _ := savedOnly(m, b)
		saved := torch.CPUMemoryStats().Allocated - start
		l.Free()
		start = torch.CPUMemoryStats().Allocated
		ce.Forward(m.Forward(x), y)
		kept := torch.CPUMemoryStats().Allocated - start
		assert.Greater(t, kept-saved, int64(16<<10), "the forward makes temporaries autograd does not save (kept %d, saved %d bytes)", kept, saved)
	})
}
