package trainer

import (
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
)

// batchInput is the model input of a classification or regression batch.
func batchInput(b data.Batch) *torch.Tensor { return b.Get(data.Input) }

// batchTarget is what the default step's loss compares the output with: the class
// labels of a classification batch, else its regression target.
func batchTarget(b data.Batch) *torch.Tensor {
	if b.Has(data.Label) {
		return b.Get(data.Label)
	}
	return b.Get(data.Target)
}

// batchOn moves a batch from l to dev, unless l says that its batches are there already
// (the common case, one that then costs no call into libtorch).
func batchOn(l *data.Loader, b data.Batch, dev torch.Device) data.Batch {
	if d, ok := l.BatchDevice(); ok && d == dev {
		return b
	}
	return toDevice(b, dev)
}

// toDevice moves a batch's fields to dev unless the loader put them there already
// (data.LoaderOptions.Device, which copies through pinned memory on CUDA).
func toDevice(b data.Batch, dev torch.Device) data.Batch {
	moved := make(map[string]*torch.Tensor, len(b.Fields))
	for name, x := range b.Fields {
		if x.Device() != dev {
			x = x.To(dev, true)
		}
		moved[name] = x
	}
	b.Fields = moved
	return b
}
