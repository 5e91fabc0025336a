package cgotorch

/*
#cgo noescape cg_trace_begin
#cgo nocallback cg_trace_begin
#cgo noescape cg_trace_end
#cgo nocallback cg_trace_end
#cgo noescape cg_trace_run
#cgo nocallback cg_trace_run
#cgo noescape cg_trace_run_batches
#cgo nocallback cg_trace_run_batches
#include "cgotorch.h"
*/
import "C"

import "unsafe"

// Trace is a recorded step (cg_trace): C memory, freed with TraceFree.
type Trace = unsafe.Pointer

// TraceBegin starts recording the calling thread's calls (cg_trace_begin).
func TraceBegin(inputs []Tensor, step int64) error {
	return st(C.cg_trace_begin(handles(inputs), C.int(len(inputs)), C.int64_t(step)))
}

// TraceEnd stops recording (cg_trace_end): the trace, or nil and why the step cannot be
// replayed.
func TraceEnd(outputs []Tensor) (t Trace, why string, err error) {
	var out C.cg_trace
	var msg C.cg_msg
	if err := st(C.cg_trace_end(handles(outputs), C.int(len(outputs)), &out, &msg)); err != nil {
		return nil, "", err
	}
	if msg != 0 {
		why = msgText(msg)
	}
	return Trace(out), why, nil
}

// TraceFree frees a trace and the persistent tensors it holds.
func TraceFree(t Trace) { C.cg_trace_free(C.cg_trace(t)) }

// TraceSame is cg_trace_same.
func TraceSame(a, b Trace) bool { return C.cg_trace_same(C.cg_trace(a), C.cg_trace(b)) != 0 }

// Hyper is an optimizer's current hyperparameters (OptimStep's kind and hyper), for a
// replayed optimizer step.
type Hyper struct {
	kind C.int
	n    int
	p    *C.double
}

// Set sets the algorithm and its groups' hyperparameters (OptNHyper values a group); hs
// must stay unchanged until the replay that uses them returns.
func (h *Hyper) Set(kind int, hs []float64) {
	h.kind, h.n, h.p = C.int(kind), len(hs)/OptNHyper, nil
	if len(hs) > 0 {
		h.p = (*C.double)(unsafe.Pointer(&hs[0]))
	}
}

// SetNone says there is no optimizer step.
func (h *Hyper) SetNone() { h.kind, h.n, h.p = -1, 0, nil }

// TraceRun replays t over inputs at step counter step (cg_trace_run); outs receives its
// outputs, adopted by the scope scope.
func TraceRun(t Trace, inputs []Tensor, h *Hyper, step int64, outs []Tensor) (scope int32, err *Error) {
	var r C.cg_trace_result
	C.cg_trace_run(C.cg_trace(t), handles(inputs), C.int(len(inputs)), h.kind, C.int(h.n), h.p, C.int64_t(step),
		handles(outs), &r)
	return int32(r.scope), statusErr(r.code, r.msg)
}

// TraceBatches is a run of batches of resident tensors (cg_trace_run_batches): batch k's
// field i is rows Starts[k] to Starts[k]+Sizes[k] of Fields[i] or, with Order set, the
// rows those positions of Order name.
type TraceBatches struct {
	Fields        []Tensor
	Order         Tensor
	Starts, Sizes []int64
}

// TraceRunBatches replays t over each batch of b in turn, at step counters step,
// step+1, ... (cg_trace_run_batches); outs receives the last step's outputs. done
// counts the steps that completed.
func TraceRunBatches(t Trace, b *TraceBatches, h *Hyper, step int64, outs []Tensor) (scope int32, done int, err *Error) {
	var r C.cg_trace_result
	C.cg_trace_run_batches(C.cg_trace(t), handles(b.Fields), C.int(len(b.Fields)), C.cg_tensor(b.Order), i64p(b.Starts),
		i64p(b.Sizes), C.int(min(len(b.Starts), len(b.Sizes))), h.kind, C.int(h.n), h.p, C.int64_t(step), handles(outs), &r)
	return int32(r.scope), int(r.done), statusErr(r.code, r.msg)
}
