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
// Scopes are process-wide, not per goroutine: open them on the goroutine that runs the
// model (the Trainer does so once per step) and do not create tensors on other
// goroutines while one is open. The data loader's workers therefore work on Go memory
// and hand tensors over on the consumer's goroutine.
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
