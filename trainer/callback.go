package trainer

import "github.com/gotrain/gotrain/checkpoint"

// Event is a point in training where callbacks run.
type Event int

// The events. A window of micro-batches meets BeforeBackward and BatchEnd for each but
// the last, then BeforeBackward, BeforeOptimizerStep, AfterOptimizerStep, BatchEnd.
const (
	TrainBegin          Event = iota // Run starts (after a resume is restored)
	EpochBegin                       // an epoch starts (also when resuming into its middle)
	BeforeBackward                   // a micro-batch's loss is computed (Trainer.StepLoss, Trainer.Batch)
	BatchEnd                         // a training micro-batch is done: after its backward pass and, when it completes a window, after AfterOptimizerStep (in every step path)
	Logged                           // a logging point's sums were read, after its batch's BatchEnd (Trainer.LastLoss, TrainMetrics; every Config.LogEvery batches and the epoch's last)
	BeforeOptimizerStep              // gradients are complete (averaged, unscaled, clipped)
	AfterOptimizerStep               // the optimizer stepped (or skipped), GlobalStep counts it
	ValidationBatchEnd               // a validation batch finished (Trainer.StepLoss, Trainer.Batch)
	ValidationEnd                    // validation finished (Trainer.Metrics holds its results)
	Evaluated                        // an evaluation point's Record is in History: each epoch's end, or every Config.EvalEvery steps and at Config.MaxSteps
	EpochEnd                         // an epoch finished (its Record, at an epoch's end evaluation, is in History)
	TrainEnd                         // Run returns (also on error or interruption)
	Resumed                          // LoadCheckpoint restored the training state (before any Run)
)

var eventNames = [...]string{"train_begin", "epoch_begin", "before_backward", "batch_end", "logged", "before_optimizer_step",
	"after_optimizer_step", "validation_batch_end", "validation_end", "evaluated", "epoch_end", "train_end", "resumed"}

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

// EventSet is a set of Events.
type EventSet uint32

// Events returns the set of es.
func Events(es ...Event) EventSet {
	var s EventSet
	for _, e := range es {
		s |= 1 << uint(e)
	}
	return s
}

// Has reports whether e is in s.
func (s EventSet) Has(e Event) bool { return s&(1<<uint(e)) != 0 }

// allEvents is the set of every event.
const allEvents = EventSet(1<<(TrainEnd+1) - 1)

// Subscriber is implemented by callbacks that act at some events only: the Trainer calls
// them at those alone. A callback without it is called at every event; a Trainer must
// then stop at each, which keeps it from running its default step in one call into
// libtorch (WithOneCallStep), or a run of steps in one (WithStepsPerCall). All of this
// package's callbacks are Subscribers. The Trainer asks Events at every event and at the
// start of every epoch, so a callback may stop listening once it has what it needs (a
// recorder of the first epoch's losses), and the later epochs run as if it were not
// there.
type Subscriber interface {
	Events() EventSet
}

// On returns a callback that calls f at the given events only.
func On(f CallbackFunc, events ...Event) Callback { return &onEvents{f: f, set: Events(events...)} }

type onEvents struct {
	f   CallbackFunc
	set EventSet
}

func (o *onEvents) OnEvent(e Event, t *Trainer) error { return o.f(e, t) }
func (o *onEvents) Events() EventSet                  { return o.set }

// eventsOf is the events cb is called at.
func eventsOf(cb Callback) EventSet {
	if s, ok := cb.(Subscriber); ok {
		return s.Events()
	}
	return allEvents
}

// Stateful is implemented by callbacks whose state must survive a resume (early
// stopping's counters, the checkpoint manager's top-k table). The trainer saves the state
// in its checkpoints under StateKey.
type Stateful interface {
	StateKey() string
	StateDict() *checkpoint.Dict
	LoadStateDict(d *checkpoint.Dict) error
}
