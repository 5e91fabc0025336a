package torch

import (
	"encoding/binary"
	"fmt"
	"runtime"

	"github.com/gotrain/gotrain/cgotorch"
)

// A Trace is a training step's calls into libtorch, recorded once (Record) and replayed
// for the following steps in one call each (Run), or a run of steps over a run of
// batches in one call (RunBatches), with no Go code between the calls. It is how a step
// written as plain eager code — a user's own layers included — runs at the speed of the
// same loop in C++: nothing is written twice, because the trace is the eager code's own
// calls.
//
// Every op and every function of this package that a step uses (Backward, ZeroGrads,
// OptimizerStep, Accumulate, ClipGradNormTensor, ClipGradValue, Grad, NoGrad) is
// recorded with its arguments. Tensors the step did not make (parameters, buffers,
// optimizer state, running sums) are held by identity: a replay reads and updates them
// where they are. Tensors the step made are made anew by each replay and dropped after
// their last use.
//
// A replayed step is static work, as a CUDA graph is: the same calls with the same
// arguments, whatever Go would have done differently this time. The recorder refuses
// (Record returns no trace and the reason) a step that reads a value on the host (Item,
// a copy to Go), calls back into Go (Checkpoint's recomputation), or changes state the
// trace would not repeat (autocast, SetRequiresGrad, the generator's seed). What it
// cannot see — a Go branch on a counter, a Go float that changes every step — Same
// finds by comparison: a step recorded twice that gives the same trace does not depend
// on them, so record twice and replay only when Same holds. The optimizer's
// hyperparameters are the exception: a replay takes them from the optimizer each time
// (Run's opt), so that a scheduler's learning rate is not baked in. Inputs must have the
// recorded shapes, dtypes and devices; record again for new ones.
//
// A replay gives the eager step's results to the bit: the same ATen calls, in the same
// order, with the same arguments, drawing the same random numbers.
type Trace struct {
	h       cgotorch.Trace
	nout    int
	cleanup runtime.Cleanup
	hyper   cgotorch.Hyper
	outs    []cgotorch.Tensor
}

// Record runs f, the step, with every call it makes into libtorch on this goroutine
// recorded, inputs (the batch) as the trace's inputs and f's results as its outputs. It
// returns f's results and the trace or, when the step cannot be replayed, a nil trace
// and the reason. step is the step's counter, the one it passes to Accumulate: a replay
// at another counter passes that one instead. A panic in f propagates, with the
// recording dropped.
func Record(inputs []*Tensor, step int64, f func() []*Tensor) (outs []*Tensor, tr *Trace, why string) {
	runtime.LockOSThread() // the recorder is the thread's
	defer runtime.UnlockOSThread()
	in := borrowHandlesOf(inputs)
	err := cgotorch.TraceBegin(*in, step)
	returnHandles(in)
	check("record", err)
	ended := false
	defer func() {
		if !ended {
			if h, _, _ := cgotorch.TraceEnd(nil); h != nil {
				cgotorch.TraceFree(h)
			}
		}
	}()
	outs = f()
	ended = true
	h, why, err := cgotorch.TraceEnd(handles(outs))
	check("record", err)
	if h == nil {
		return outs, nil, why
	}
	tr = &Trace{h: h, nout: len(outs), outs: make([]cgotorch.Tensor, len(outs))}
	tr.cleanup = runtime.AddCleanup(tr, cgotorch.TraceFree, h)
	return outs, tr, ""
}

// Same reports whether t and o make the same calls, with the same arguments, on the
// same persistent tensors: whether the step did the same work both times it was
// recorded.
func (t *Trace) Same(o *Trace) bool { return cgotorch.TraceSame(t.h, o.h) }

// Free releases the trace and its hold on the persistent tensors. A Trace that is not
// freed is released when the collector finds it unreachable. Freeing nil is a no-op.
func (t *Trace) Free() {
	if t == nil || t.h == nil {
		return
	}
	t.cleanup.Stop()
	cgotorch.TraceFree(t.h)
	t.h = nil
}

// Run replays the step over inputs, at step counter step, with the optimizer step's
// hyperparameters taken from opt (nil: the step has none), and returns its outputs, new
// tensors in the current scope. A failure panics with a *Error naming the call that
// failed, as the eager step would.
func (t *Trace) Run(inputs []*Tensor, opt *OptimizerArgs, step int64) []*Tensor {
	opt.setHyper(&t.hyper)
	in := borrowHandlesOf(inputs)
	scope, err := cgotorch.TraceRun(t.h, *in, &t.hyper, step, t.outs)
	returnHandles(in)
	return t.results(scope, err)
}

// BatchRun is a run of batches for Trace.RunBatches, sliced from whole tensors (rows
// along dimension 0): batch k's input i is Fields[i].Narrow(0, Starts[k], Sizes[k]) or,
// when Order is set (an int64 vector of row indices), the rows that
// Order.Narrow(0, Starts[k], Sizes[k]) names (IndexSelect). It is how a resident
// data.Loader makes its batches.
type BatchRun struct {
	Fields        []*Tensor
	Order         *Tensor
	Starts, Sizes []int64
	// Done is set by RunBatches to the number of steps that completed, also when one
	// fails (the failed one is batch Done).
	Done int
}

