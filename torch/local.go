package torch

// Local runs f in a scope of its own and returns f's result in the caller's scope; every
// other tensor f made is freed when f returns, as a Python function's locals are when it
// returns. Autograd holds its own references to the tensors it saved for backward, so a
// forward pass run in Local keeps what backward needs and frees the rest (a residual
// branch's output, a cast, an activation the next op does not save) at once, as eager
// PyTorch does, instead of when the step's scope closes: a model's blocks and the
// Trainer's step use it to keep a step's peak memory at PyTorch's.
//
// f must not hand a tensor it made to anything that outlives it (a cache, a field, a
// closure variable) other than through its result: that tensor is freed too, and using
// it panics. Local costs three calls into libtorch (open, keep, close).
func Local(f func() *Tensor) *Tensor {
	s := NewScope()
	defer s.Close()
	return s.Keep(f())
}

// LocalN is Local for a function with several results (nil ones are skipped).
func LocalN(f func() []*Tensor) []*Tensor {
	s := NewScope()
	defer s.Close()
	out := f()
	s.Keep(out...)
	return out
}
