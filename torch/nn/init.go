package nn

import (
	"math"

	"github.com/gotrain/gotrain/torch"
)

// The Init functions fill a tensor in place, without recording gradients, from torch's
// default generator, as torch.nn.init's functions of the same name do; inside SkipInit
// they do nothing.

// fill draws a new tensor like t with gen, scales it by scale, shifts it by shift and
// copies it into t.
func fill(t *torch.Tensor, gen func([]int64, torch.DType, torch.Device) *torch.Tensor, scale, shift float64) {
	if initSkipped() {
		return
	}
	torch.WithScope(func() {
		torch.NoGrad(func() {
			u := gen(t.Shape(), t.DType(), t.Device())
			u.MulScalarInPlace(scale)
			u.AddScalarInPlace(shift)
			t.CopyFrom(u, false)
		})
	})
}

// InitUniform fills t with samples from U(lo, hi) (nn.init.uniform_).
func InitUniform(t *torch.Tensor, lo, hi float64) { fill(t, torch.Rand, hi-lo, lo) }

// InitNormal fills t with samples from N(mean, std²) (nn.init.normal_).
func InitNormal(t *torch.Tensor, mean, std float64) { fill(t, torch.Randn, std, mean) }

// InitConstant fills t with v (nn.init.constant_).
func InitConstant(t *torch.Tensor, v float64) {
	if initSkipped() {
		return
	}
	torch.NoGrad(func() { t.Fill(v) })
}

// Fans returns a weight's fan_in and fan_out as PyTorch computes them: dimension 1 and 0
// times the size of the receptive field (the product of dimensions 2 and up).
func Fans(t *torch.Tensor) (fanIn, fanOut int64) {
	s := t.Shape()
	if len(s) < 2 {
		panic("nn: fan in and fan out need a tensor of at least 2 dimensions")
	}
	rf := int64(1)
	for _, d := range s[2:] {
		rf *= d
	}
	return s[1] * rf, s[0] * rf
}

// InitKaimingUniform is nn.init.kaiming_uniform_(t, a, mode="fan_in" or "fan_out",
// nonlinearity="leaky_relu"): U(-b, b) with b = sqrt(3) * sqrt(2/(1+a²)) / sqrt(fan).
// With a = sqrt(5) this is Linear's and Conv2d's default: b = 1/sqrt(fan_in).
func InitKaimingUniform(t *torch.Tensor, a float64, fanOut bool) {
	b := math.Sqrt(3) * math.Sqrt(2/(1+a*a)) / math.Sqrt(float64(fan(t, fanOut)))
	InitUniform(t, -b, b)
}

// InitKaimingNormal is nn.init.kaiming_normal_(t, mode="fan_in" or "fan_out",
// nonlinearity="relu"): N(0, 2/fan), torchvision's initialisation for ResNet convs.
func InitKaimingNormal(t *torch.Tensor, fanOut bool) {
	InitNormal(t, 0, math.Sqrt(2/float64(fan(t, fanOut))))
}

// fan is t's fan_out when fanOut is set, its fan_in otherwise.
func fan(t *torch.Tensor, fanOut bool) int64 {
	in, out := Fans(t)
	if fanOut {
		return out
	}
	return in
}

// resetParams registers "weight" of the given shape and, unless noBias, "bias"
// [shape[0]] in b, initialised as Linear's and Conv2d's reset_parameters: the weight
// Kaiming-uniform with a = sqrt(5), the bias uniform in ±1/sqrt(fan_in).
func resetParams(b *Base, noBias bool, shape ...int64) (w, bias *torch.Tensor) {
	w = b.RegisterParameter("weight", newParam(shape...))
	InitKaimingUniform(w, math.Sqrt(5), false)
	if !noBias {
		bias = b.RegisterParameter("bias", newParam(shape[0]))
		fanIn, _ := Fans(w)
		bound := 1 / math.Sqrt(float64(fanIn))
		InitUniform(bias, -bound, bound)
	}
	return w, bias
}

// newParam returns an uninitialised float32 tensor on the CPU.
func newParam(shape ...int64) *torch.Tensor { return torch.Empty(shape, torch.Float32, torch.CPU) }
