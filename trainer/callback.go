package trainer

import "github.com/gotrain/gotrain/checkpoint"

// Event is a point in training where callbacks run.
type Event int

// The events, in the order a run meets them.
const (
	TrainBegin          Event = iota // Run starts (after a resume is restored)
	EpochBegin                       // an epoch starts (also when resuming into its middle)
	BeforeBackward                   // a micro-batch's loss is computed (Trainer.StepLoss, Trainer.Batch)
	BatchEnd                         // a training micro-batch finished its backward pass
	BeforeOptimizerStep              // gradients are complete (averaged, unscaled, clipped)
	AfterOptimizerStep               // the optimizer stepped (or skipped), GlobalStep counts it
	ValidationBatchEnd               // a validation batch finished (Trainer.StepLoss, Trainer.Batch)
	ValidationEnd                    // validation finished (Trainer.Metrics holds its results)
	EpochEnd                         // an epoch finished and its Record is in History
	TrainEnd                         // Run returns (also on error or interruption)
)

var eventNames = [...]string{"train_begin", "epoch_begin", "before_backward", "batch_end", "before_optimizer_step",
	"after_optimizer_step", "validation_batch_end", "validation_end", "epoch_end", "train_end"}

// String returns the event's name.
func (e Event) String() string {
	if int(e) < len(eventNames) {
		return eventNames[e]
	}
	return "event"
}

// Callback is called at every Event with the trainer, whose state (epoch, step,
// history, metrics, best metric) it may read. It stops training by calling t.Stop.
// An error aborts the run.
type Callback interface {
	OnEvent(e Event, t *Trainer) error
}

// CallbackFunc adapts a function to a Callback, as http.HandlerFunc does.
type CallbackFunc func(e Event, t *Trainer) error

// OnEvent calls f.
func (f CallbackFunc) OnEvent(e Event, t *Trainer) error { return f(e, t) }

// Stateful is implemented by callbacks whose state must survive a resume (early
// stopping's counters, the checkpoint manager's top-k table). The trainer saves the state
// in its checkpoints under StateKey.
type Stateful interface {
	StateKey() string
	StateDict() *checkpoint.Dict
	LoadStateDict(d *checkpoint.Dict) error
}
