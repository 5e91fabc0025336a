package trainer

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/gotrain/gotrain/torch"
)

// deviceSums adds up a loop's per-batch scalars where they were computed, so that
// training makes no device-to-host read per step: the sums, the latest batch's loss and
// the first optimizer step whose loss was not finite live in one float64 vector on the
// device, updated by one torch.Accumulate call per batch, and come back to Go together,
// in one read, at logging points and at the end of the epoch.
type deviceSums struct {
	// names are the sums in acc's order: "loss" first when the loss is summed, then the
	// metrics sorted.
	names []string
	// acc holds the sums, then (track) the latest loss and the first global step
	// (1-based) whose loss was NaN or infinite (+Inf while there is none). It lives
	// outside every scope.
	acc   *torch.Tensor
	dev   torch.Device
	track bool            // keep the latest loss and the first bad step (training only)
	vals  []*torch.Tensor // the batch's values in names' order, reused
}

// noStep is beyond any global step: the first-bad-step slot's value for a finite loss.
const noStep = 1e18

// sumsRead is what a read brings back.
type sumsRead struct {
	Sums     map[string]float64
	Last     float64
	FirstBad int64 // 0 when every loss so far was finite
}

// extra is the number of tracking slots after the sums.
func (s *deviceSums) extra() int {
	if s.track {
		return 2
	}
	return 0
}

// add accumulates one batch: loss and each metric times weight (the batch size). step
// is the global step the batch belongs to, for naming a non-finite loss.
func (s *deviceSums) add(loss *torch.Tensor, ms Metrics, weight float64, step int64) {
	if _, ok := ms["loss"]; ok {
		panic(fmt.Errorf("trainer: a step's metrics may not be named \"loss\" (the loss is recorded already)"))
	}
	if !s.hasNames(ms) {
		s.resize(append([]string{"loss"}, slices.Collect(maps.Keys(ms))...))
	}
	s.vals = append(s.vals[:0], loss)
	for _, n := range s.names[1:] {
		v, ok := ms[n]
		if !ok { // a metric an earlier batch had: this batch adds nothing to it
			v = torch.Zeros(nil, torch.Float64, s.dev)
		}
		s.vals = append(s.vals, v)
	}
	flags := torch.AccumulateFlags(0)
	if s.track {
		flags = torch.AccumulateTrack
	}
	torch.Accumulate(s.acc, s.vals, weight, step, flags)
}

// hasNames reports whether acc has a sum for the loss and each of ms.
func (s *deviceSums) hasNames(ms Metrics) bool {
	if s.acc == nil || len(s.names) == 0 || s.names[0] != "loss" {
		return false
	}
	for n := range ms {
		if _, ok := slices.BinarySearch(s.names[1:], n); !ok {
			return false
		}
	}
	return true
}

// addFinite adds v to name's sum when v is finite (a sums of one name only).
func (s *deviceSums) addFinite(name string, v *torch.Tensor) {
	if s.acc == nil || len(s.names) != 1 || s.names[0] != name {
		s.resize([]string{name})
	}
	s.vals = append(s.vals[:0], v)
	torch.Accumulate(s.acc, s.vals, 1, 0, torch.AccumulateSkipNonfinite)
}

// resize makes acc hold the union of its names and names, keeping the sums it has
// (device to device: no read). It runs when a loop's first batch names its metrics.
func (s *deviceSums) resize(names []string) {
	union := append(slices.Clone(names), s.names...)
	sortNames(union)
	union = slices.Compact(union)
	old, oldNames := s.acc, s.names
	s.acc = s.newAcc(make([]float64, len(union)))
	if old != nil {
		torch.WithScope(func() {
			for i, n := range oldNames {
				j := slices.Index(union, n)
				s.acc.Narrow(0, int64(j), 1).CopyFrom(old.Narrow(0, int64(i), 1), false)
			}
			if k := s.extra(); k > 0 {
				s.acc.Narrow(0, int64(len(union)), int64(k)).CopyFrom(old.Narrow(0, int64(len(oldNames)), int64(k)), false)
			}
		})
		old.Free()
	}
	s.names = union
}

