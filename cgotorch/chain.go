package cgotorch

/*
#cgo noescape cg_chain_forward
#cgo nocallback cg_chain_forward
#include "cgotorch.h"
*/
import "C"

import "sync"

// StageKind is cg_stage_kind: the layer a chain stage runs.
type StageKind int32

// The stage kinds of cg_stage_kind.
const (
	StageLinear            StageKind = C.CG_STAGE_LINEAR
	StageConv2d            StageKind = C.CG_STAGE_CONV2D
	StageMaxPool2d         StageKind = C.CG_STAGE_MAX_POOL2D
	StageAvgPool2d         StageKind = C.CG_STAGE_AVG_POOL2D
	StageAdaptiveAvgPool2d StageKind = C.CG_STAGE_ADAPTIVE_AVG_POOL2D
	StageBatchNorm         StageKind = C.CG_STAGE_BATCH_NORM
	StageDropout           StageKind = C.CG_STAGE_DROPOUT
	StageFlatten           StageKind = C.CG_STAGE_FLATTEN
	StageReLU              StageKind = C.CG_STAGE_RELU
	StageLeakyReLU         StageKind = C.CG_STAGE_LEAKY_RELU
	StageGELU              StageKind = C.CG_STAGE_GELU
	StageSiLU              StageKind = C.CG_STAGE_SILU
	StageTanh              StageKind = C.CG_STAGE_TANH
	StageSigmoid           StageKind = C.CG_STAGE_SIGMOID
)

// Stage is cg_stage without its tensors: one stage of a chain; a kind reads only its own
// fields (cgotorch.h). Chain.Add resolves the tensors.
type Stage struct {
	Kind                                      StageKind
	Kernel, Stride, Padding, Dilation         [2]int64
	Groups, StartDim, EndDim, InputDims       int64
	P, Momentum, Eps, Slope                   float64
	Training, CeilMode, CountIncludePad, Tanh bool
}

func (s *Stage) c() C.cg_stage {
	return C.cg_stage{kind: C.int32_t(s.Kind),
		kernel: i64x2(s.Kernel), stride: i64x2(s.Stride), padding: i64x2(s.Padding), dilation: i64x2(s.Dilation),
		groups: C.int64_t(s.Groups), start_dim: C.int64_t(s.StartDim), end_dim: C.int64_t(s.EndDim),
		input_dims: C.int64_t(s.InputDims), p: C.double(s.P), momentum: C.double(s.Momentum), eps: C.double(s.Eps),
		slope: C.double(s.Slope), training: ci32(s.Training), ceil_mode: ci32(s.CeilMode),
		count_include_pad: ci32(s.CountIncludePad), tanh: ci32(s.Tanh)}
}

func i64x2(v [2]int64) [2]C.int64_t { return [2]C.int64_t{C.int64_t(v[0]), C.int64_t(v[1])} }

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
func (c *Chain) Add(s *Stage, w, b, mean, vr, nb Tensor) {
	c.cs = appendStage(c.cs, s, w, b, mean, vr, nb)
}

func appendStage(cs []C.cg_stage, s *Stage, w, b, mean, vr, nb Tensor) []C.cg_stage {
	cs = append(cs, s.c())
	last := &cs[len(cs)-1]
	last.weight, last.bias, last.running_mean, last.running_var, last.num_batches_tracked = h(w), h(b), h(mean), h(vr), h(nb)
	return cs
}

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
