package cgotorch

/*
#cgo noescape cg_chain_forward
#cgo nocallback cg_chain_forward
#include "cgotorch.h"
*/
import "C"

import "unsafe"

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

// Stage is cg_stage: one stage of a chain; a kind reads only its own fields (cgotorch.h).
type Stage struct {
	Kind                                      StageKind
	Weight, Bias                              Tensor
	RunningMean, RunningVar, BatchesTracked   Tensor
	Kernel, Stride, Padding, Dilation         [2]int64
	Groups, StartDim, EndDim, InputDims       int64
	P, Momentum, Eps, Slope                   float64
	Training, CeilMode, CountIncludePad, Tanh bool
}

func (s *Stage) c() C.cg_stage {
	return C.cg_stage{kind: C.int32_t(s.Kind), weight: h(s.Weight), bias: h(s.Bias),
		running_mean: h(s.RunningMean), running_var: h(s.RunningVar), num_batches_tracked: h(s.BatchesTracked),
		kernel: i64x2(s.Kernel), stride: i64x2(s.Stride), padding: i64x2(s.Padding), dilation: i64x2(s.Dilation),
		groups: C.int64_t(s.Groups), start_dim: C.int64_t(s.StartDim), end_dim: C.int64_t(s.EndDim),
		input_dims: C.int64_t(s.InputDims), p: C.double(s.P), momentum: C.double(s.Momentum), eps: C.double(s.Eps),
		slope: C.double(s.Slope), training: ci32(s.Training), ceil_mode: ci32(s.CeilMode),
		count_include_pad: ci32(s.CountIncludePad), tanh: ci32(s.Tanh)}
}

func i64x2(v [2]int64) [2]C.int64_t { return [2]C.int64_t{C.int64_t(v[0]), C.int64_t(v[1])} }

// chainStages is the size of the C array ChainForward fills on the stack; longer chains
// allocate theirs.
const chainStages = 16

// ChainForward is cg_chain_forward: the stages over x in one call. On failure, failed is
// the index of the stage that threw.
func ChainForward(stages []Stage, x Tensor) (r Result, failed int) {
	var buf [chainStages]C.cg_stage
	cs := buf[:0]
	if len(stages) > chainStages {
		cs = make([]C.cg_stage, 0, len(stages))
	}
	for i := range stages {
		cs = append(cs, stages[i].c())
	}
	var p *C.cg_stage
	if len(cs) > 0 {
		p = (*C.cg_stage)(unsafe.Pointer(&cs[0]))
	}
	cr := C.cg_chain_forward(p, C.int(len(cs)), h(x))
	if cr.code != 0 {
		return Result{Err: statusErr(cr.code, cr.msg)}, int(cr.stage)
	}
	return Result{T: Tensor(cr.t), Scope: int32(cr.scope)}, -1
}
