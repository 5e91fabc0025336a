package torch

import (
	"errors"
	"time"

	"github.com/gotrain/gotrain/cgotorch"
)

// This file is the C boundary of package distributed: a c10d process group and its
// collectives. Package distributed adds the launch environment, buckets and the error
// messages users see; use it rather than these.

// CommBackend is a c10d process-group backend.
type CommBackend int

// The backends.
const (
	Gloo CommBackend = cgotorch.DistGloo
	NCCL CommBackend = cgotorch.DistNCCL
)

// ReduceOp is an all-reduce operation.
type ReduceOp int

// The reduce operations.
const (
	ReduceSum ReduceOp = cgotorch.DistSum
	ReduceMax ReduceOp = cgotorch.DistMax
	ReduceMin ReduceOp = cgotorch.DistMin
	// ReduceAvg is the sum divided by the world size (floating-point tensors only).
	ReduceAvg ReduceOp = cgotorch.DistAvg
)

// DistAvailable reports whether this build has c10d (false with build tag nodist).
func DistAvailable() bool { return cgotorch.DistAvailable() }

// NCCLAvailable reports whether this build can make NCCL process groups, and if not, why.
func NCCLAvailable() (bool, string) { return cgotorch.DistNCCLAvailable() }

// Comm is a joined c10d process group with the TCPStore it met through. Its collectives
// block until done or until the timeout; errors are *Error values whose message names the
// lost ranks when the store can tell.
type Comm struct{ h cgotorch.ProcessGroup }

// CommOptions says which process group NewComm joins.
type CommOptions struct {
	// Addr and Port locate the TCPStore, which rank 0 hosts unless AgentStore.
	Addr string
	Port int
	// Rank is this process' rank in [0, World).
	Rank, World int
	// Timeout bounds every collective; RendezvousTimeout bounds the rendezvous (every
	// rank reaching the store and posting its arrival) and the group's start-up.
	Timeout, RendezvousTimeout time.Duration
	Backend                    CommBackend
	// AgentStore: a launcher's agent (torchrun's) already serves the store at
	// Addr:Port, so rank 0 connects to it as a client.
	AgentStore bool
	// KeyPrefix keeps one launch attempt's store keys apart from another's ("" or
	// ending in "/").
	KeyPrefix string
}

// NewComm joins a process group through the TCPStore the options name. A rendezvous
// that times out names the ranks that did not arrive.
func NewComm(o CommOptions) (*Comm, error) {
	h, err := cgotorch.DistInit(cgotorch.DistOptions{Addr: o.Addr, Port: o.Port, Rank: o.Rank, World: o.World,
		TimeoutMs: max(o.Timeout.Milliseconds(), 1), RendezvousTimeoutMs: max(o.RendezvousTimeout.Milliseconds(), 1),
		Backend: int(o.Backend), AgentStore: o.AgentStore, KeyPrefix: o.KeyPrefix})
	if err != nil {
		return nil, opErr("init process group", err)
	}
	return &Comm{h: h}, nil
}

var errClosed = errors.New("process group is closed")

// do runs f on the group's handle and names op in its error; a closed group is errClosed.
func (c *Comm) do(op string, f func(cgotorch.ProcessGroup) error) error {
	if c == nil || c.h == nil {
		return errClosed
	}
	return wrapErr(op, f(c.h))
}

// Close leaves the process group. Closing twice is harmless.
func (c *Comm) Close() {
	if c != nil && c.h != nil {
		cgotorch.DistFree(c.h)
		c.h = nil
	}
}

// Broadcast copies root's tensors into every rank's, in place (coalesced by dtype).
func (c *Comm) Broadcast(ts []*Tensor, root int) error {
	return c.do("broadcast", func(h cgotorch.ProcessGroup) error {
		return cgotorch.DistBroadcast(h, handles(ts), root)
	})
}

// AllReduce reduces the tensors across ranks in place (coalesced by dtype).
func (c *Comm) AllReduce(ts []*Tensor, op ReduceOp) error {
	return c.do("all_reduce", func(h cgotorch.ProcessGroup) error {
		return cgotorch.DistAllReduce(h, handles(ts), int(op))
	})
}

// AllReduceGrads averages the params' gradients across ranks in one flattened all-reduce
// per dtype; an undefined gradient takes part as zeros.
func (c *Comm) AllReduceGrads(params []*Tensor) error {
	return c.do("all_reduce", func(h cgotorch.ProcessGroup) error {
		return cgotorch.DistAllReduceGrads(h, handles(params))
	})
}

// AllGather gathers every rank's ins[i] into outs[i], which holds world*numel(ins[i])
// elements in rank order (one collective per dtype and device, through one flat buffer
// when a group has several pairs). The pairs must have been checked (same dtype and
// device, sizes that match).
func (c *Comm) AllGather(outs, ins []*Tensor) error {
	return c.do("all_gather", func(h cgotorch.ProcessGroup) error {
		return cgotorch.DistAllGather(h, handles(outs), handles(ins))
	})
}

// ReduceScatter reduces ins[i] (world*numel(outs[i]) elements) across ranks with op and
// leaves this rank's chunk in outs[i] (one collective per dtype and device).
func (c *Comm) ReduceScatter(outs, ins []*Tensor, op ReduceOp) error {
	return c.do("reduce_scatter", func(h cgotorch.ProcessGroup) error {
		return cgotorch.DistReduceScatter(h, handles(outs), handles(ins), int(op))
	})
}

// Barrier blocks until every rank reaches it.
func (c *Comm) Barrier() error {
	return c.do("barrier", func(h cgotorch.ProcessGroup) error { return cgotorch.DistBarrier(h) })
}
