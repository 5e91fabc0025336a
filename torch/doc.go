// Package torch is gotrain's tensor layer over libtorch: tensors with PyTorch's dtypes,
// devices and operators, autograd, scopes that free intermediates deterministically,
// seeding and determinism switches, and CUDA queries.
//
// # Lifetimes
//
// libtorch memory is invisible to Go's garbage collector, so tensors are freed
// explicitly. A tensor created while a Scope is open belongs to that scope and is freed
// when the scope closes, unless Keep moves it out. Parameters, buffers and optimizer
// state are owned by their module or optimizer. Tensors created with no scope open get a
// runtime cleanup as a safety net, but should be freed with Free. LiveTensors counts the
// handles alive, so tests can assert that a loop leaks nothing.
//
// Scopes are per goroutine: while a scope is open its goroutine is locked to its OS
// thread, and only tensors that goroutine creates go into it, so several goroutines can
// each train or evaluate with their own scopes at once (a tensor made on a goroutine
// with no scope open gets the safety-net cleanup). Close a scope on the goroutine that
// opened it; WithScope does.
//
// A scope's handles are held on the C side, in a per-thread frame that every op's result
// names: creating a tensor takes no lock and no extra call into libtorch, and closing a
// scope frees all of its tensors in one call.
//
// # Errors
//
// One rule, in every package of gotrain:
//   - Tensor operations panic with a *Error on misuse (a shape mismatch, a tensor used
//     after Free) and when libtorch fails (out of memory included), as numeric Go code
//     does; the message is libtorch's, without its C++ backtrace.
//   - Functions that do I/O or run training (checkpoint reads and writes, Trainer.Run,
//     LoadScript, process-group joins, optimizer steps) return errors.
//   - Recover, deferred at such a boundary, turns a *Error panic into the returned error
//     and lets any other panic (a nil dereference in a user's Forward) continue with its
//     original stack, as gonum's mat.Maybe does.
//   - Constructors panic on programmer error (an impossible size or a negative count) and
//     return errors for anything that depends on data or files.
//
// errors.Is(err, ErrOutOfMemory) identifies allocation failures.
//
// # The C boundary
//
// Package torch is the only importer of package cgotorch, the C ABI over libtorch, and
// no exported identifier carries one of its handles (a test enforces both). The ops are
// declared once, in cgotorch/ops.tab; `go generate ./cgotorch` writes the C prototypes,
// the guarded C++ bodies, the cgo wrappers and this package's ops_gen.go from it. The
// kernels that are more than one ATen call (optimizer steps, GradScaler's unscale and
// update, clipping, collectives, TorchScript) are hand-written and exposed here as typed
// functions for packages optim, amp, distributed and nn. Chain is one of them: a list of
// layer stages (LinearStage, Conv2dStage, ...) run in one call, with only the last output
// crossing back, which is how nn.Sequential runs its built-in layers.
//
// # Threads
//
// Grad mode and autocast are thread-local in libtorch, and goroutines move between OS
// threads. NoGrad locks the calling goroutine to its thread while it runs; long-running
// training loops should call runtime.LockOSThread themselves (the Trainer does).
package torch
