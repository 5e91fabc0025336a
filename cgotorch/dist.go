package cgotorch

/*
#include <stdlib.h>
#include "cgotorch.h"
*/
import "C"

import "unsafe"

// ProcessGroup is a handle to a c10d process group and its TCPStore (cg_pg).
type ProcessGroup = unsafe.Pointer

// Reduce operations for DistAllReduce.
const (
	DistSum = C.CG_DIST_SUM
	DistMax = C.CG_DIST_MAX
	DistMin = C.CG_DIST_MIN
)

// DistAvailable reports whether this build has c10d (false with build tag nodist).
func DistAvailable() bool { return C.cg_dist_available() != 0 }

// Process group backends for DistInit.
const (
	DistGloo = C.CG_DIST_GLOO
	DistNCCL = C.CG_DIST_NCCL
)

// DistNCCLAvailable reports whether this build can make NCCL process groups, and if not,
// why.
func DistNCCLAvailable() (bool, string) {
	var why *C.char
	ok := C.cg_dist_nccl_available(&why) != 0
	return ok, C.GoString(why)
}

// DistInit joins a process group of world ranks through the TCPStore at addr:port,
// which rank 0 hosts, with backend DistGloo or DistNCCL. timeoutMs bounds the
// rendezvous and every collective.
func DistInit(addr string, port, rank, world int, timeoutMs int64, backend int) (ProcessGroup, error) {
	ca := C.CString(addr)
	defer C.free(unsafe.Pointer(ca))
	var pg C.cg_pg
	err := st(C.cg_dist_init(ca, C.int(port), C.int(rank), C.int(world), C.int64_t(timeoutMs), C.enum_cg_dist_backend(backend), &pg))
	return ProcessGroup(pg), err
}

// DistFree destroys the process group and closes the store.
func DistFree(pg ProcessGroup) { C.cg_dist_free(C.cg_pg(pg)) }

// DistBroadcast copies root's tensors into every rank's, in place.
func DistBroadcast(pg ProcessGroup, ts []Tensor, root int) error {
	return st(C.cg_dist_broadcast(C.cg_pg(pg), handles(ts), C.int(len(ts)), C.int(root)))
}

// DistAllReduce reduces the tensors across ranks in place with op.
func DistAllReduce(pg ProcessGroup, ts []Tensor, op int) error {
	return st(C.cg_dist_allreduce(C.cg_pg(pg), handles(ts), C.int(len(ts)), C.enum_cg_reduce_op(op)))
}

// DistAllReduceGrads averages the parameters' gradients across ranks (one bucket).
func DistAllReduceGrads(pg ProcessGroup, params []Tensor) error {
	return st(C.cg_dist_allreduce_grads(C.cg_pg(pg), handles(params), C.int(len(params))))
}

// DistBarrier blocks until every rank reaches it.
func DistBarrier(pg ProcessGroup) error { return st(C.cg_dist_barrier(C.cg_pg(pg))) }
