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

// Error is a libtorch failure or a misuse of this package: the operation that failed and
// the message (libtorch's, without its C++ backtrace).
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

// opErr names op in an error from the C boundary.
func opErr(op string, err error) *Error {
	var ce *cgotorch.Error
	if errors.As(err, &ce) {
		return &Error{Op: op, Msg: ce.Msg, code: ce.Code}
	}
	return &Error{Op: op, Msg: err.Error(), code: cgotorch.CodeOther}
}

// wrapErr is opErr for errors a function returns (nil stays nil).
func wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	return opErr(op, err)
}

// check panics with a *Error when err is not nil.
func check(op string, err error) {
	if err != nil {
		panic(opErr(op, err))
	}
}

// recoverCallback, deferred in a Go function that C calls, turns a panic into *e, the
// error C gets (with a *Error's code), and keeps the panic's value in *value unless
// value is nil.
func recoverCallback(e **cgotorch.Error, value *any) {
	r := recover()
	if r == nil {
		return
	}
	if value != nil {
		*value = r
	}
	*e = &cgotorch.Error{Code: cgotorch.CodeOther, Msg: fmt.Sprint(r)}
	if te, ok := r.(*Error); ok && te.code != 0 {
		(*e).Code = te.code
	}
}

// Recover turns a panic carrying a *Error into *errp, prefixed with ctx; any other panic
// (a nil dereference or an index out of range in a user's Forward, a failed assertion)
// continues with its original stack. Use it deferred at a boundary that returns errors:
//
//	func (m *Model) Predict(x *torch.Tensor) (y *torch.Tensor, err error) {
//		defer torch.Recover(&err, "predict")
//		...
//	}
//
// This is the package's error rule, as gonum's: ops panic with a *Error on misuse (a
// shape mismatch, a tensor used after Free) and on libtorch failures such as running out
// of memory; functions that do I/O or run training return errors; constructors panic on
// programmer error (an impossible size) and return errors for anything that depends on
// data or files.
func Recover(errp *error, ctx string) {
	r := recover()
	if r == nil {
		return
	}
	te, ok := r.(*Error)
	if !ok {
		panic(r)
	}
	var err error = te
	if ctx != "" {
		err = fmt.Errorf("%s: %w", ctx, te)
	}
	*errp = err
}
