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
	DistAvg = C.CG_DIST_AVG
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

// DistOptions says which process group DistInit joins (struct cg_dist_opts).
type DistOptions struct {
	Addr                string
	Port, Rank, World   int
	TimeoutMs           int64 // bounds every collective
	RendezvousTimeoutMs int64 // bounds the rendezvous and the group's start-up
	Backend             int   // DistGloo or DistNCCL
	AgentStore          bool  // a launcher's agent serves the store: rank 0 is a client too
	KeyPrefix           string
}

// DistInit joins a process group of o.World ranks through the TCPStore at
// o.Addr:o.Port, which rank 0 hosts (or the launcher's agent, with o.AgentStore).
func DistInit(o DistOptions) (ProcessGroup, error) {
	ca := C.CString(o.Addr)
	defer C.free(unsafe.Pointer(ca))
	cp := C.CString(o.KeyPrefix)
	defer C.free(unsafe.Pointer(cp))
	agent := C.int(0)
	if o.AgentStore {
		agent = 1
	}
	opts := C.struct_cg_dist_opts{addr: ca, port: C.int(o.Port), rank: C.int(o.Rank), world: C.int(o.World),
		timeout_ms: C.int64_t(o.TimeoutMs), rdzv_timeout_ms: C.int64_t(o.RendezvousTimeoutMs),
		backend: C.enum_cg_dist_backend(o.Backend), agent_store: agent, key_prefix: cp}
	var pg C.cg_pg
	err := st(C.cg_dist_init(&opts, &pg))
	return ProcessGroup(pg), err
}

// DistFree destroys the process group and closes the store (a group whose collective
// failed is only released: see cgotorch.h).
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

// DistAllGather gathers every rank's ins[i] into outs[i] (world*numel(ins[i]) elements,
// rank order): one collective per (dtype, device) group, through one flat buffer.
func DistAllGather(pg ProcessGroup, outs, ins []Tensor) error {
	return st(C.cg_dist_allgather(C.cg_pg(pg), handles(outs), handles(ins), C.int(len(ins))))
}

// DistReduceScatter reduces ins[i] (world*numel(outs[i]) elements) across ranks with op
// and leaves this rank's chunk in outs[i]: one collective per (dtype, device) group.
func DistReduceScatter(pg ProcessGroup, outs, ins []Tensor, op int) error {
	return st(C.cg_dist_reduce_scatter(C.cg_pg(pg), handles(outs), handles(ins), C.int(len(ins)), C.enum_cg_reduce_op(op)))
}

// DistBarrier blocks until every rank reaches it.
func DistBarrier(pg ProcessGroup) error { return st(C.cg_dist_barrier(C.cg_pg(pg))) }
