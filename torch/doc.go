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
// # Errors
//
// Tensor operations panic with a *Error on misuse (a shape mismatch, an impossible
// allocation), as numeric Go code does; the message is libtorch's, without its C++
// backtrace. Functions that do I/O or run training return errors instead; Recover turns a
// panic into an error at such a boundary. errors.Is(err, ErrOutOfMemory) identifies
// allocation failures.
//
// # Threads
//
// Grad mode and autocast are thread-local in libtorch, and goroutines move between OS
// threads. NoGrad locks the calling goroutine to its thread while it runs; long-running
// training loops should call runtime.LockOSThread themselves (the Trainer does).
package torch
