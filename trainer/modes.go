package trainer

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Interval says when the Trainer steps the LR scheduler. It marshals to "epoch" and
// "step", the strings of config.json.
type Interval int

// The intervals. The zero value is PerEpoch, the seed's behaviour.
const (
	PerEpoch Interval = iota // after each epoch (after validation)
	PerStep                  // after each optimizer step that was not skipped
)

var intervalText = enumText{typ: "Interval", what: "scheduler interval", field: "scheduler_interval", names: []string{"epoch", "step"}}

// String returns the config name.
func (i Interval) String() string { return intervalText.str(int(i)) }

// MarshalText writes the config name.
func (i Interval) MarshalText() ([]byte, error) { return intervalText.marshal(int(i)) }

// UnmarshalText reads "epoch" (or "") and "step".
func (i *Interval) UnmarshalText(b []byte) error { return intervalText.unmarshal(b, (*int)(i)) }

// Direction says whether a monitored metric is better when smaller or larger. It
// marshals to "auto", "min" and "max" (PyTorch Lightning's mode names).
type Direction int

// The directions. The zero value, Auto, takes the direction from the metric's name
// (see DirectionOf).
const (
	Auto Direction = iota
	Min
	Max
)

var directionText = enumText{typ: "Direction", what: "monitor direction", field: "monitor_mode", names: []string{"auto", "min", "max"}}

// String returns the config name.
func (d Direction) String() string { return directionText.str(int(d)) }

// MarshalText writes the config name.
func (d Direction) MarshalText() ([]byte, error) { return directionText.marshal(int(d)) }

// UnmarshalText reads "auto" (or ""), "min" and "max".
func (d *Direction) UnmarshalText(b []byte) error { return directionText.unmarshal(b, (*int)(d)) }

// knownDirections lists metric names whose direction is unambiguous. A monitored name is
// looked up as is and without a train_/val_/test_ prefix.
var knownDirections = map[string]Direction{
	"loss": Min, "nll": Min, "mse": Min, "mae": Min, "rmse": Min, "l1": Min, "perplexity": Min, "ppl": Min,
	"error": Min, "err": Min, "wer": Min, "cer": Min, "bpb": Min,
	"acc": Max, "accuracy": Max, "top1": Max, "top5": Max, "acc1": Max, "acc5": Max, "f1": Max, "precision": Max,
	"recall": Max, "auc": Max, "auroc": Max, "ap": Max, "map": Max, "iou": Max, "miou": Max, "dice": Max,
	"bleu": Max, "rouge": Max, "r2": Max,
}

// DirectionOf returns the direction of a known metric name ("val_loss" is Min, "val_acc"
// and "f1" are Max) and false for a name it does not know: such a metric needs an
// explicit direction (Config.MonitorMode).
func DirectionOf(name string) (Direction, bool) {
	for _, p := range []string{"", "train_", "val_", "test_"} {
		if base, ok := strings.CutPrefix(name, p); ok {
			if d, ok := knownDirections[base]; ok {
				return d, true
			}
		}
	}
	return Auto, false
}

// resolve returns Min or Max for metric name: d itself unless it is Auto.
func (d Direction) resolve(name string) (Direction, error) {
	if d == Min || d == Max {
		return d, nil
	}
	if d != Auto {
		_, err := directionText.marshal(int(d))
		return d, err
	}
	known, ok := DirectionOf(name)
	if !ok {
		return Auto, fmt.Errorf("trainer: monitor %q is not a known metric name, so whether it is maximised is unknown: set monitor_mode (Config.MonitorMode, --monitor-mode) to min or max", name)
	}
	return known, nil
}

// better reports whether a improves on b in direction d (Min or Max); NaN never does.
func (d Direction) better(a, b float64) bool {
	if math.IsNaN(a) {
		return false
	}
	if d == Max {
		return a > b
	}
	return a < b
}

// worst is the starting "best" value: +Inf when minimising, -Inf when maximising.
func (d Direction) worst() float64 {
	if d == Max {
		return math.Inf(-1)
	}
	return math.Inf(1)
}

// enumText is an enum's config names, by value: its String, MarshalText and
// UnmarshalText ("" reads as the zero value).
type enumText struct {
	typ, what, field string
	names            []string
}

func (e enumText) str(i int) string {
	if i >= 0 && i < len(e.names) {
		return e.names[i]
	}
	return fmt.Sprintf("trainer.%s(%d)", e.typ, i)
}

func (e enumText) marshal(i int) ([]byte, error) {
	if i < 0 || i >= len(e.names) {
		return nil, fmt.Errorf("trainer: invalid %s %d", e.what, i)
	}
	return []byte(e.names[i]), nil
}

func (e enumText) unmarshal(b []byte, out *int) error {
	i := slices.Index(e.names, string(b))
	if len(b) == 0 {
		i = 0
	}
	if i < 0 {
		last := len(e.names) - 1
		return fmt.Errorf("%s must be %s or %s, got %q", e.field, strings.Join(e.names[:last], ", "), e.names[last], b)
	}
	*out = i
	return nil
}
