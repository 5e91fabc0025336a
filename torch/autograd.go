package torch

import (
	"runtime"

	"github.com/gotrain/gotrain/cgotorch"
)

// SetRequiresGrad switches gradient recording for a leaf tensor and returns t.
func (t *Tensor) SetRequiresGrad(on bool) *Tensor {
	check("requires_grad_", cgotorch.SetRequiresGrad(t.handle(), on))
	return t
}

// RequiresGrad reports whether autograd records operations on t.
func (t *Tensor) RequiresGrad() bool { return cgotorch.RequiresGrad(t.handle()) }

// Backward computes the gradient of a scalar t with respect to the leaves that require
// gradients, accumulating into their Grad.
func (t *Tensor) Backward() { check("backward", cgotorch.Backward(t.handle(), 0, false)) }

// BackwardWith is Backward with an explicit output gradient (for non-scalar t) and the
// option to keep the graph for a second backward pass.
func (t *Tensor) BackwardWith(grad *Tensor, retainGraph bool) {
	check("backward", cgotorch.Backward(t.handle(), opt(grad), retainGraph))
}

// Grad returns t's accumulated gradient (a new handle in the current scope sharing the
// gradient's storage), or nil when there is none.
func (t *Tensor) Grad() *Tensor {
	return adopt("grad", cgotorch.Grad(t.handle()))
}

// SetGrad replaces t's gradient; nil clears it (zero_grad(set_to_none=True)).
func (t *Tensor) SetGrad(g *Tensor) { check("set_grad", cgotorch.SetGrad(t.handle(), opt(g))) }

// NoGrad runs f with gradient recording off on this goroutine's OS thread (grad mode is
// thread-local in libtorch), restoring the previous mode afterwards.
func NoGrad(f func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev := cgotorch.GradEnabled()
	cgotorch.SetGradEnabled(false)
	defer cgotorch.SetGradEnabled(prev)
	f()
}

// GradEnabled reports whether gradient recording is on for the calling thread.
func GradEnabled() bool { return cgotorch.GradEnabled() }
