package trainer

import (
	"fmt"
	"reflect"

	"github.com/gotrain/gotrain/amp"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
)

// LossFunc adapts a function to an nn.Loss, as http.HandlerFunc does: New and the
// default steps take the loss as an nn.Loss, so that nn's loss modules go in as they are
// (&nn.CrossEntropyLoss{}) and the Trainer can tell a built-in loss it may run in one
// call into libtorch (WithOneCallStep).
type LossFunc func(output, target *torch.Tensor) *torch.Tensor

// Forward calls f.
func (f LossFunc) Forward(output, target *torch.Tensor) *torch.Tensor { return f(output, target) }

// Metrics are named scalar tensors that a step computes for one batch, each a mean over
// the batch (accuracy, a term of the loss). The Trainer adds them up on the device,
// weighted by batch size, and reads them back to Go only at logging points and at the
// end of an epoch; they are recorded as train_<name> and val_<name>.
type Metrics map[string]*torch.Tensor

// Step computes one batch's loss and metrics: the part of training the user owns, as
// Lightning's training_step and validation_step. It is generic over the model's type M,
// so a step calls its model's own forward — with the inputs that model needs — with no
// type assertion: a two-input model's step is a func(*Net, data.Batch).
//
// The loss is a scalar, a mean over the batch; the Trainer owns everything around it —
// moving the batch to the device, autocast, loss scaling, accumulation, backward,
// clipping, the optimizer and scheduler steps, gradient averaging across processes,
// scopes, interruption and checkpoints. A step runs inside the Trainer's scope (what it
// creates is freed after the step) and, for evaluation, under torch.NoGrad. It must not
// read tensor values back to Go if a CUDA run is to have no host synchronisation per
// step. It returns the same metric names for every batch (with several processes, the
// sums are reduced name by name).
//
// Misuse inside a step (a shape mismatch) panics with a *torch.Error, which the Trainer
// returns as an error naming the epoch and batch; any other panic (a nil dereference)
// reaches the caller of Run unchanged, with its stack.
type Step[M nn.Module] func(model M, b data.Batch) (loss *torch.Tensor, metrics Metrics)

// boundStep is a Step with its model bound: the Trainer checks the model's type once,
// in New, and calls the step per batch with no assertion.
type boundStep func(b data.Batch) (*torch.Tensor, Metrics)

// bind returns s over model, or an error when model is not an M.
func bind[M nn.Module](s Step[M], model nn.Module, which string) (boundStep, error) {
	m, ok := model.(M)
	if !ok {
		return nil, fmt.Errorf("trainer: the %s step takes a %s, but the model is a %T", which, typeName[M](), model)
	}
	return func(b data.Batch) (*torch.Tensor, Metrics) { return s(m, b) }, nil
}

// typeName names M for an error message, an interface type included.
func typeName[M any]() string { return reflect.TypeFor[M]().String() }

// ClassificationStep is the default evaluation step: loss(model(input), target) and,
// when the target holds int64 class labels, the accuracy "acc" of the output's argmax
// (recorded as val_acc). As a training step (WithTrainStep) it also records train_acc,
// at four more ops a batch.
func ClassificationStep(loss nn.Loss) Step[nn.Layer] {
	return func(model nn.Layer, b data.Batch) (*torch.Tensor, Metrics) {
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
func LossStep(loss nn.Loss) Step[nn.Layer] {
	return func(model nn.Layer, b data.Batch) (*torch.Tensor, Metrics) {
		return loss.Forward(model.Forward(batchInput(b)), batchTarget(b)), nil
	}
}

// WithTrainStep sets the training step (default: LossStep over New's loss, which needs
// a model with a one-input Forward, an nn.Layer). The evaluation step defaults to the
// same function, run under torch.NoGrad; without WithTrainStep it is
// ClassificationStep over New's loss. New fails when the model is not an M.
func WithTrainStep[M nn.Module](s Step[M]) Option {
	return func(t *Trainer) (err error) {
		t.trainStep, err = bind(s, t.Model, "training")
		return err
	}
}

// WithEvalStep sets the validation step (default: the training step).
func WithEvalStep[M nn.Module](s Step[M]) Option {
	return func(t *Trainer) (err error) {
		t.evalStep, err = bind(s, t.Model, "evaluation")
		return err
	}
}

// runStep runs s on b under the trainer's autocast setting, in a scope of its own that
// keeps only the loss and the metrics: every other tensor the step made (the model's
// intermediate outputs, the logits) is freed when it returns, as eager PyTorch frees a
// forward's locals. Autograd holds what it saved, and backward then frees that as it goes,
// so a step's peak memory is PyTorch's rather than every activation until the step ends.
func (t *Trainer) runStep(s boundStep, b data.Batch) (loss *torch.Tensor, ms Metrics) {
	run := func() {
		sc := torch.NewScope()
		defer sc.Close()
		loss, ms = s(b)
		sc.Keep(loss)
		for _, m := range ms {
			sc.Keep(m)
		}
	}
	if dt, ok := t.cfg.AMP.DType(); ok {
		amp.Autocast(t.Device, dt, run)
	} else {
		run()
	}
	return loss, ms
}
