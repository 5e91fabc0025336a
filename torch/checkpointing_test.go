package torch_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
)

// ckptBlock is a residual block with dropout: what a checkpointed layer looks like.
func ckptBlock(w1, w2 *torch.Tensor, p float64) func([]*torch.Tensor) []*torch.Tensor {
	return func(in []*torch.Tensor) []*torch.Tensor {
		x := in[0]
		h := torch.Dropout(x.Matmul(w1).Tanh(), p, true)
		return []*torch.Tensor{x.Add(h.Matmul(w2))}
	}
}

type ckptRun struct {
	grads [][]float32 // of the leaves, in order
	after []float32   // a random draw after backward
	calls int
}

// runBlocks runs x through blocks with weights ws (pairs), checkpointed or not, from the
// same seed, and returns the leaves' gradients.
func runBlocks(t *testing.T, checkpoint, inputGrad bool, p float64) ckptRun {
	var r ckptRun
	torch.WithScope(func() {
		torch.ManualSeed(7)
		x := torch.Randn([]int64{6, 8}, torch.Float32, torch.CPU).SetRequiresGrad(inputGrad)
		var ws []*torch.Tensor
		for range 6 {
			ws = append(ws, torch.Randn([]int64{8, 8}, torch.Float32, torch.CPU).MulScalar(0.5).Detach().SetRequiresGrad(true))
		}
		torch.ManualSeed(11)
		h := x
		for b := 0; b < len(ws); b += 2 {
			f := ckptBlock(ws[b], ws[b+1], p)
			counted := func(in []*torch.Tensor) []*torch.Tensor { r.calls++; return f(in) }
			if checkpoint {
				h = torch.Checkpoint(counted, []*torch.Tensor{h}, ws[b:b+2])[0]
			} else {
				h = counted([]*torch.Tensor{h})[0]
			}
		}
		h.Square().Sum().Backward()
		leaves := ws
		if inputGrad {
			leaves = append([]*torch.Tensor{x}, ws...)
		}
		for _, l := range leaves {
			g := l.Grad()
			require.NotNil(t, g)
			r.grads = append(r.grads, g.Float32s())
		}
		r.after = torch.Rand([]int64{4}, torch.Float32, torch.CPU).Float32s()
	})
	return r
}

// Checkpointed blocks give the plain blocks' gradients to the bit, dropout included (the
// recomputation replays the forward's random draws and then restores the generator),
// whether or not the input needs a gradient; each block runs twice.
func TestActivationCheckpointGradientsIdentical(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	live, ckpts := torch.LiveTensors(), torch.LiveCheckpoints()
	for _, inputGrad := range []bool{true, false} {
		plain := runBlocks(t, false, inputGrad, 0.25)
		ckpt := runBlocks(t, true, inputGrad, 0.25)
		require.Equal(t, len(plain.grads), len(ckpt.grads))
		for i := range plain.grads {
			assert.Equal(t, plain.grads[i], ckpt.grads[i], "leaf %d (input grad %v)", i, inputGrad)
		}
		assert.Equal(t, plain.after, ckpt.after, "the generator continues as without checkpointing")
		assert.Equal(t, 3, plain.calls)
		assert.Equal(t, 6, ckpt.calls)
	}
	assert.Equal(t, live, torch.LiveTensors())
	assert.Equal(t, ckpts, torch.LiveCheckpoints(), "every node's function is released with its graph")
}

// Without gradient recording, or with nothing that needs a gradient, Checkpoint is a
// plain call.
func TestActivationCheckpointPlainCall(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	torch.WithScope(func() {
		calls := 0
		f := func(in []*torch.Tensor) []*torch.Tensor { calls++; return []*torch.Tensor{in[0].MulScalar(2)} }
		x := torch.Ones([]int64{3}, torch.Float32, torch.CPU)
		w := torch.Ones([]int64{3}, torch.Float32, torch.CPU).SetRequiresGrad(true)
		y := torch.Checkpoint(f, []*torch.Tensor{x}, []*torch.Tensor{w.Detach()})[0]
		assert.False(t, y.RequiresGrad())
		torch.NoGrad(func() { y = torch.Checkpoint(f, []*torch.Tensor{x}, []*torch.Tensor{w})[0] })
		assert.False(t, y.RequiresGrad())
		assert.Equal(t, 2, calls)
		assert.Equal(t, []float32{2, 2, 2}, y.Float32s())
	})
}

