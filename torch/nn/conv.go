package nn

import (
	"fmt"

	"github.com/gotrain/gotrain/torch"
)

// Conv2d is nn.Conv2d with a square kernel: parameters "weight" [out, in/groups, k, k]
// and "bias" [out].
type Conv2d struct {
	Base
	Weight, Bias *torch.Tensor // Bias is nil with NoBias
	Options      torch.Conv2dOptions
}

// NewConv2d returns nn.Conv2d(in, out, kernel) initialised as PyTorch does (weight and
// bias uniform in ±1/sqrt(fan_in), fan_in = in/groups·k²). It takes the options Stride,
// Padding, Dilation, Groups and NoBias.
func NewConv2d(in, out, kernel int64, opts ...Option) *Conv2d {
	o := parseOptions("Conv2d", []string{"Stride", "Padding", "Dilation", "Groups", "NoBias"}, opts)
	if o.groups <= 0 || in%o.groups != 0 || out%o.groups != 0 {
		panic(fmt.Sprintf("nn: Conv2d: in (%d) and out (%d) channels must be divisible by groups (%d)", in, out, o.groups))
	}
	stride := o.stride
	if !o.strideSet {
		stride = [2]int64{1, 1}
	}
	c := &Conv2d{Options: torch.Conv2dOptions{Stride: stride, Padding: o.padding, Dilation: o.dilation, Groups: o.groups}}
	c.Weight, c.Bias = resetParams(&c.Base, o.noBias, out, in/o.groups, kernel, kernel)
	return c
}

// Forward convolves x [N, in, H, W].
func (c *Conv2d) Forward(x *torch.Tensor) *torch.Tensor {
	return torch.Conv2d(x, c.Weight, c.Bias, c.Options)
}

// MaxPool2d is nn.MaxPool2d with a square window.
type MaxPool2d struct {
	Base
	Options torch.Pool2dOptions
}

func poolOptions(kernel int64, o options) torch.Pool2dOptions {
	p := torch.Pool2dOptions{Kernel: [2]int64{kernel, kernel}, Padding: o.padding, Dilation: o.dilation, CeilMode: o.ceilMode, ExcludePad: o.excludePad}
	if o.strideSet {
		p.Stride = o.stride
	}
	return p
}

// NewMaxPool2d returns nn.MaxPool2d(kernel), whose stride defaults to the kernel size.
// It takes the options Stride, Padding, Dilation and CeilMode.
func NewMaxPool2d(kernel int64, opts ...Option) *MaxPool2d {
	o := parseOptions("MaxPool2d", []string{"Stride", "Padding", "Dilation", "CeilMode"}, opts)
	return &MaxPool2d{Options: poolOptions(kernel, o)}
}

// Forward max-pools x.
func (p *MaxPool2d) Forward(x *torch.Tensor) *torch.Tensor { return torch.MaxPool2d(x, p.Options) }

// AvgPool2d is nn.AvgPool2d with a square window.
type AvgPool2d struct {
	Base
	Options torch.Pool2dOptions
}

// NewAvgPool2d returns nn.AvgPool2d(kernel), whose stride defaults to the kernel size.
// It takes the options Stride, Padding, CeilMode and ExcludePad.
func NewAvgPool2d(kernel int64, opts ...Option) *AvgPool2d {
	o := parseOptions("AvgPool2d", []string{"Stride", "Padding", "CeilMode", "ExcludePad"}, opts)
	return &AvgPool2d{Options: poolOptions(kernel, o)}
}

// Forward average-pools x.
func (p *AvgPool2d) Forward(x *torch.Tensor) *torch.Tensor { return torch.AvgPool2d(x, p.Options) }

// AdaptiveAvgPool2d is nn.AdaptiveAvgPool2d((H, W)).
type AdaptiveAvgPool2d struct {
	Base
	H, W int64
}

// NewAdaptiveAvgPool2d returns nn.AdaptiveAvgPool2d((h, w)).
func NewAdaptiveAvgPool2d(h, w int64) *AdaptiveAvgPool2d { return &AdaptiveAvgPool2d{H: h, W: w} }

// Forward average-pools x to H×W.
func (p *AdaptiveAvgPool2d) Forward(x *torch.Tensor) *torch.Tensor {
	return torch.AdaptiveAvgPool2d(x, p.H, p.W)
}
