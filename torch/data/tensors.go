package data

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/gotrain/gotrain/torch"
)

// Batch is one batch of named tensors, the collated fields of its samples: field "x" of
// samples of shape S is Fields["x"] of shape [Size, S...] (padded fields and their masks
// as LoaderOptions.Pad describes). A classification dataset's batch is
// Get(Input) (float32 [Size, C, H, W], or uint8 before NormalizeImages) and Get(Label)
// (int64 [Size]); a regression dataset's has Get(Target) instead of Label.
//
// The tensors are on the loader's device and belong to the scope open on the goroutine
// that called Next.
type Batch struct {
	Fields map[string]*torch.Tensor
	// Index is the batch's index in its epoch.
	Index int
	// Size is the number of samples, BatchSize except perhaps for the last batch.
	Size int
	// Indices are the dataset indices of the samples, in order. They are shared with the
	// epoch's order and must not be modified.
	Indices []int
}

// Get returns field name. It panics, naming the field and the fields the batch has, when
// there is no such field: a step that reads a field its data does not have is a
// programming error.
func (b Batch) Get(name string) *torch.Tensor {
	if t, ok := b.Fields[name]; ok {
		return t
	}
	panic(fmt.Sprintf("data: batch has no field %q (it has %s)", name, strings.Join(b.Names(), ", ")))
}

// Has reports whether the batch has field name.
func (b Batch) Has(name string) bool {
	_, ok := b.Fields[name]
	return ok
}

// Names returns the batch's field names, sorted.
func (b Batch) Names() []string {
	return slices.Sorted(maps.Keys(b.Fields))
}

// Next returns the next batch of the epoch, waiting for the workers if it is not ready.
// It returns false at the end of the epoch, after an error (see Err), or once the
// context is cancelled or the iterator closed. The batch's tensors are created on the
// calling goroutine, in the scope it has open; on a CUDA device they are built in pinned
// host memory and copied without blocking. LoaderOptions.OnDevice, when set, is applied
// before Next returns.
func (it *Iter) Next() (Batch, bool) {
	if it.l.opts.Resident {
		return it.residentBatch()
	}
	hb, ok := it.nextHost()
	if !ok {
		return Batch{}, false
	}
	defer it.l.putBuf(hb)
	b := Batch{Index: hb.index, Size: len(hb.indices), Indices: hb.indices, Fields: make(map[string]*torch.Tensor, hb.out.Len())}
	dev := it.l.opts.Device
	for k := range hb.out.fields {
		f := &hb.out.fields[k]
		b.Fields[f.Name] = fieldTensor(f, dev)
	}
	if fn := it.l.opts.OnDevice; fn != nil {
		fn(&b)
	}
	return b, true
}

// fieldTensor copies a collated field into a tensor on dev.
func fieldTensor(f *Field, dev torch.Device) *torch.Tensor {
	if fn, ok := bytesToDevice[f.DType]; ok {
		return fn(f.Data, dev, f.Shape)
	}
	// float16 and bfloat16 have no Go element type: they are widened to float32 on the
	// host (exactly) and narrowed back by libtorch (exactly again).
	wide := make([]float32, len(f.Data)/2)
	for i, h := range viewAs[uint16](f.Data) {
		if f.DType == torch.BFloat16 {
			wide[i] = math.Float32frombits(uint32(h) << 16)
		} else {
			wide[i] = float16ToFloat32(h)
		}
	}
	return toDevice(wide, dev, f.Shape).ToDType(f.DType)
}

// toDevice copies host data into a tensor on dev. On CUDA the copy goes through pinned
// memory from PyTorch's caching host allocator, which only reuses a pinned block once the
// non-blocking copy from it has finished.
func toDevice[T torch.Elem](data []T, dev torch.Device, shape []int64) *torch.Tensor {
	if !dev.IsCUDA() {
		return torch.FromSlice(data, shape...)
	}
	return torch.FromSlicePinned(data, shape...).To(dev, true)
}

// bytesToDevice copies host bytes of a dtype that has a Go element type into a tensor.
var bytesToDevice = map[torch.DType]func([]byte, torch.Device, []int64) *torch.Tensor{
	torch.Float32: viewToDevice[float32], torch.Float64: viewToDevice[float64],
	torch.Int64: viewToDevice[int64], torch.Int32: viewToDevice[int32], torch.Int16: viewToDevice[int16],
	torch.Int8: viewToDevice[int8], torch.Uint8: viewToDevice[uint8], torch.Bool: viewToDevice[bool],
}

func viewToDevice[T torch.Elem](b []byte, dev torch.Device, shape []int64) *torch.Tensor {
	return toDevice(viewAs[T](b), dev, shape)
}

// Randperm returns a random permutation of 0..n-1 that equals Python's
// torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist(); libtorch
// computes it.
func Randperm(n int, seed int64) []int {
	return convert[int](torch.RandpermSeeded(int64(n), seed))
}
