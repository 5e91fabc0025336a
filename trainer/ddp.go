package trainer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/distributed"
	"github.com/gotrain/gotrain/torch/nn"
)

// WithDistributed makes the trainer one rank of data-parallel training over pg, as
// PyTorch's DistributedDataParallel does:
//
//   - New broadcasts rank 0's parameters and buffers to every rank;
//   - after the last micro-batch of each accumulation window, gradients are averaged
//     across ranks (bucketed all-reduces of about 25 MB), before unscaling and clipping;
//   - the train loader must split the data by rank (data.LoaderOptions Rank and
//     WorldSize, DistributedSampler semantics), or have a custom sampler;
//   - epoch metrics are reduced across ranks, so every rank sees global values, and a
//     stop on any rank (early stopping) stops them all after the same epoch;
//   - only rank 0 writes the run directory (config, checkpoints, history, TensorBoard)
//     and prints; the other ranks run without a run directory and silently.
//
// With device "" or "auto" a rank uses cuda:LocalRank when CUDA is available. Every
// rank must build the same model and optimizer and, on resume, load the same
// checkpoint with the same world size.
func WithDistributed(pg *distributed.ProcessGroup) Option {
	return func(t *Trainer) error {
		if pg == nil {
			return errors.New("trainer: WithDistributed: nil process group")
		}
		t.dist = pg
		return nil
	}
}

// Distributed returns the process group of WithDistributed, nil for a single process.
func (t *Trainer) Distributed() *distributed.ProcessGroup { return t.dist }

// IsMain reports whether this trainer writes files and output: true for a single
// process and for rank 0.
func (t *Trainer) IsMain() bool { return t.dist == nil || t.dist.IsMain() }

// setupDistributed runs in New before the device is resolved.
func (t *Trainer) setupDistributed() error {
	if t.dist == nil {
		return nil
	}
	if s, ok := t.Train.Sampler().(*data.DistributedSampler); ok && (s.WorldSize != t.dist.WorldSize() || s.Rank != t.dist.Rank()) {
		return fmt.Errorf("trainer: rank %d of %d: the train loader splits the data for rank %d of %d; build it with data.LoaderOptions{Rank: %d, WorldSize: %d}",
			t.dist.Rank(), t.dist.WorldSize(), s.Rank, s.WorldSize, t.dist.Rank(), t.dist.WorldSize())
	}
	switch t.Config.Device {
	case "", "auto", "cuda":
		t.Config.Device = t.dist.Device().String()
	}
	if d := t.dist.Device(); d.IsCUDA() && t.Config.Device == d.String() && d.Index >= torch.CUDADeviceCount() {
		return fmt.Errorf("trainer: rank %d has LOCAL_RANK %d but only %d CUDA devices are visible: start at most %d processes per node",
			t.dist.Rank(), t.dist.LocalRank(), torch.CUDADeviceCount(), torch.CUDADeviceCount())
	}
	if t.dist.Backend() == distributed.NCCL && !strings.HasPrefix(t.Config.Device, "cuda") {
		return fmt.Errorf("trainer: rank %d: the process group uses NCCL, which reduces GPU tensors, but the device is %q: train on cuda, or join with backend gloo",
			t.dist.Rank(), t.Config.Device)
	}
	if !t.dist.IsMain() {
		t.Out = io.Discard
		t.RunDir = ""
	}
	return nil
}

// syncFromMain runs at the end of New: every rank starts from rank 0's weights.
func (t *Trainer) syncFromMain() (err error) {
	if t.dist == nil {
		return nil
	}
	defer torch.Recover(&err, "broadcasting the model from rank 0")
	ts := slices.Clone(t.params)
	for _, b := range nn.NamedBuffers(t.Model) {
		ts = append(ts, b.Tensor)
	}
	return t.dist.Broadcast(ts, 0)
}

// allReduceGradients averages the gradients across ranks, once per optimizer step.
func (t *Trainer) allReduceGradients() error {
	if t.dist == nil {
		return nil
	}
	if err := t.dist.AllReduceGradients(t.params, distributed.DefaultBucketBytes); err != nil {
		return fmt.Errorf("epoch %d batch %d: %w", t.Epoch+1, t.BatchInEpoch, err)
	}
	return nil
}

