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

import (
	"unsafe"

	"github.com/gotrain/gotrain/internal/hyper"
)

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

// Hyper is an optimizer's current hyperparameters in C's layout, for a replayed
// optimizer step. It keeps its buffers from one step to the next.
type Hyper struct {
	kind C.int
	n    int
	p    unsafe.Pointer
	sgd  []C.cg_sgd_hyper
	adam []C.cg_adam_hyper
	rms  []C.cg_rmsprop_hyper
	ada  []C.cg_adagrad_hyper
}

func setHyper[H, CH any](h *Hyper, kind C.int, hs []H, conv func(H) CH, buf *[]CH) {
	*buf = (*buf)[:0]
	for _, v := range hs {
		*buf = append(*buf, conv(v))
	}
	h.kind, h.n, h.p = kind, len(hs), nil
	if len(hs) > 0 {
		h.p = unsafe.Pointer(&(*buf)[0])
	}
}

// SetNone says there is no optimizer step.
func (h *Hyper) SetNone() { h.kind, h.n, h.p = -1, 0, nil }

// SetSGD sets SGD's hyperparameters, one per group.
func (h *Hyper) SetSGD(hs []hyper.SGD) { setHyper(h, C.CG_OPT_SGD, hs, sgdC, &h.sgd) }

// SetAdam sets Adam's (and AdamW's) hyperparameters, one per group.
func (h *Hyper) SetAdam(hs []hyper.Adam) { setHyper(h, C.CG_OPT_ADAM, hs, adamC, &h.adam) }

// SetRMSprop sets RMSprop's hyperparameters, one per group.
func (h *Hyper) SetRMSprop(hs []hyper.RMSprop) { setHyper(h, C.CG_OPT_RMSPROP, hs, rmspropC, &h.rms) }

// SetAdagrad sets Adagrad's hyperparameters, one per group.
func (h *Hyper) SetAdagrad(hs []hyper.Adagrad) { setHyper(h, C.CG_OPT_ADAGRAD, hs, adagradC, &h.ada) }

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
