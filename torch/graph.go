package torch

import (
	"fmt"
	"runtime"

	"github.com/gotrain/gotrain/cgotorch"
)

// CUDAGraph is a CUDA graph (at::cuda::CUDAGraph, torch.cuda.CUDAGraph): the kernels a
// function launched once, captured, and launched again by Replay with no host work
// between them. A replay reads and writes the memory the capture used — the tensors
// that existed before it (parameters, optimizer state, static inputs the caller copies
// new values into) and those the capture made, which stay in the graph's private memory
// pool — and repeats exactly the captured work: shapes, host scalars and Go branching
// are fixed at capture. Capturing needs the function to read nothing on the host
// (Tensor.Item, a copy to the CPU) and to have run once before (Warmup), so that
// lazily made state (optimizer slots, cuDNN plans) exists.
type CUDAGraph struct {
	h       cgotorch.Graph
	cleanup runtime.Cleanup
}

// NewCUDAGraph returns an empty graph on dev, or an error when dev is not a CUDA device
// or this build cannot capture.
func NewCUDAGraph(dev Device) (*CUDAGraph, error) {
	if !dev.IsCUDA() {
		return nil, fmt.Errorf("torch: CUDA graphs need a CUDA device, not %s", dev)
	}
	h, err := cgotorch.GraphNew(dev.ordinal())
	if err != nil {
		return nil, wrapErr("CUDA graph", err)
	}
	g := &CUDAGraph{h: h}
	g.cleanup = runtime.AddCleanup(g, cgotorch.GraphFree, h)
	return g, nil
}

// Warmup runs f on a side stream that waits for the current one, as torch.cuda.graphs
// recommends before a capture; the current stream then waits for it.
func (g *CUDAGraph) Warmup(f func()) error { return g.on(false, f) }

// Capture runs f once on a side stream and captures the kernels it launches (thread-local
// capture mode, autocast's weight cache off). A panic in f propagates, the capture
// abandoned.
func (g *CUDAGraph) Capture(f func()) error { return g.on(true, f) }

func (g *CUDAGraph) on(capture bool, f func()) (err error) {
	runtime.LockOSThread() // the current stream, and the capture, are the thread's
	defer runtime.UnlockOSThread()
	if err := cgotorch.GraphBegin(g.h, capture); err != nil {
		return wrapErr("CUDA graph", err)
	}
	defer func() {
		if e := cgotorch.GraphEnd(g.h); e != nil && err == nil {
			err = wrapErr("CUDA graph capture", e)
		}
	}()
	f()
	return nil
}

// Replay launches the captured work on the current stream.
func (g *CUDAGraph) Replay() error { return wrapErr("CUDA graph replay", cgotorch.GraphReplay(g.h)) }

// Free releases the graph and its memory pool now; tensors the capture made must not be
// used afterwards.
func (g *CUDAGraph) Free() {
	if g == nil || g.h == nil {
		return
	}
	g.cleanup.Stop()
	cgotorch.GraphFree(g.h)
	g.h = nil
}
