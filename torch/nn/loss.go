package nn

import "github.com/gotrain/gotrain/torch"

// Loss is a criterion: a loss of input against target.
type Loss interface {
	Forward(input, target *torch.Tensor) *torch.Tensor
}

// CrossEntropyLoss is nn.CrossEntropyLoss over logits [N, C] (or [N, C, ...]) and class
// indices or class probabilities. The zero value has PyTorch's defaults: no weight, mean
// reduction, ignore_index -100 (set IgnoreIndex together with IgnoreIndexSet), no label
// smoothing.
type CrossEntropyLoss struct{ torch.CrossEntropyOptions }

// Forward returns the loss.
func (l *CrossEntropyLoss) Forward(input, target *torch.Tensor) *torch.Tensor {
	return torch.CrossEntropy(input, target, l.CrossEntropyOptions)
}

// NLLLoss is nn.NLLLoss over log-probabilities, with the options of CrossEntropyLoss
// (LabelSmoothing is not used).
type NLLLoss struct{ torch.CrossEntropyOptions }

// Forward returns the loss.
func (l *NLLLoss) Forward(input, target *torch.Tensor) *torch.Tensor {
	return torch.NLLLoss(input, target, l.CrossEntropyOptions)
}

// MSELoss is nn.MSELoss: the squared error, reduced by Reduction (mean by default).
type MSELoss struct{ Reduction torch.Reduction }

// Forward returns the loss.
func (l *MSELoss) Forward(input, target *torch.Tensor) *torch.Tensor {
	return torch.MSELoss(input, target, l.Reduction)
}

// L1Loss is nn.L1Loss: the absolute error, reduced by Reduction (mean by default).
type L1Loss struct{ Reduction torch.Reduction }

// Forward returns the loss.
func (l *L1Loss) Forward(input, target *torch.Tensor) *torch.Tensor {
	return torch.L1Loss(input, target, l.Reduction)
}

// SmoothL1Loss is nn.SmoothL1Loss. Beta 0 means PyTorch's default of 1 (beta=0 itself,
// plain L1, is L1Loss).
type SmoothL1Loss struct {
	Reduction torch.Reduction
	Beta      float64
}

// Forward returns the loss.
func (l *SmoothL1Loss) Forward(input, target *torch.Tensor) *torch.Tensor {
	beta := l.Beta
	if beta == 0 {
		beta = 1
	}
	return torch.SmoothL1Loss(input, target, l.Reduction, beta)
}

// BCEWithLogitsLoss is nn.BCEWithLogitsLoss: sigmoid plus binary cross-entropy in one
// stable op, with optional per-element Weight and per-class PosWeight.
type BCEWithLogitsLoss struct {
	Weight, PosWeight *torch.Tensor
	Reduction         torch.Reduction
}

// Forward returns the loss.
func (l *BCEWithLogitsLoss) Forward(input, target *torch.Tensor) *torch.Tensor {
	return torch.BCEWithLogits(input, target, l.Weight, l.PosWeight, l.Reduction)
}
