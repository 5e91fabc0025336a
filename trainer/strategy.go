package trainer

import (
	"context"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/distributed"
)

// Strategy is how training is spread over processes, Lightning Fabric's idea reduced to
// what the loop needs: the loop calls it at fixed points and never asks which one it
// has. SingleProcess is the default; DataParallel (WithDistributed) is PyTorch's
// DistributedDataParallel; FullyShardedDataParallel (WithFSDP) is its FSDP2.
type Strategy interface {
	// Configure runs in New before the device is resolved: it may choose the device
	// (Config.Device) and silence a process that is not the main one.
	Configure(t *Trainer) error
	// Start runs at the end of New, once the model is on its device: data parallelism
	// gives every process the main process's weights.
	Start(t *Trainer) error
	// ReduceGradients runs once per optimizer step, after the last backward of the
	// accumulation window and before unscaling and clipping.
	ReduceGradients(params []*torch.Tensor) error
	// AllReduce combines per-process values element-wise (sums, maxima); with one process
	// it returns vs.
	AllReduce(vs []float64, op distributed.ReduceOp) ([]float64, error)
	// SumTensors adds up tensors across processes in place, on their device (the
	// items a window's loss is over, NumItems); with one process it does nothing.
	SumTensors(ts []*torch.Tensor) error
	// Interrupted runs before every optimizer step and says whether to stop there, and
	// why (ctx's error, or ErrInterruptedElsewhere); every process must stop at the same
	// step.
	Interrupted(ctx context.Context) (cause error, err error)
	// IsMain reports whether this process prints and writes the run directory.
	IsMain() bool
	// WorldSize is the number of processes.
	WorldSize() int
}

// WithStrategy sets the strategy (default SingleProcess).
func WithStrategy(s Strategy) Option { return func(t *Trainer) error { t.strategy = s; return nil } }

// SingleProcess trains in this process alone: every hook is the identity.
type SingleProcess struct{}

// Configure does nothing.
func (SingleProcess) Configure(*Trainer) error { return nil }

// Start does nothing.
func (SingleProcess) Start(*Trainer) error { return nil }

// ReduceGradients does nothing: the gradients are this process's.
func (SingleProcess) ReduceGradients([]*torch.Tensor) error { return nil }

// AllReduce returns vs.
func (SingleProcess) AllReduce(vs []float64, _ distributed.ReduceOp) ([]float64, error) {
	return vs, nil
}

// SumTensors does nothing: the tensors are this process's.
func (SingleProcess) SumTensors([]*torch.Tensor) error { return nil }

// Interrupted returns ctx's error.
func (SingleProcess) Interrupted(ctx context.Context) (error, error) { return ctx.Err(), nil }

// IsMain is true.
func (SingleProcess) IsMain() bool { return true }

// WorldSize is 1.
func (SingleProcess) WorldSize() int { return 1 }