// RunBatches replays the step over each batch of b in turn, in one call, at step
// counters step, step+1, ...: the same calls as slicing each batch and calling Run. It
// returns the last step's outputs; a failure panics as Run's does, after setting b.Done.
func (t *Trace) RunBatches(b *BatchRun, o *OptimizerArgs, step int64) []*Tensor {
	if len(b.Starts) != len(b.Sizes) || len(b.Starts) == 0 {
		panic(&Error{Op: "replay", Msg: fmt.Sprintf("batches: %d starts and %d sizes; want the same number, at least one", len(b.Starts), len(b.Sizes))})
	}
	o.setHyper(&t.hyper)
	cb := cgotorch.TraceBatches{Fields: handles(b.Fields), Order: opt(b.Order), Starts: b.Starts, Sizes: b.Sizes}
	scope, done, err := cgotorch.TraceRunBatches(t.h, &cb, &t.hyper, step, t.outs)
	b.Done = done
	return t.results(scope, err)
}

func (t *Trace) results(scope int32, err *cgotorch.Error) []*Tensor {
	if err != nil {
		panic(opErr("replay", err))
	}
	outs := make([]*Tensor, t.nout)
	for i, h := range t.outs {
		outs[i] = wrapIn(h, scope)
	}
	return outs
}

// maxRecords is how many times a Replayer records a step whose traces keep differing
// before it runs that step eagerly for good.
const maxRecords = 4

// A Replayer runs a step given as eager code, recording it (Record) until two
// consecutive recordings agree (Trace.Same), and from then on replaying the trace (Run)
// in place of the eager code — for each shape of inputs apart, since a trace holds for
// the shapes it was recorded with. A step that cannot be replayed runs eagerly, and Why
// says why. The zero Replayer is ready to use, on one goroutine; Free releases its
// traces.
type Replayer struct {
	steps map[string]*replayed
	last  *replayed // the last Step's inputs'
	key   []byte
}

// replayed is a Replayer's state for one shape of inputs: recording (prev is the last
// recording, records their number), ready (tr), or refused (why).
type replayed struct {
	tr, prev *Trace
	records  int
	why      string
}

// Step runs the step over inputs, at step counter step: replayed, with opt the
// optimizer's current hyperparameters (nil: none), when its trace is ready, and
// otherwise eagerly, by calling eager, which must do what the trace records (eager's
// results are the trace's outputs). It returns the step's outputs and whether it was
// replayed.
func (r *Replayer) Step(inputs []*Tensor, opt *OptimizerArgs, step int64, eager func() []*Tensor) (outs []*Tensor, replayed bool) {
	st := r.state(inputs)
	r.last = st
	switch {
	case st.tr != nil:
		return st.tr.Run(inputs, opt, step), true
	case st.why != "":
		return eager(), false
	}
	outs, tr, why := Record(inputs, step, eager)
	st.records++
	switch {
	case tr == nil:
		st.why = why
	case st.prev != nil && st.prev.Same(tr):
		st.tr = tr
	case st.records >= maxRecords:
		tr.Free()
		st.why = fmt.Sprintf("the step did different work in each of %d recordings (it depends on values that change between steps)", maxRecords)
	default:
		st.prev.Free()
		st.prev = tr
		return outs, false
	}
	st.prev.Free()
	st.prev = nil
	return outs, false
}

// Ready reports whether the last Step's inputs have a trace ready to replay, which
// RunBatches replays.
func (r *Replayer) Ready() bool { return r.last != nil && r.last.tr != nil }

// RunBatches replays the last Step's trace (Ready) over a run of batches with the
// shapes of that Step's inputs (Trace.RunBatches).
func (r *Replayer) RunBatches(b *BatchRun, opt *OptimizerArgs, step int64) []*Tensor {
	if !r.Ready() {
		panic(&Error{Op: "replay", Msg: "no trace is ready for a run of batches"})
	}
	return r.last.tr.RunBatches(b, opt, step)
}

// Why says why the last Step's inputs run eagerly: the reason their step cannot be
// replayed, or "" when it is replayed or still being recorded.
func (r *Replayer) Why() string {
	if r.last == nil {
		return ""
	}
	return r.last.why
}

// Free releases the Replayer's traces; it starts over if used again.
func (r *Replayer) Free() {
	for _, st := range r.steps {
		st.tr.Free()
		st.prev.Free()
	}
	r.steps, r.last = nil, nil
}

// state is the state of the inputs' shapes, dtypes and devices.
func (r *Replayer) state(inputs []*Tensor) *replayed {
	k := r.key[:0]
	for _, x := range inputs {
		d := x.Device()
		k = append(k, byte(x.DType()), byte(d.Type), byte(d.Index), byte(x.Dim()))
		for _, n := range x.Shape() {
			k = binary.LittleEndian.AppendUint64(k, uint64(n))
		}
	}
	r.key = k
	st := r.steps[string(k)]
	if st == nil {
		if r.steps == nil {
			r.steps = map[string]*replayed{}
		}
		st = &replayed{}
		r.steps[string(k)] = st
	}
	return st
}
