package torch

import (
	"errors"
	"fmt"

	"github.com/gotrain/gotrain/cgotorch"
)

// Sentinel errors for errors.Is on a *Error.
var (
	ErrOutOfMemory     = errors.New("torch: out of memory")
	ErrInvalidArgument = errors.New("torch: invalid argument")
	ErrNotImplemented  = errors.New("torch: not implemented")
)

// Error is a libtorch failure: the operation that failed and libtorch's message.
type Error struct {
	Op   string
	Msg  string
	code cgotorch.Code
}

func (e *Error) Error() string { return "torch: " + e.Op + ": " + e.Msg }

// Is matches the sentinel errors of the failure's class.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrOutOfMemory:
		return e.code == cgotorch.CodeOutOfMemory
	case ErrInvalidArgument:
		return e.code == cgotorch.CodeInvalid
	case ErrNotImplemented:
		return e.code == cgotorch.CodeNotImplemented
	}
	return false
}

func wrapErr(op string, err error) *Error {
	var ce *cgotorch.Error
	if errors.As(err, &ce) {
		return &Error{Op: op, Msg: ce.Msg, code: ce.Code}
	}
	return &Error{Op: op, Msg: err.Error(), code: cgotorch.CodeOther}
}

// check panics with a *Error when err is not nil.
func check(op string, err error) {
	if err != nil {
		panic(wrapErr(op, err))
	}
}

// Recover turns a panic carrying a *Error (or any error) into *errp, prefixed with ctx.
// Use it deferred at a boundary that returns errors:
//
//	func (m *Model) Predict(x *torch.Tensor) (y *torch.Tensor, err error) {
//		defer torch.Recover(&err, "predict")
//		...
//	}
//
// Panics that carry something other than an error are re-raised.
func Recover(errp *error, ctx string) {
	r := recover()
	if r == nil {
		return
	}
	err, ok := r.(error)
	if !ok {
		panic(r)
	}
	if ctx != "" {
		err = fmt.Errorf("%s: %w", ctx, err)
	}
	*errp = err
}
