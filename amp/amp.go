// Package amp is automatic mixed precision: autocast regions and the gradient scaler,
// with PyTorch's semantics (torch.autocast and torch.amp.GradScaler).
//
// The order of operations per optimizer step is PyTorch's:
//
//	amp.Autocast(dev, torch.Float16, func() { loss = lossFn(model(x), y) })
//	scaler.ScaleLoss(loss).Backward()   // backward outside autocast
//	scaler.Unscale(opt)                 // once per step, before clipping
//	optim.ClipGradNorm(params, 1, 2, false)
//	stepped, err := scaler.Step(opt)    // skips opt.Step() when a gradient is inf/NaN
//	scaler.Update()                     // once per iteration, after every optimizer
//
// bfloat16 needs no scaler.
package amp

import (
	"fmt"

	"github.com/gotrain/gotrain/torch"
)

// Autocast runs f with autocast on for dev's device type and dtype (float16 or
// bfloat16), as `with torch.autocast(dev.type, dtype=dtype):` does: eligible ops (matmul,
// linear, conv...) run in dtype, others in float32. Autocast state is per OS thread, so
// Autocast locks the goroutine to its thread while f runs; it restores the previous
// state afterwards (also when f panics) and clears the cast cache on leaving the
// outermost region. Run backward outside the region. It panics with a *torch.Error for a
// dtype other than float16 or bfloat16.
func Autocast(dev torch.Device, dtype torch.DType, f func()) {
	if dtype != torch.Float16 && dtype != torch.BFloat16 {
		panic(&torch.Error{Op: "autocast", Msg: fmt.Sprintf("autocast supports float16 and bfloat16, not %v", dtype)})
	}
	torch.Autocast(dev, dtype, f)
}
