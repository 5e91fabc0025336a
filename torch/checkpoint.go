package torch

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/gotrain/gotrain/checkpoint"
)

// ToCheckpoint returns v with every *Tensor replaced by a *checkpoint.Tensor, ready for
// checkpoint.Write. Dicts (with their kind), lists and tuples are rebuilt; other values
// pass through. A contiguous CPU tensor is referenced, not copied: keep the source tensors
// alive and unchanged until the write returns. Other tensors are copied to host memory.
func ToCheckpoint(v any) (any, error) {
	return mapLeaves(v, func(leaf any) (any, error) {
		if t, ok := leaf.(*Tensor); ok {
			return TensorToCheckpoint(t)
		}
		return leaf, nil
	})
}

// mapLeaves rebuilds the containers of a checkpoint value tree (dicts with their kind,
// lists, tuples) with f applied to every other value; errors name the path.
func mapLeaves(v any, f func(any) (any, error)) (any, error) {
	switch x := v.(type) {
	case *checkpoint.Dict:
		out := &checkpoint.Dict{Kind: x.Kind, Attrs: x.Attrs}
		for k, e := range x.All() {
			c, err := mapLeaves(e, f)
			if err != nil {
				return nil, fmt.Errorf("%v: %w", k, err)
			}
			out.Set(k, c)
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			c, err := mapLeaves(e, f)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = c
		}
		return out, nil
	case checkpoint.Tuple:
		l, err := mapLeaves([]any(x), f)
		if err != nil {
			return nil, err
		}
		return checkpoint.Tuple(l.([]any)), nil
	}
	return f(v)
}

// TensorCopyToCheckpoint is TensorToCheckpoint with the data always copied to Go
// memory, so that the result outlives the tensor and does not see its later changes.
func TensorCopyToCheckpoint(t *Tensor) (*checkpoint.Tensor, error) {
	ct, err := TensorToCheckpoint(t)
	if err != nil || t.Device() != CPU || !t.IsContiguous() {
		return ct, err // copied already
	}
	raw, err := ct.ReadBytes()
	if err != nil {
		return nil, err
	}
	out := checkpoint.NewTensor(ct.DType, ct.Shape, slices.Clone(raw))
	out.RequiresGrad = ct.RequiresGrad
	return out, nil
}

// TensorToCheckpoint converts one tensor (see ToCheckpoint for when it is copied).
func TensorToCheckpoint(t *Tensor) (ct *checkpoint.Tensor, err error) {
	defer Recover(&err, "tensor to checkpoint")
	dt, err := checkpoint.ParseDType(t.DType().String())
	if err != nil {
		return nil, err
	}
	n := int(t.Numel()) * t.DType().Size()
	var p unsafe.Pointer // the tensor's own memory, when it can be referenced
	if n > 0 && t.Device() == CPU && t.IsContiguous() {
		p = t.dataPtr() // nil when sharded training freed it: the copy below refuses it
	}
	var data []byte
	if p != nil {
		data = unsafe.Slice((*byte)(p), n)
	} else if n > 0 {
		data = make([]byte, n)
		src := t.Detach()
		defer src.Free()
		if err := copyToHost(src, unsafe.Pointer(&data[0]), int64(n)); err != nil {
			return nil, err
		}
	}
	ct = checkpoint.NewTensor(dt, t.Shape(), data)
	ct.RequiresGrad = t.RequiresGrad()
	return ct, nil
}

// FromCheckpoint returns v with every *checkpoint.Tensor replaced by a *Tensor on dev
// (owned by the current scope). Containers are rebuilt; other values pass through.
func FromCheckpoint(v any, dev Device) (any, error) {
	return mapLeaves(v, func(leaf any) (any, error) {
		if ct, ok := leaf.(*checkpoint.Tensor); ok {
			return TensorFromCheckpoint(ct, dev)
		}
		return leaf, nil
	})
}

// TensorFromCheckpoint copies a checkpoint tensor (any strides and storage offset) into a
// new contiguous tensor on dev.
func TensorFromCheckpoint(ct *checkpoint.Tensor, dev Device) (t *Tensor, err error) {
	defer Recover(&err, "tensor from checkpoint")
	dt, err := ParseDType(ct.DType.String())
	if err != nil {
		return nil, err
	}
	var p unsafe.Pointer
	if ct.Numel() > 0 {
		off := int(ct.Offset) * ct.DType.ElemSize()
		if ct.Storage == nil || off >= len(ct.Storage.Data) {
			return nil, fmt.Errorf("checkpoint tensor's storage is shorter than its offset")
		}
		p = unsafe.Pointer(&ct.Storage.Data[off])
	}
	shape, strides := ct.Shape, ct.Strides
	if shape == nil {
		shape, strides = []int64{}, []int64{}
	}
	t = fromBlobStrided(p, shape, strides, dt)
	if dev != CPU {
		moved := t.To(dev, false)
		t.Free()
		t = moved
	}
	if ct.RequiresGrad {
		t.SetRequiresGrad(true)
	}
	return t, nil
}
