package trainer

import (
	"fmt"
	"math"
	"slices"

	"github.com/gotrain/gotrain/torch"
)

// deviceSums adds up a loop's per-batch scalars where they were computed, so that
// training makes no device-to-host read per step: the sums, the latest batch's loss and
// the first optimizer step whose loss was not finite come back to Go together, in one
// read, at logging points and at the end of the epoch.
type deviceSums struct {
	names []string                 // sorted
	acc   map[string]*torch.Tensor // float64 scalars outside every scope
	last  *torch.Tensor            // the latest batch's loss
	// firstBad is the first global step (1-based) whose loss was NaN or infinite, +Inf
	// while there is none.
	firstBad *torch.Tensor
	dev      torch.Device
	track    bool // keep last and firstBad (training only)
}

// noStep is beyond any global step: firstBad's value for a finite loss.
const noStep = 1e18

// sumsRead is what a read brings back.
type sumsRead struct {
	Sums     map[string]float64
	Last     float64
	FirstBad int64 // 0 when every loss so far was finite
}

func newDeviceSums(dev torch.Device, track bool) *deviceSums {
	return &deviceSums{acc: map[string]*torch.Tensor{}, dev: dev, track: track}
}

func (s *deviceSums) scalar(v float64) *torch.Tensor {
	return torch.Full(nil, v, torch.Float64, s.dev).Escape()
}

// slot returns the accumulator of name, creating it at v.
func (s *deviceSums) slot(name string, v float64) *torch.Tensor {
	a, ok := s.acc[name]
	if !ok {
		a = s.scalar(v)
		s.acc[name] = a
		i, _ := slices.BinarySearch(s.names, name)
		s.names = slices.Insert(s.names, i, name)
	}
	return a
}

// add accumulates one batch: loss and each metric times weight (the batch size). step
// is the global step the batch belongs to, for naming a non-finite loss.
func (s *deviceSums) add(loss *torch.Tensor, ms Metrics, weight float64, step int64) {
	for name := range ms {
		if name == "loss" {
			panic(fmt.Errorf("trainer: a step's metrics may not be named \"loss\" (the loss is recorded already)"))
		}
	}
	// Every op here runs once per batch, so they are few: in-place adds that promote to the
	// float64 accumulators (outside autograd, so no detach or cast is needed).
	torch.NoGrad(func() {
		s.slot("loss", 0).AddInPlace(loss, weight)
		for name, m := range ms {
			s.slot(name, 0).AddInPlace(m, weight)
		}
		if !s.track {
			return
		}
		if s.last == nil {
			s.last, s.firstBad = s.scalar(0), s.scalar(math.Inf(1))
		}
		s.last.CopyFrom(loss, false)
		// firstBad becomes min(firstBad, step) when this loss is not finite.
		s.firstBad.CopyFrom(torch.Where(loss.IsFinite(), s.firstBad, s.firstBad.Clamp(math.Inf(-1), float64(step))), false)
	})
}

// addFinite adds v to name's sum when v is finite.
func (s *deviceSums) addFinite(name string, v *torch.Tensor) {
	v = v.Detach().ToDType(torch.Float64)
	s.slot(name, 0).AddInPlace(torch.Where(v.IsFinite(), v, v.ZerosLike()), 1)
}

// read returns the sums: one device-to-host read.
func (s *deviceSums) read() sumsRead {
	r := sumsRead{Sums: map[string]float64{}}
	if len(s.names) == 0 && s.last == nil {
		return r
	}
	var vals []float64
	torch.WithScope(func() {
		ts := make([]*torch.Tensor, 0, len(s.names)+2)
		for _, n := range s.names {
			ts = append(ts, s.acc[n])
		}
		if s.last != nil {
			ts = append(ts, s.last, s.firstBad)
		}
		vals = torch.Stack(ts, 0).Float64s()
	})
	for i, n := range s.names {
		r.Sums[n] = vals[i]
	}
	if s.last != nil {
		r.Last = vals[len(s.names)]
		if fb := vals[len(s.names)+1]; fb < noStep {
			r.FirstBad = int64(fb)
		}
	}
	return r
}

// set replaces the sums (a resume restores a mid-epoch checkpoint's).
func (s *deviceSums) set(sums map[string]float64) {
	s.free()
	for n, v := range sums {
		s.slot(n, v)
	}
}

// free releases the accumulators; the sums start again from zero.
func (s *deviceSums) free() {
	for _, a := range s.acc {
		a.Free()
	}
	s.last.Free()
	s.firstBad.Free()
	s.acc, s.names, s.last, s.firstBad = map[string]*torch.Tensor{}, nil, nil, nil
}
