package cgotorch

/*
#cgo noescape cg_chain_forward
#cgo nocallback cg_chain_forward
#include "cgotorch.h"
*/
import "C"

import "sync"

// StageOp is cg_stage_op: the ops.tab row a chain stage runs (its constants are
// generated, stages_gen.go).
type StageOp int32

// The sizes of cg_stage's argument arrays.
const (
	StageTensors = C.CG_STAGE_TENSORS
	StageDoubles = C.CG_STAGE_DOUBLES
	StageInts    = C.CG_STAGE_INTS
)

// Stage is cg_stage without its tensors: a stage op and its arguments in cg_stage's
// layout (cgotorch.h). Chain.Add resolves the tensors.
type Stage struct {
	Op      StageOp
	Doubles [StageDoubles]float64
	Ints    [StageInts]int64
}

func (s *Stage) c(ts *[StageTensors]Tensor) C.cg_stage {
	c := C.cg_stage{op: C.int32_t(s.Op)}
	for i, t := range ts {
		c.tensors[i] = h(t)
	}
	for i, d := range s.Doubles {
		c.doubles[i] = C.double(d)
	}
	for i, v := range s.Ints {
		c.ints[i] = C.int64_t(v)
	}
	return c
}

// Chain is a chain being assembled in C's layout, for ChainForward. Chains are pooled:
// a forward pass takes one with NewChain and Forward puts it back, so a step neither
// allocates nor clears a stage array.
type Chain struct{ cs []C.cg_stage }

var chains = sync.Pool{New: func() any { return &Chain{cs: make([]C.cg_stage, 0, 16)} }}

// NewChain returns an empty chain from the pool.
func NewChain() *Chain {
	c := chains.Get().(*Chain)
	c.cs = c.cs[:0]
	return c
}

// Add appends s with its tensors (0: none) resolved.
func (c *Chain) Add(s *Stage, ts *[StageTensors]Tensor) { c.cs = append(c.cs, s.c(ts)) }

// Forward is cg_chain_forward: the stages over x in one call; the chain goes back to the
// pool. On failure, failed is the index of the stage that threw.
func (c *Chain) Forward(x Tensor) (r Result, failed int) {
	var p *C.cg_stage
	if len(c.cs) > 0 {
		p = &c.cs[0]
	}
	cr := C.cg_chain_forward(p, C.int(len(c.cs)), h(x))
	chains.Put(c)
	if cr.code != 0 {
		return Result{Err: statusErr(cr.code, cr.msg)}, int(cr.stage)
	}
	return Result{T: Tensor(cr.t), Scope: int32(cr.scope)}, -1
}
