// Package nn builds models from layers the way torch.nn does, with PyTorch's parameter
// names, so that a Go model and the same Python model load each other's state dicts
// with strict=True.
//
// A module is a Go struct that embeds Base and registers its parameters, buffers and
// submodules under their PyTorch names, in PyTorch's order:
//
//	type Net struct {
//		nn.Base
//		fc1, fc2 *nn.Linear
//	}
//
//	func NewNet() *Net {
//		n := &Net{}
//		n.fc1 = nn.Register(&n.Base, "fc1", nn.NewLinear(784, 128))
//		n.fc2 = nn.Register(&n.Base, "fc2", nn.NewLinear(128, 10))
//		return n
//	}
//
//	func (n *Net) Forward(x *torch.Tensor) *torch.Tensor {
//		return n.fc2.Forward(n.fc1.Forward(x.Flatten(1, -1)).ReLU())
//	}
//
// The package functions NamedParameters, StateDict, LoadStateDict, SetTraining,
// ToDevice and Free walk the registered tree. Parameters and buffers belong to their
// module (no scope frees them); Free releases them. Forward passes create their results
// in the current scope, like any tensor operation.
//
// Layers initialise their parameters as PyTorch does, drawing from torch's default
// generator in PyTorch's order, so after the same torch.ManualSeed a Go model starts
// with the same weights as its Python twin (to float rounding). LoadScript loads a TorchScript
// module saved by Python, which then trains like any other Module.
package nn
