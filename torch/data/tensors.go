package data

import (
	"github.com/gotrain/gotrain/torch"
)

// Batch is one batch of tensors: Input is float32 of shape [Size, sample shape...];
// Target is int64 labels of shape [Size], or float32 targets of shape
// [Size, target shape...] when the dataset's samples carry float targets. Both are on the
// loader's device and belong to the scope open on the calling goroutine.
type Batch struct {
	Input, Target *torch.Tensor
	// Index is the batch's index in its epoch.
	Index int
	// Size is the number of samples, BatchSize except perhaps for the last batch.
	Size int
	// Indices are the dataset indices of the samples, in order. They are shared with the
	// epoch's order and must not be modified.
	Indices []int
}

// Next returns the next batch of the epoch, waiting for the workers if it is not ready.
// It returns false at the end of the epoch, after an error (see Err), or once the
// context is cancelled or the iterator closed. The batch's tensors are created on the
// calling goroutine, in the scope it has open; on a CUDA device they are built in pinned
// host memory and copied without blocking.
func (it *Iter) Next() (Batch, bool) {
	hb, ok := it.nextHost()
	if !ok {
		return Batch{}, false
	}
	defer it.l.putBuf(hb)
	n := int64(len(hb.indices))
	b := Batch{Index: hb.index, Size: len(hb.indices), Indices: hb.indices}
	dev := it.l.opts.Device
	b.Input = toDevice(hb.input, dev, append([]int64{n}, hb.shape...))
	if hb.targetShape != nil {
		b.Target = toDevice(hb.targets, dev, append([]int64{n}, hb.targetShape...))
	} else {
		b.Target = toDevice(hb.labels, dev, []int64{n})
	}
	return b, true
}

// toDevice copies host data into a tensor on dev. On CUDA the copy goes through pinned
// memory from PyTorch's caching host allocator, which only reuses a pinned block once the
// non-blocking copy from it has finished.
func toDevice[T float32 | int64](data []T, dev torch.Device, shape []int64) *torch.Tensor {
	if !dev.IsCUDA() {
		return torch.FromSlice(data, shape...)
	}
	return torch.FromSlicePinned(data, shape...).To(dev, true)
}

// Randperm returns a random permutation of 0..n-1 that equals Python's
// torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist(); libtorch
// computes it.
func Randperm(n int, seed int64) []int {
	p := torch.RandpermSeeded(int64(n), seed)
	out := make([]int, len(p))
	for i, v := range p {
		out[i] = int(v)
	}
	return out
}
