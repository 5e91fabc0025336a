package data

import (
	"fmt"

	"github.com/gotrain/gotrain/torch"
)

// NormalizeImages turns a batch of images ([N, C, H, W], or [C, H, W]) into normalized
// float32 values on the tensor's own device: uint8 images are first scaled to [0, 1]
// as torchvision's ConvertImageDtype(torch.float) does (x / 255), then every channel
// becomes (x - mean) / std, as Normalize does. One mean and std apply to every channel.
//
// Images can so travel from the workers to the device as uint8, a quarter of the bytes
// of float32, with the arithmetic done on the device: set it in LoaderOptions.OnDevice,
// or call it in a training step. Mean and std nil only converts. As an op does, it
// panics with a *torch.Error when x is not a batch of images or mean and std do not fit
// its channels; torch.Recover (and Trainer.Run) return that as an error.
func NormalizeImages(x *torch.Tensor, mean, std []float32) *torch.Tensor {
	if x.DType() == torch.Uint8 {
		x = x.ToDType(torch.Float32).DivScalar(255)
	} else if x.DType() != torch.Float32 {
		x = x.ToDType(torch.Float32)
	}
	if mean == nil && std == nil {
		return x
	}
	shape := x.Shape()
	if len(shape) < 3 {
		panic(&torch.Error{Op: "NormalizeImages", Msg: fmt.Sprintf("images of shape %v are not [N, C, H, W] or [C, H, W]", shape)})
	}
	c := shape[len(shape)-3]
	if len(mean) != len(std) || (len(mean) != 1 && int64(len(mean)) != c) {
		panic(&torch.Error{Op: "NormalizeImages", Msg: fmt.Sprintf("%d means and %d stds for images of shape %v", len(mean), len(std), shape)})
	}
	per := []int64{int64(len(mean)), 1, 1}
	m := torch.FromSlice(mean, per...).To(x.Device(), false)
	s := torch.FromSlice(std, per...).To(x.Device(), false)
	return x.Sub(m).Div(s)
}
