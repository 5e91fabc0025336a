package trainer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/distributed"
	"github.com/gotrain/gotrain/torch/nn"
)

// DataParallel is the Strategy of data-parallel training over a process group, as
// PyTorch's DistributedDataParallel:
//
//   - New broadcasts rank 0's parameters and buffers to every rank;
//   - after the last micro-batch of each accumulation window, gradients are averaged
//     across ranks (bucketed all-reduces of about 25 MB), before unscaling and clipping;
//   - the train loader must split the data by rank (data.LoaderOptions Rank and
//     WorldSize, DistributedSampler semantics), or have a custom sampler;
//   - epoch metrics are reduced across ranks, so every rank sees global values and
//     takes the same decisions (early stopping, the best checkpoint) after each epoch;
//   - only rank 0 writes the run directory (config, checkpoints, history, TensorBoard)
//     and prints; the other ranks run without a run directory and silently.
//
// With device "" or "auto" a rank uses cuda:LocalRank when CUDA is available. Every
// rank must build the same model and optimizer and, on resume, load the same
// checkpoint with the same world size.
type DataParallel struct {
	// Group is the process group, one rank per process.
	Group *distributed.ProcessGroup
	// BucketBytes is the all-reduce bucket size (default distributed.DefaultBucketBytes).
	BucketBytes int64
}

// WithDistributed makes the trainer one rank of data-parallel training over pg:
// WithStrategy(&DataParallel{Group: pg}).
func WithDistributed(pg *distributed.ProcessGroup) Option {
	return func(t *Trainer) error {
		if pg == nil {
			return errors.New("trainer: WithDistributed: nil process group")
		}
		t.strategy = &DataParallel{Group: pg}
		return nil
	}
}

// Distributed returns the process group of a DataParallel strategy, nil otherwise.
func (t *Trainer) Distributed() *distributed.ProcessGroup {
	if dp, ok := t.strategy.(*DataParallel); ok {
		return dp.Group
	}
	return nil
}

// Configure checks the train loader's split, picks the rank's device and silences the
// ranks other than 0.
func (d *DataParallel) Configure(t *Trainer) error {
	pg := d.Group
	if s, ok := t.Train.Sampler().(*data.DistributedSampler); ok && (s.WorldSize != pg.WorldSize() || s.Rank != pg.Rank()) {
		return fmt.Errorf("trainer: rank %d of %d: the train loader splits the data for rank %d of %d; build it with data.LoaderOptions{Rank: %d, WorldSize: %d}",
			pg.Rank(), pg.WorldSize(), s.Rank, s.WorldSize, pg.Rank(), pg.WorldSize())
	}
	switch t.cfg.Device {
	case "", "auto", "cuda":
		t.cfg.Device = pg.Device().String()
	}
	if dev := pg.Device(); dev.IsCUDA() && t.cfg.Device == dev.String() && dev.Index >= torch.CUDADeviceCount() {
		return fmt.Errorf("trainer: rank %d has LOCAL_RANK %d but only %d CUDA devices are visible: start at most %d processes per node",
			pg.Rank(), pg.LocalRank(), torch.CUDADeviceCount(), torch.CUDADeviceCount())
	}
	if pg.Backend() == distributed.NCCL && !strings.HasPrefix(t.cfg.Device, "cuda") {
		return fmt.Errorf("trainer: rank %d: the process group uses NCCL, which reduces GPU tensors, but the device is %q: train on cuda, or join with backend gloo",
			pg.Rank(), t.cfg.Device)
	}
	if !pg.IsMain() {
		t.Out = io.Discard
		t.RunDir = ""
	}
	return nil
}

// Start broadcasts rank 0's parameters and buffers.
func (d *DataParallel) Start(t *Trainer) (err error) {
	defer torch.Recover(&err, "broadcasting the model from rank 0")
	ts := slices.Clone(t.params)
	for _, b := range nn.NamedBuffers(t.Model) {
		ts = append(ts, b.Tensor)
	}
	return d.Group.Broadcast(ts, 0)
}

// ReduceGradients averages the gradients across ranks.
func (d *DataParallel) ReduceGradients(params []*torch.Tensor) error {
	bucket := d.BucketBytes
	if bucket <= 0 {
		bucket = distributed.DefaultBucketBytes
	}
	return d.Group.AllReduceGradients(params, bucket)
}

// SumTensors sums ts over the ranks in place.
func (d *DataParallel) SumTensors(ts []*torch.Tensor) error {
	return d.Group.AllReduce(ts, distributed.Sum)
}

// AllReduce reduces vs over the ranks.
func (d *DataParallel) AllReduce(vs []float64, op distributed.ReduceOp) ([]float64, error) {
	return d.Group.AllReduceFloat64s(vs, op)
}

// ErrInterruptedElsewhere is the cause of an interruption that another rank asked for.
var ErrInterruptedElsewhere = errors.New("interrupted on another rank")

// Interrupted agrees on a stop: a signal reaches the ranks at slightly different
// moments, so they all-reduce their flags before every step and all stop at the same
// one; rank 0 then saves a checkpoint every rank can resume from.
func (d *DataParallel) Interrupted(ctx context.Context) (error, error) {
	flag := 0.0
	if ctx.Err() != nil {
		flag = 1
	}
	out, err := d.Group.AllReduceFloat64s([]float64{flag}, distributed.Max)
	switch {
	case err != nil:
		return nil, fmt.Errorf("agreeing on an interruption: %w", err)
	case out[0] == 0:
		return nil, nil
	case ctx.Err() != nil:
		return ctx.Err(), nil
	}
	return ErrInterruptedElsewhere, nil
}

// IsMain reports whether this is rank 0.
func (d *DataParallel) IsMain() bool { return d.Group.IsMain() }

// WorldSize is the number of ranks.
func (d *DataParallel) WorldSize() int { return d.Group.WorldSize() }
