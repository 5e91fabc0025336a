package trainer

import (
	"github.com/gotrain/gotrain/amp"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
)

// LossFunc adapts a function to an nn.Loss, as http.HandlerFunc does: New and the
// default steps take the loss as an nn.Loss, so that nn's loss modules go in as they are
// (&nn.CrossEntropyLoss{}) and the Trainer can tell a built-in loss it may run in one
// call into libtorch (WithFusedStep).
type LossFunc func(output, target *torch.Tensor) *torch.Tensor

// Forward calls f.
func (f LossFunc) Forward(output, target *torch.Tensor) *torch.Tensor { return f(output, target) }

// Metrics are named scalar tensors that a step computes for one batch, each a mean over
// the batch (accuracy, a term of the loss). The Trainer adds them up on the device,
// weighted by batch size, and reads them back to Go only at logging points and at the
// end of an epoch; they are recorded as train_<name> and val_<name>.
type Metrics map[string]*torch.Tensor

// Step computes one batch's loss and metrics: the part of training the user owns, as
// Lightning's training_step and validation_step. The loss is a scalar, a mean over the
// batch; the Trainer owns everything around it — moving the batch to the device,
// autocast, loss scaling, accumulation, backward, clipping, the optimizer and scheduler
// steps, gradient averaging across processes, scopes, interruption and checkpoints. A
// step runs inside the Trainer's scope (what it creates is freed after the step) and,
// for evaluation, under torch.NoGrad. It must not read tensor values back to Go if a
// CUDA run is to have no host synchronisation per step. It returns the same metric
// names for every batch (with several processes, the sums are reduced name by name).
//
// Misuse inside a step (a shape mismatch) panics with a *torch.Error, which the Trainer
// returns as an error naming the epoch and batch; any other panic (a nil dereference)
// reaches the caller of Run unchanged, with its stack.
type Step func(model nn.Module, b data.Batch) (loss *torch.Tensor, metrics Metrics)

// ClassificationStep is the default evaluation step: loss(model(input), target) and,
// when the target holds int64 class labels, the accuracy "acc" of the output's argmax
// (recorded as val_acc). As a training step (WithTrainStep) it also records train_acc,
// at four more ops a batch.
func ClassificationStep(loss nn.Loss) Step {
	return func(model nn.Module, b data.Batch) (*torch.Tensor, Metrics) {
		y := batchTarget(b)
		out := model.Forward(batchInput(b))
		l := loss.Forward(out, y)
		if y.DType() != torch.Int64 || out.Dim() != 2 {
			return l, nil
		}
		acc := out.Argmax(1, false).Eq(y).ToDType(torch.Float32).Mean()
		return l, Metrics{"acc": acc}
	}
}

// LossStep is the default training step: loss(model(input), target) and no other
// metric, as the seed's training epoch computes only the loss.
func LossStep(loss nn.Loss) Step {
	return func(model nn.Module, b data.Batch) (*torch.Tensor, Metrics) {
		return loss.Forward(model.Forward(batchInput(b)), batchTarget(b)), nil
	}
}

// WithTrainStep sets the training step (default: LossStep over New's loss). The
// evaluation step defaults to the same function, run under torch.NoGrad; without
// WithTrainStep it is ClassificationStep over New's loss.
func WithTrainStep(s Step) Option { return func(t *Trainer) error { t.trainStep = s; return nil } }

// WithEvalStep sets the validation step (default: the training step).
func WithEvalStep(s Step) Option { return func(t *Trainer) error { t.evalStep = s; return nil } }

// runStep runs s on b under the trainer's autocast setting.
func (t *Trainer) runStep(s Step, b data.Batch) (loss *torch.Tensor, ms Metrics) {
	run := func() { loss, ms = s(t.Model, b) }
	if dt, ok := t.Config.AMP.DType(); ok {
		amp.Autocast(t.Device, dt, run)
	} else {
		run()
	}
	return loss, ms
}
