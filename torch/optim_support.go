package torch

// ErrorFrom converts an error from a cgotorch call into a *Error for op (nil stays nil),
// so that packages calling the C boundary directly (torch/optim, amp) return errors that
// match ErrOutOfMemory and the other sentinels.
func ErrorFrom(op string, err error) error {
	if err == nil {
		return nil
	}
	return wrapErr(op, err)
}