// sortNames puts sum names in acc's order: "loss" first, then the others sorted.
func sortNames(names []string) {
	slices.SortFunc(names, func(a, b string) int {
		switch {
		case a == b:
			return 0
		case a == "loss":
			return -1
		case b == "loss":
			return 1
		}
		return strings.Compare(a, b)
	})
}

// newAcc returns an accumulator holding sums and, when tracking, a latest loss of 0 and
// no bad step (+Inf).
func (s *deviceSums) newAcc(sums []float64) *torch.Tensor {
	init := append(slices.Clone(sums), make([]float64, s.extra())...)
	if s.track {
		init[len(sums)+1] = math.Inf(1)
	}
	var acc *torch.Tensor
	torch.WithScope(func() { acc = torch.FromSlice(init).To(s.dev, false).Escape() })
	return acc
}

// read returns the sums: one device-to-host read.
func (s *deviceSums) read() sumsRead {
	r := sumsRead{Sums: map[string]float64{}}
	if s.acc == nil {
		return r
	}
	vals := s.acc.Float64s()
	n := len(s.names)
	for i, name := range s.names {
		r.Sums[name] = vals[i]
	}
	if s.track {
		r.Last = vals[n]
		if fb := vals[n+1]; fb < noStep {
			r.FirstBad = int64(fb)
		}
	}
	return r
}

// set replaces the sums (a resume restores a mid-epoch checkpoint's); the latest loss
// starts at 0 and no step is known to be bad.
func (s *deviceSums) set(sums map[string]float64) {
	s.free()
	if len(sums) == 0 {
		return
	}
	names := slices.Collect(maps.Keys(sums))
	sortNames(names)
	vals := make([]float64, len(names))
	for i, n := range names {
		vals[i] = sums[n]
	}
	s.acc = s.newAcc(vals)
	s.names = names
}

// free releases the accumulator; the sums start again from zero.
func (s *deviceSums) free() {
	s.acc.Free()
	s.acc, s.names, s.vals = nil, nil, s.vals[:0]
}

// NumItems is the metric name under which a step that counts what its loss is over (a
// language model's label tokens) returns that count, a scalar tensor on the device;
// its loss is then the sum over those items rather than a mean. The Trainer weights by
// items instead of samples: a window's gradient is that of one batch holding all the
// items of its k micro-batches on every process (transformers' num_items_in_batch),
// and the recorded train_loss and val_loss are sums over items divided by their
// number, so batches with more label tokens count for more, as in one large batch.
const NumItems = "num_items"

// lossSumKey sums a counted step's loss; "loss" then sums its per-batch means, which
// only the latest-loss and non-finite tracking read.
const lossSumKey = "loss_sum"

// splitItems takes a step's NumItems out of its metrics.
func splitItems(ms Metrics) (*torch.Tensor, Metrics) {
	n, ok := ms[NumItems]
	if !ok {
		return nil, ms
	}
	rest := maps.Clone(ms)
	delete(rest, NumItems)
	return n, rest
}

// addSums adds a batch of size samples to sums and returns the batch's mean loss. A
// step that counted its items (n != nil) returned the loss's sum over them: the sums
// get that sum and the count, the metrics (means over the batch) weighted by size, and
// the tracking slot the mean, so the latest loss and the non-finite check read a mean
// whatever the step.
func (t *Trainer) addSums(sums *deviceSums, loss, n *torch.Tensor, ms Metrics, size int, step int64) *torch.Tensor {
	if n == nil {
		sums.add(loss, ms, float64(size), step)
		return loss
	}
	if _, ok := ms[lossSumKey]; ok {
		panic(fmt.Errorf("trainer: a step's metrics may not be named %q (the Trainer's sum of a counted loss)", lossSumKey))
	}
	items := n.ToDType(torch.Float64)
	mean := loss.ToDType(torch.Float64).Div(items.Clamp(1, math.Inf(1)))
	weighted := make(Metrics, len(ms)+2)
	for k, v := range ms {
		weighted[k] = v.MulScalar(float64(size))
	}
	weighted[lossSumKey], weighted[NumItems] = loss, items
	sums.add(mean, weighted, 1, step)
	return mean
}
