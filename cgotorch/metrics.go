package cgotorch

/*
#cgo noescape cg_accumulate
#cgo nocallback cg_accumulate
#include "cgotorch.h"
*/
import "C"

// Flags of Accumulate (cg_accumulate_flag).
const (
	AccTrack         = C.CG_ACC_TRACK
	AccSkipNonfinite = C.CG_ACC_SKIP_NONFINITE
	AccATen          = C.CG_ACC_ATEN
)

// Accumulate is cg_accumulate: acc[i] += weight * values[i], in one call.
func Accumulate(acc Tensor, values []Tensor, weight float64, step int64, flags int) error {
	return st(C.cg_accumulate(h(acc), handles(values), C.int(len(values)), C.double(weight), C.int64_t(step), C.int(flags)))
}
