// Package hyper holds the per-group hyperparameters of the optimizer kernels, shared by
// package cgotorch (which lays them out as C structs) and package torch (which exports
// them as torch.SGDHyper and the others), so that they are declared once.
package hyper

// SGD is one parameter group's torch.optim.SGD hyperparameters.
type SGD struct {
	LR, Momentum, Dampening, WeightDecay float64
	Nesterov, Maximize                   bool
}

// Adam is one parameter group's torch.optim.Adam hyperparameters; AdamW is Adam with
// DecoupledWeightDecay, and Fused selects PyTorch's fused=True kernel.
type Adam struct {
	LR, Beta1, Beta2, Eps, WeightDecay             float64
	AMSGrad, Maximize, DecoupledWeightDecay, Fused bool
}

// RMSprop is one parameter group's torch.optim.RMSprop hyperparameters.
type RMSprop struct {
	LR, Alpha, Eps, WeightDecay, Momentum float64
	Centered, Maximize                    bool
}

// Adagrad is one parameter group's torch.optim.Adagrad hyperparameters.
type Adagrad struct {
	LR, LRDecay, Eps, WeightDecay, InitialAccumulatorValue float64
	Maximize                                               bool
}