// globalEpochStats returns the epoch's training statistics summed over the ranks (the
// elapsed and waiting times are the slowest rank's).
func (t *Trainer) globalEpochStats() (epochStats, error) {
	st := t.epochStats
	if t.dist == nil {
		return st, nil
	}
	sums, err := t.dist.AllReduceFloat64s([]float64{st.LossSum, float64(st.Batches), float64(st.Samples), st.GradNormSum, float64(st.Steps), float64(st.Skipped)}, distributed.Sum)
	if err != nil {
		return st, fmt.Errorf("epoch %d: reducing training metrics: %w", t.Epoch+1, err)
	}
	maxes, err := t.dist.AllReduceFloat64s([]float64{st.Elapsed, st.Wait}, distributed.Max)
	if err != nil {
		return st, fmt.Errorf("epoch %d: reducing training metrics: %w", t.Epoch+1, err)
	}
	w := float64(t.dist.WorldSize())
	st.LossSum, st.Batches, st.Samples = sums[0], int(sums[1]), int64(sums[2])
	// Gradients are averaged before clipping, so every rank saw the same norms and
	// steps: the sums are divided back.
	st.GradNormSum, st.Steps, st.Skipped = sums[3]/w, int(math.Round(sums[4]/w)), int(math.Round(sums[5]/w))
	st.Elapsed, st.Wait = maxes[0], maxes[1]
	return st, nil
}

// reduceValidation sums validation totals over the ranks. The averages are ratios of
// sums, so they are right whether the validation loader is split by rank or not.
func (t *Trainer) reduceValidation(lossSum, correct *float64, n *int64, batches *int, sums map[string]float64) error {
	if t.dist == nil {
		return nil
	}
	names := make([]string, 0, len(t.metrics))
	for name := range t.metrics {
		names = append(names, name)
	}
	slices.Sort(names)
	vs := []float64{*lossSum, *correct, float64(*n), float64(*batches)}
	for _, name := range names {
		vs = append(vs, sums[name])
	}
	out, err := t.dist.AllReduceFloat64s(vs, distributed.Sum)
	if err != nil {
		return fmt.Errorf("epoch %d: reducing validation metrics: %w", t.Epoch+1, err)
	}
	*lossSum, *correct, *n, *batches = out[0], out[1], int64(out[2]), int(out[3])
	for i, name := range names {
		sums[name] = out[4+i]
	}
	return nil
}

// agreeToStop makes a stop on any rank (early stopping runs on rank 0 only) a stop on
// every rank after the same epoch.
func (t *Trainer) agreeToStop() error {
	if t.dist == nil {
		return nil
	}
	flag := 0.0
	if t.stopReason != "" {
		flag = 1
	}
	out, err := t.dist.AllReduceFloat64s([]float64{flag}, distributed.Max)
	if err != nil {
		return fmt.Errorf("epoch %d: agreeing to stop: %w", t.Epoch, err)
	}
	if out[0] != 0 {
		t.Stop("stopped on another rank")
	}
	return nil
}

// ErrInterruptedElsewhere is the cause of an interruption that another rank asked for.
var ErrInterruptedElsewhere = errors.New("interrupted on another rank")

// interruption reports why training must stop before the next optimizer step: ctx's
// error for a single process. With DDP a signal reaches the ranks at slightly different
// moments, so the ranks all-reduce their flags before every step and all stop at the
// same one; rank 0 then saves a checkpoint every rank can resume from.
func (t *Trainer) interruption(ctx context.Context) (error, error) {
	if t.dist == nil {
		return ctx.Err(), nil
	}
	flag := 0.0
	if ctx.Err() != nil {
		flag = 1
	}
	out, err := t.dist.AllReduceFloat64s([]float64{flag}, distributed.Max)
	if err != nil {
		return nil, fmt.Errorf("epoch %d batch %d: agreeing on an interruption: %w", t.Epoch+1, t.BatchInEpoch, err)
	}
	switch {
	case out[0] == 0:
		return nil, nil
	case ctx.Err() != nil:
		return ctx.Err(), nil
	}
	return ErrInterruptedElsewhere, nil
}

// gatherEpochProgress runs on every rank when they stop mid-epoch together: the epoch's
// running sums become the sums over all ranks, so that rank 0's last.pt holds the whole
// job's progress and not rank 0's share alone.
func (t *Trainer) gatherEpochProgress() error {
	if t.dist == nil {
		return nil
	}
	st, err := t.globalEpochStats()
	if err != nil {
		return err
	}
	t.epochStats = st
	return nil
}

// scatterEpochProgress undoes gatherEpochProgress after a resume: every rank loaded the
// job's sums, and the epoch's end adds the ranks' sums up again, so only rank 0 keeps
// the summed counts. The per-step averages (grad norm, steps, skipped) and the times are
// the same on every rank and stay.
func (t *Trainer) scatterEpochProgress() {
	if t.dist != nil && !t.dist.IsMain() {
		t.epochStats.LossSum, t.epochStats.Batches, t.epochStats.Samples = 0, 0, 0
	}
}
