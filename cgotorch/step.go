package cgotorch

/*
#cgo noescape cg_step_run
#cgo nocallback cg_step_run
#cgo noescape cg_steps_run
#cgo nocallback cg_steps_run
#include "cgotorch.h"
*/
import "C"

import (
	"unsafe"

	"github.com/gotrain/gotrain/internal/hyper"
)

// StepPhase is cg_step_phase: the part of a training step that failed.
type StepPhase int32

// The phases of cg_step_phase.
const (
	PhaseNone      StepPhase = C.CG_PHASE_NONE
	PhaseZeroGrad  StepPhase = C.CG_PHASE_ZERO_GRAD
	PhaseForward   StepPhase = C.CG_PHASE_FORWARD
	PhaseLoss      StepPhase = C.CG_PHASE_LOSS
	PhaseSums      StepPhase = C.CG_PHASE_SUMS
	PhaseBackward  StepPhase = C.CG_PHASE_BACKWARD
	PhaseOptimizer StepPhase = C.CG_PHASE_OPTIMIZER
	PhaseBatch     StepPhase = C.CG_PHASE_BATCH
)

// Step is a training step being assembled in C's layout for Run (cg_step_run). It keeps
// its buffers from one step to the next: Reset it, add the stages, set the parts, run.
type Step struct {
	c      C.cg_step
	stages []C.cg_stage
	sgd    []C.cg_sgd_hyper
	adam   []C.cg_adam_hyper
	rms    []C.cg_rmsprop_hyper
	ada    []C.cg_adagrad_hyper
	hyper  unsafe.Pointer
	sizes  []int64
	params []Tensor
	state  []Tensor
}

// Reset clears the step: no stages, no sum, no optimizer.
func (s *Step) Reset() {
	s.stages = s.stages[:0]
	s.c = C.cg_step{optimizer: -1}
	s.hyper, s.sizes, s.params, s.state = nil, nil, nil, nil
}

// AddStage appends a stage of the forward pass with its tensors (0: none) resolved.
func (s *Step) AddStage(st *Stage, ts *[StageTensors]Tensor) { s.stages = append(s.stages, st.c(ts)) }

// SetLoss sets the loss of the forward pass's output against the target: a stage of a
// row marked loss, with its tensors (0: none) resolved.
func (s *Step) SetLoss(l *Stage, ts *[StageTensors]Tensor) { s.c.loss = l.c(ts) }

// SetSums adds the loss to acc as Accumulate(acc, [loss], weight, step, flags) does.
func (s *Step) SetSums(acc Tensor, weight float64, step int64, flags int) {
	s.c.sums, s.c.sum_weight, s.c.sum_step, s.c.sum_flags = h(acc), C.double(weight), C.int64_t(step), C.int32_t(flags)
}

// setOptimizer ends the step with cg_optim_step's arguments (SGDStep's) for kind, whose
// hyperparameters are in hs; the gradients of params are set to None first.
func setOptimizer[H, CH any](s *Step, kind C.enum_cg_optimizer, hs []H, conv func(H) CH, buf *[]CH, sizes []int64, params, state []Tensor) {
	*buf = (*buf)[:0]
	for _, v := range hs {
		*buf = append(*buf, conv(v))
	}
	s.hyper = nil
	if len(*buf) > 0 {
		s.hyper = unsafe.Pointer(&(*buf)[0])
	}
	s.c.optimizer, s.c.ngroups, s.c.nparams = C.int32_t(kind), C.int32_t(len(sizes)), C.int32_t(len(params))
	s.sizes, s.params, s.state = sizes, params, state
}

// SetSGD ends the step with SGDStep(hs, sizes, params, state).
func (s *Step) SetSGD(hs []hyper.SGD, sizes []int64, params, state []Tensor) {
	setOptimizer(s, C.CG_OPT_SGD, hs, sgdC, &s.sgd, sizes, params, state)
}

// SetAdam ends the step with AdamStep(hs, sizes, params, state).
func (s *Step) SetAdam(hs []hyper.Adam, sizes []int64, params, state []Tensor) {
	setOptimizer(s, C.CG_OPT_ADAM, hs, adamC, &s.adam, sizes, params, state)
}

// SetRMSprop ends the step with RMSpropStep(hs, sizes, params, state).
func (s *Step) SetRMSprop(hs []hyper.RMSprop, sizes []int64, params, state []Tensor) {
	setOptimizer(s, C.CG_OPT_RMSPROP, hs, rmspropC, &s.rms, sizes, params, state)
}

// SetAdagrad ends the step with AdagradStep(hs, sizes, params, state).
func (s *Step) SetAdagrad(hs []hyper.Adagrad, sizes []int64, params, state []Tensor) {
	setOptimizer(s, C.CG_OPT_ADAGRAD, hs, adagradC, &s.ada, sizes, params, state)
}

// Batches is cg_batches: a run of batches of the resident inputs X and targets Y, batch
// i being rows Starts[i] to Starts[i]+Sizes[i] of them or, with Order set, the rows
// those positions of Order name.
type Batches struct {
	X, Y, Order   Tensor
	Starts, Sizes []int64
}

// RunBatches is cg_steps_run: the step over each batch of b in turn. The last step's
// loss comes back in r; done counts the steps that completed, and on a failure (r.Err
// set) phase and stage say where, in step done.
func (s *Step) RunBatches(b *Batches) (r Result, done int, phase StepPhase, stage int) {
	s.c.nstages = C.int32_t(len(s.stages))
	var stages *C.cg_stage
	if len(s.stages) > 0 {
		stages = &s.stages[0]
	}
	cb := C.cg_batches{x: h(b.X), y: h(b.Y), order: h(b.Order), n: C.int32_t(min(len(b.Starts), len(b.Sizes)))}
	var out C.cg_step_result
	C.cg_steps_run(&s.c, stages, i64p(s.sizes), s.hyper, handles(s.params), handles(s.state), &cb,
		i64p(b.Starts), i64p(b.Sizes), &out)
	r = Result{T: Tensor(out.loss), Scope: int32(out.scope), Err: statusErr(out.code, out.msg)}
	return r, int(out.done), StepPhase(out.phase), int(out.stage)
}

// Run is cg_step_run over input x and target y. The loss comes back in r also when a
// later phase failed (r.Err set); phase and stage say where it failed.
func (s *Step) Run(x, y Tensor) (r Result, phase StepPhase, stage int) {
	s.c.nstages = C.int32_t(len(s.stages))
	var stages *C.cg_stage
	if len(s.stages) > 0 {
		stages = &s.stages[0]
	}
	var out C.cg_step_result
	C.cg_step_run(&s.c, stages, i64p(s.sizes), s.hyper, handles(s.params), handles(s.state), h(x), h(y), &out)
	r = Result{T: Tensor(out.loss), Scope: int32(out.scope), Err: statusErr(out.code, out.msg)}
	return r, StepPhase(out.phase), int(out.stage)
}