// A panic in the function comes out of Checkpoint with its own value in the forward
// pass, and fails Backward with its message in the backward pass; nothing leaks.
func TestActivationCheckpointPanics(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	live, ckpts := torch.LiveTensors(), torch.LiveCheckpoints()
	type mine struct{ s string }
	torch.WithScope(func() {
		x := torch.Ones([]int64{3}, torch.Float32, torch.CPU).SetRequiresGrad(true)
		assert.PanicsWithValue(t, mine{"boom"}, func() {
			torch.Checkpoint(func(in []*torch.Tensor) []*torch.Tensor {
				in[0].MulScalar(3) // a tensor of the function's own scope, freed on the way out
				panic(mine{"boom"})
			}, []*torch.Tensor{x}, nil)
		})
		calls := 0
		y := torch.Checkpoint(func(in []*torch.Tensor) []*torch.Tensor {
			calls++
			if calls == 2 {
				panic("recomputation failed")
			}
			return []*torch.Tensor{in[0].Square()}
		}, []*torch.Tensor{x}, nil)[0]
		err := func() (err error) {
			defer torch.Recover(&err, "step")
			y.Sum().Backward()
			return nil
		}()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "recomputation failed")
	})
	assert.Equal(t, live, torch.LiveTensors())
	assert.Equal(t, ckpts, torch.LiveCheckpoints())
}

// Checkpointing lowers the peak memory of a forward and backward pass: the blocks'
// activations are not all alive at once.
func TestActivationCheckpointPeakMemory(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	torch.CountCPUMemory()
	peak := func(checkpoint bool) int64 {
		var p int64
		torch.WithScope(func() {
			torch.ManualSeed(1)
			x := torch.Randn([]int64{512, 256}, torch.Float32, torch.CPU)
			var ws []*torch.Tensor
			for range 16 {
				ws = append(ws, torch.Randn([]int64{256, 256}, torch.Float32, torch.CPU).MulScalar(0.05).Detach().SetRequiresGrad(true))
			}
			torch.ResetCPUPeakMemory()
			base := torch.CPUMemoryStats().Allocated
			h := x
			for b := 0; b < len(ws); b += 2 {
				f := ckptBlock(ws[b], ws[b+1], 0)
				if checkpoint {
					h = torch.Checkpoint(f, []*torch.Tensor{h}, ws[b:b+2])[0]
				} else {
					h = f([]*torch.Tensor{h})[0]
				}
			}
			h.Square().Sum().Backward()
			p = torch.CPUMemoryStats().PeakAllocated - base
		})
		return p
	}
	plain, ckpt := peak(false), peak(true)
	t.Logf("peak above the weights: plain %d bytes, checkpointed %d bytes", plain, ckpt)
	assert.Less(t, ckpt, plain)
}

// Tensors passed as inputs — one that needs no gradient, a nil one — reach the
// function in both passes, also when the forward pass ran in a torch.Local whose
// tensors are gone by the backward pass. A tensor the function captures instead is gone
// too: Backward fails with a message, not a crash.
func TestActivationCheckpointInputsOutliveLocal(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	live := torch.LiveTensors()
	torch.WithScope(func() {
		torch.ManualSeed(5)
		w := torch.Randn([]int64{4, 4}, torch.Float32, torch.CPU).Detach().SetRequiresGrad(true)
		x := torch.Randn([]int64{3, 4}, torch.Float32, torch.CPU)
		grad := func(checkpoint, captured bool) (g []float32, err error) {
			w.SetGrad(nil)
			defer torch.Recover(&err, "step")
			loss := torch.Local(func() *torch.Tensor {
				mask := torch.Ones([]int64{3, 4}, torch.Float32, torch.CPU).Tril(0) // freed when Local returns
				f := func(in []*torch.Tensor) []*torch.Tensor {
					m := in[1]
					if captured {
						m = mask
					}
					require.Nil(t, in[2])
					return []*torch.Tensor{in[0].Matmul(w).Tanh().Mul(m)}
				}
				in := []*torch.Tensor{x, mask, nil}
				if !checkpoint {
					return f(in)[0].Square().Sum()
				}
				return torch.Checkpoint(f, in, []*torch.Tensor{w})[0].Square().Sum()
			})
			loss.Backward()
			return w.Grad().Float32s(), nil
		}
		plain, err := grad(false, false)
		require.NoError(t, err)
		ckpt, err := grad(true, false)
		require.NoError(t, err)
		assert.Equal(t, plain, ckpt)
		_, err = grad(true, true)
		assert.ErrorContains(t, err, "tensor used after Free or after its scope closed")
	})
	assert.Equal(t, live, torch.LiveTensors())
}
