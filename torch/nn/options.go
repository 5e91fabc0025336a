package nn

import (
	"fmt"
	"slices"
)

// Option sets one of a layer's keyword arguments, as in
// nn.NewConv2d(3, 64, 7, nn.Stride(2), nn.Padding(3), nn.NoBias()). Each constructor
// lists the options it takes and panics on any other, so a misplaced option is not
// silently ignored. Unset options have PyTorch's defaults.
type Option struct {
	name  string
	apply func(*options)
}

type options struct {
	stride, padding, dilation [2]int64
	strideSet                 bool
	groups                    int64
	noBias                    bool
	ceilMode                  bool
	excludePad                bool
	eps                       float64
	momentum                  float64
	cumulative                bool
	noAffine                  bool
	noTrack                   bool
	paddingIdx                int64
	paddingIdxSet             bool
}

func parseOptions(layer string, allowed []string, opts []Option) options {
	o := options{dilation: [2]int64{1, 1}, groups: 1, momentum: 0.1}
	for _, op := range opts {
		if !slices.Contains(allowed, op.name) {
			panic(fmt.Sprintf("nn: %s does not take the option %s", layer, op.name))
		}
		op.apply(&o)
	}
	if o.eps == 0 { // the normalisation layers' default, also for Eps(0)
		o.eps = 1e-5
	}
	return o
}

// Stride sets a convolution's or pooling window's stride (both dimensions).
func Stride(s int64) Option {
	return Option{"Stride", func(o *options) { o.stride, o.strideSet = [2]int64{s, s}, true }}
}

// Padding sets the implicit zero padding on both sides of both dimensions.
func Padding(p int64) Option {
	return Option{"Padding", func(o *options) { o.padding = [2]int64{p, p} }}
}

// Dilation sets the spacing between kernel elements.
func Dilation(d int64) Option {
	return Option{"Dilation", func(o *options) { o.dilation = [2]int64{d, d} }}
}

// Groups sets a convolution's number of blocked connections from input to output channels.
func Groups(g int64) Option { return Option{"Groups", func(o *options) { o.groups = g }} }

// NoBias leaves out the layer's bias (bias=False).
func NoBias() Option { return Option{"NoBias", func(o *options) { o.noBias = true }} }

// CeilMode makes pooling use ceil instead of floor for the output shape.
func CeilMode() Option { return Option{"CeilMode", func(o *options) { o.ceilMode = true }} }

// ExcludePad makes average pooling leave padding out of the average (count_include_pad=False).
func ExcludePad() Option { return Option{"ExcludePad", func(o *options) { o.excludePad = true }} }

// Eps sets the value a normalisation layer adds to the variance (default 1e-5).
func Eps(e float64) Option { return Option{"Eps", func(o *options) { o.eps = e }} }

// Momentum sets BatchNorm's running-statistics momentum (default 0.1).
func Momentum(m float64) Option {
	return Option{"Momentum", func(o *options) { o.momentum, o.cumulative = m, false }}
}

// CumulativeAverage makes BatchNorm's running statistics a cumulative moving average
// (momentum=None).
func CumulativeAverage() Option {
	return Option{"CumulativeAverage", func(o *options) { o.cumulative = true }}
}

// NoAffine leaves out a normalisation layer's learnable weight and bias (affine=False,
// or elementwise_affine=False for LayerNorm).
func NoAffine() Option { return Option{"NoAffine", func(o *options) { o.noAffine = true }} }

// NoTrackRunningStats makes BatchNorm always normalise with batch statistics and keep no
// running statistics (track_running_stats=False).
func NoTrackRunningStats() Option {
	return Option{"NoTrackRunningStats", func(o *options) { o.noTrack = true }}
}

// PaddingIdx sets Embedding's padding row: it starts at zero and gets no gradient.
// Negative values count from the end.
func PaddingIdx(i int64) Option {
	return Option{"PaddingIdx", func(o *options) { o.paddingIdx, o.paddingIdxSet = i, true }}
}

// noBiasIf is the NoBias option when set, and no option otherwise.
func noBiasIf(set bool) []Option {
	if set {
		return []Option{NoBias()}
	}
	return nil
}
