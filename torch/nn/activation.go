package nn

import "github.com/gotrain/gotrain/torch"

// ReLU is nn.ReLU: max(x, 0).
type ReLU struct{ Base }

// NewReLU returns nn.ReLU().
func NewReLU() *ReLU { return &ReLU{} }

// Forward returns max(x, 0).
func (*ReLU) Forward(x *torch.Tensor) *torch.Tensor { return x.ReLU() }

// LeakyReLU is nn.LeakyReLU(Slope).
type LeakyReLU struct {
	Base
	Slope float64
}

// NewLeakyReLU returns nn.LeakyReLU(slope); PyTorch's default slope is 0.01.
func NewLeakyReLU(slope float64) *LeakyReLU { return &LeakyReLU{Slope: slope} }

// Forward returns x where x ≥ 0, Slope·x elsewhere.
func (l *LeakyReLU) Forward(x *torch.Tensor) *torch.Tensor { return x.LeakyReLU(l.Slope) }

// GELU is nn.GELU, exact or (Tanh) with approximate="tanh".
type GELU struct {
	Base
	Tanh bool
}

// NewGELU returns nn.GELU() (exact).
func NewGELU() *GELU { return &GELU{} }

// Forward returns GELU(x).
func (g *GELU) Forward(x *torch.Tensor) *torch.Tensor { return x.GELU(g.Tanh) }

// SiLU is nn.SiLU: x·sigmoid(x).
type SiLU struct{ Base }

// NewSiLU returns nn.SiLU().
func NewSiLU() *SiLU { return &SiLU{} }

// Forward returns x·sigmoid(x).
func (*SiLU) Forward(x *torch.Tensor) *torch.Tensor { return x.SiLU() }

// Tanh is nn.Tanh.
type Tanh struct{ Base }

// NewTanh returns nn.Tanh().
func NewTanh() *Tanh { return &Tanh{} }

// Forward returns tanh(x).
func (*Tanh) Forward(x *torch.Tensor) *torch.Tensor { return x.Tanh() }

// Sigmoid is nn.Sigmoid.
type Sigmoid struct{ Base }

// NewSigmoid returns nn.Sigmoid().
func NewSigmoid() *Sigmoid { return &Sigmoid{} }

// Forward returns 1/(1+exp(-x)).
func (*Sigmoid) Forward(x *torch.Tensor) *torch.Tensor { return x.Sigmoid() }

// Softmax is nn.Softmax(dim=Dim).
type Softmax struct {
	Base
	Dim int64
}

// NewSoftmax returns nn.Softmax(dim).
func NewSoftmax(dim int64) *Softmax { return &Softmax{Dim: dim} }

// Forward returns softmax(x) along Dim.
func (s *Softmax) Forward(x *torch.Tensor) *torch.Tensor { return x.Softmax(s.Dim) }
