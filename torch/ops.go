package torch

import (
	"math"

	"github.com/gotrain/gotrain/cgotorch"
)

// Op numbers of the cgotorch op families; they mirror the switch tables in tensor.cc.
const (
	uNeg, uExp, uLog, uSqrt, uAbs, uReLU, uSigmoid, uTanh, uSiLU, uContiguous  = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9
	uDetach, uSign, uFloor, uCeil, uRound, uSin, uCos, uLog1p, uRsqrt, uSquare = 10, 11, 12, 13, 14, 15, 16, 17, 18, 19
	uClone, uIsNaN, uIsInf, uLogicalNot, uReciprocal, uSqueeze, uIsFinite      = 20, 21, 22, 23, 24, 25, 26
	uZerosLike, uOnesLike, uT                                                  = 27, 28, 29

	bAdd, bSub, bMul, bDiv, bPow, bEq, bNe, bLt, bLe, bGt, bGe = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10
	bMaximum, bMinimum, bMatmul, bBmm, bMm, bAnd, bOr, bRem    = 11, 12, 13, 14, 15, 16, 17, 18

	sAdd, sSub, sMul, sDiv, sPow, sEq, sNe, sLt, sLe, sGt, sGe, sRsub, sRem, sFullLike = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13

	iAdd, iMul, iFill, iZero, iDiv, iSub = 0, 1, 2, 3, 4, 5
	ibAdd, ibCopy, ibMul, ibSub          = 0, 1, 2, 3

	rSum, rMean, rAmax, rAmin, rProd, rStd, rVar, rLogSumExp, rAll, rAny = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9

	dSoftmax, dLogSoftmax, dArgmax, dArgmin, dUnsqueeze, dSqueeze, dCumsum = 0, 1, 2, 3, 4, 5, 6

	shView, shReshape, shPermute, shExpand, shRepeat, shFlip = 0, 1, 2, 3, 4, 5
)

func (t *Tensor) unary(op int, name string) *Tensor {
	h, err := cgotorch.Unary(op, t.Handle())
	return must(name, h, err)
}

func (t *Tensor) binary(op int, name string, o *Tensor) *Tensor {
	h, err := cgotorch.Binary(op, t.Handle(), o.Handle())
	return must(name, h, err)
}

func (t *Tensor) scalar(op int, name string, s float64) *Tensor {
	h, err := cgotorch.Scalar(op, t.Handle(), s)
	return must(name, h, err)
}

// Neg returns -t.
func (t *Tensor) Neg() *Tensor { return t.unary(uNeg, "neg") }

// Exp returns e**t.
func (t *Tensor) Exp() *Tensor { return t.unary(uExp, "exp") }

// Log returns the natural logarithm.
func (t *Tensor) Log() *Tensor { return t.unary(uLog, "log") }

// Log1p returns log(1 + t).
func (t *Tensor) Log1p() *Tensor { return t.unary(uLog1p, "log1p") }

// Sqrt returns the square root.
func (t *Tensor) Sqrt() *Tensor { return t.unary(uSqrt, "sqrt") }

// Rsqrt returns 1/sqrt(t).
func (t *Tensor) Rsqrt() *Tensor { return t.unary(uRsqrt, "rsqrt") }

// Square returns t*t.
func (t *Tensor) Square() *Tensor { return t.unary(uSquare, "square") }

// Abs returns |t|.
func (t *Tensor) Abs() *Tensor { return t.unary(uAbs, "abs") }

// Sign returns the sign of each element.
func (t *Tensor) Sign() *Tensor { return t.unary(uSign, "sign") }

// Floor rounds down.
func (t *Tensor) Floor() *Tensor { return t.unary(uFloor, "floor") }

// Ceil rounds up.
func (t *Tensor) Ceil() *Tensor { return t.unary(uCeil, "ceil") }

// Round rounds half to even.
func (t *Tensor) Round() *Tensor { return t.unary(uRound, "round") }

// Sin returns the sine.
func (t *Tensor) Sin() *Tensor { return t.unary(uSin, "sin") }

// Cos returns the cosine.
func (t *Tensor) Cos() *Tensor { return t.unary(uCos, "cos") }

// Reciprocal returns 1/t.
func (t *Tensor) Reciprocal() *Tensor { return t.unary(uReciprocal, "reciprocal") }

// ReLU returns max(t, 0).
func (t *Tensor) ReLU() *Tensor { return t.unary(uReLU, "relu") }

// Sigmoid returns 1/(1+e**-t).
func (t *Tensor) Sigmoid() *Tensor { return t.unary(uSigmoid, "sigmoid") }

// Tanh returns the hyperbolic tangent.
func (t *Tensor) Tanh() *Tensor { return t.unary(uTanh, "tanh") }

// SiLU returns t*sigmoid(t).
func (t *Tensor) SiLU() *Tensor { return t.unary(uSiLU, "silu") }

// GELU returns the Gaussian error linear unit (exact, or the tanh approximation).
func (t *Tensor) GELU(tanhApprox bool) *Tensor {
	h, err := cgotorch.GELU(t.Handle(), tanhApprox)
	return must("gelu", h, err)
}

// LeakyReLU returns max(t, 0) + slope*min(t, 0).
func (t *Tensor) LeakyReLU(slope float64) *Tensor {
	h, err := cgotorch.LeakyReLU(t.Handle(), slope)
	return must("leaky_relu", h, err)
}

// Contiguous returns a contiguous tensor with the same values (t itself when it is).
func (t *Tensor) Contiguous() *Tensor { return t.unary(uContiguous, "contiguous") }

// Detach returns a tensor sharing t's storage with no autograd history.
func (t *Tensor) Detach() *Tensor { return t.unary(uDetach, "detach") }

// Clone returns a copy (recorded by autograd).
func (t *Tensor) Clone() *Tensor { return t.unary(uClone, "clone") }

// IsNaN returns a bool tensor marking NaNs.
func (t *Tensor) IsNaN() *Tensor { return t.unary(uIsNaN, "isnan") }

// IsInf returns a bool tensor marking infinities.
func (t *Tensor) IsInf() *Tensor { return t.unary(uIsInf, "isinf") }

// IsFinite returns a bool tensor marking finite values.
func (t *Tensor) IsFinite() *Tensor { return t.unary(uIsFinite, "isfinite") }

// LogicalNot returns the element-wise logical negation.
func (t *Tensor) LogicalNot() *Tensor { return t.unary(uLogicalNot, "logical_not") }

// ZerosLike returns zeros with t's shape, dtype and device.
func (t *Tensor) ZerosLike() *Tensor { return t.unary(uZerosLike, "zeros_like") }

// OnesLike returns ones with t's shape, dtype and device.
func (t *Tensor) OnesLike() *Tensor { return t.unary(uOnesLike, "ones_like") }

// FullLike returns v with t's shape, dtype and device.
func (t *Tensor) FullLike(v float64) *Tensor { return t.scalar(sFullLike, "full_like", v) }

// T returns the transpose of a matrix (t.T in Python for 2-D tensors).
func (t *Tensor) T() *Tensor { return t.unary(uT, "t") }

// Add returns t + o (broadcasting).
func (t *Tensor) Add(o *Tensor) *Tensor { return t.binary(bAdd, "add", o) }

// Sub returns t - o.
func (t *Tensor) Sub(o *Tensor) *Tensor { return t.binary(bSub, "sub", o) }

// Mul returns t * o.
func (t *Tensor) Mul(o *Tensor) *Tensor { return t.binary(bMul, "mul", o) }

// Div returns t / o (true division).
func (t *Tensor) Div(o *Tensor) *Tensor { return t.binary(bDiv, "div", o) }

// Pow returns t ** o.
func (t *Tensor) Pow(o *Tensor) *Tensor { return t.binary(bPow, "pow", o) }

// Remainder returns Python's t % o.
func (t *Tensor) Remainder(o *Tensor) *Tensor { return t.binary(bRem, "remainder", o) }

// Maximum returns the element-wise maximum.
func (t *Tensor) Maximum(o *Tensor) *Tensor { return t.binary(bMaximum, "maximum", o) }

// Minimum returns the element-wise minimum.
func (t *Tensor) Minimum(o *Tensor) *Tensor { return t.binary(bMinimum, "minimum", o) }

// Eq returns t == o.
func (t *Tensor) Eq(o *Tensor) *Tensor { return t.binary(bEq, "eq", o) }

// Ne returns t != o.
func (t *Tensor) Ne(o *Tensor) *Tensor { return t.binary(bNe, "ne", o) }

// Lt returns t < o.
func (t *Tensor) Lt(o *Tensor) *Tensor { return t.binary(bLt, "lt", o) }

// Le returns t <= o.
func (t *Tensor) Le(o *Tensor) *Tensor { return t.binary(bLe, "le", o) }

// Gt returns t > o.
func (t *Tensor) Gt(o *Tensor) *Tensor { return t.binary(bGt, "gt", o) }

// Ge returns t >= o.
func (t *Tensor) Ge(o *Tensor) *Tensor { return t.binary(bGe, "ge", o) }

// LogicalAnd returns the element-wise logical and.
func (t *Tensor) LogicalAnd(o *Tensor) *Tensor { return t.binary(bAnd, "logical_and", o) }

// LogicalOr returns the element-wise logical or.
func (t *Tensor) LogicalOr(o *Tensor) *Tensor { return t.binary(bOr, "logical_or", o) }

// Matmul is torch.matmul (broadcasting batched matrix product).
func (t *Tensor) Matmul(o *Tensor) *Tensor { return t.binary(bMatmul, "matmul", o) }

// MM is the 2-D matrix product.
func (t *Tensor) MM(o *Tensor) *Tensor { return t.binary(bMm, "mm", o) }

// BMM is the batched 3-D matrix product.
func (t *Tensor) BMM(o *Tensor) *Tensor { return t.binary(bBmm, "bmm", o) }

// AddScalar returns t + s.
func (t *Tensor) AddScalar(s float64) *Tensor { return t.scalar(sAdd, "add", s) }

// SubScalar returns t - s.
func (t *Tensor) SubScalar(s float64) *Tensor { return t.scalar(sSub, "sub", s) }

// RSubScalar returns s - t.
func (t *Tensor) RSubScalar(s float64) *Tensor { return t.scalar(sRsub, "rsub", s) }

// MulScalar returns t * s.
func (t *Tensor) MulScalar(s float64) *Tensor { return t.scalar(sMul, "mul", s) }

// DivScalar returns t / s.
func (t *Tensor) DivScalar(s float64) *Tensor { return t.scalar(sDiv, "div", s) }

// PowScalar returns t ** s.
func (t *Tensor) PowScalar(s float64) *Tensor { return t.scalar(sPow, "pow", s) }

// RemainderScalar returns t % s.
func (t *Tensor) RemainderScalar(s float64) *Tensor { return t.scalar(sRem, "remainder", s) }

// EqScalar returns t == s.
func (t *Tensor) EqScalar(s float64) *Tensor { return t.scalar(sEq, "eq", s) }

// NeScalar returns t != s.
func (t *Tensor) NeScalar(s float64) *Tensor { return t.scalar(sNe, "ne", s) }

// LtScalar returns t < s.
func (t *Tensor) LtScalar(s float64) *Tensor { return t.scalar(sLt, "lt", s) }

// LeScalar returns t <= s.
func (t *Tensor) LeScalar(s float64) *Tensor { return t.scalar(sLe, "le", s) }

// GtScalar returns t > s.
func (t *Tensor) GtScalar(s float64) *Tensor { return t.scalar(sGt, "gt", s) }

// GeScalar returns t >= s.
func (t *Tensor) GeScalar(s float64) *Tensor { return t.scalar(sGe, "ge", s) }

// ---- in place ----

// AddInPlace does t += alpha*o.
func (t *Tensor) AddInPlace(o *Tensor, alpha float64) {
	check("add_", cgotorch.InplaceBinary(ibAdd, t.Handle(), o.Handle(), alpha))
}

// SubInPlace does t -= alpha*o.
func (t *Tensor) SubInPlace(o *Tensor, alpha float64) {
	check("sub_", cgotorch.InplaceBinary(ibSub, t.Handle(), o.Handle(), alpha))
}

// MulInPlace does t *= o.
func (t *Tensor) MulInPlace(o *Tensor) {
	check("mul_", cgotorch.InplaceBinary(ibMul, t.Handle(), o.Handle(), 1))
}

// AddScalarInPlace does t += s.
func (t *Tensor) AddScalarInPlace(s float64) {
	check("add_", cgotorch.InplaceScalar(iAdd, t.Handle(), s))
}

// MulScalarInPlace does t *= s.
func (t *Tensor) MulScalarInPlace(s float64) {
	check("mul_", cgotorch.InplaceScalar(iMul, t.Handle(), s))
}

// DivScalarInPlace does t /= s.
func (t *Tensor) DivScalarInPlace(s float64) {
	check("div_", cgotorch.InplaceScalar(iDiv, t.Handle(), s))
}

// Fill sets every element to v.
func (t *Tensor) Fill(v float64) { check("fill_", cgotorch.InplaceScalar(iFill, t.Handle(), v)) }

// Zero sets every element to zero.
func (t *Tensor) Zero() { check("zero_", cgotorch.InplaceScalar(iZero, t.Handle(), 0)) }

// ---- reductions ----

func (t *Tensor) reduce(op int, name string, dims []int64, keepdim bool) *Tensor {
	h, err := cgotorch.Reduce(op, t.Handle(), dims, keepdim)
	return must(name, h, err)
}

// Sum returns the sum of all elements.
func (t *Tensor) Sum() *Tensor { return t.reduce(rSum, "sum", nil, false) }

// SumDims sums over dims.
func (t *Tensor) SumDims(dims []int64, keepdim bool) *Tensor {
	return t.reduce(rSum, "sum", dims, keepdim)
}

// Mean returns the mean of all elements.
func (t *Tensor) Mean() *Tensor { return t.reduce(rMean, "mean", nil, false) }

// MeanDims averages over dims.
func (t *Tensor) MeanDims(dims []int64, keepdim bool) *Tensor {
	return t.reduce(rMean, "mean", dims, keepdim)
}

// Max returns the largest element.
func (t *Tensor) Max() *Tensor { return t.reduce(rAmax, "max", nil, false) }

// Min returns the smallest element.
func (t *Tensor) Min() *Tensor { return t.reduce(rAmin, "min", nil, false) }

// Prod returns the product of all elements.
func (t *Tensor) Prod() *Tensor { return t.reduce(rProd, "prod", nil, false) }

// Std returns the unbiased standard deviation of all elements.
func (t *Tensor) Std() *Tensor { return t.reduce(rStd, "std", nil, false) }

// Var returns the unbiased variance of all elements.
func (t *Tensor) Var() *Tensor { return t.reduce(rVar, "var", nil, false) }

// LogSumExp returns log(sum(exp(t))) over dims.
func (t *Tensor) LogSumExp(dims []int64, keepdim bool) *Tensor {
	return t.reduce(rLogSumExp, "logsumexp", dims, keepdim)
}

// All reports whether every element is true (a 0-d bool tensor).
func (t *Tensor) All() *Tensor { return t.reduce(rAll, "all", nil, false) }

// Any reports whether some element is true (a 0-d bool tensor).
func (t *Tensor) Any() *Tensor { return t.reduce(rAny, "any", nil, false) }

// MaxDim returns the maxima along dim and their indices.
func (t *Tensor) MaxDim(dim int64, keepdim bool) (values, indices *Tensor) {
	v, i, err := cgotorch.MinMaxDim(true, t.Handle(), dim, keepdim)
	check("max", err)
	return wrap(v), wrap(i)
}

// MinDim returns the minima along dim and their indices.
func (t *Tensor) MinDim(dim int64, keepdim bool) (values, indices *Tensor) {
	v, i, err := cgotorch.MinMaxDim(false, t.Handle(), dim, keepdim)
	check("min", err)
	return wrap(v), wrap(i)
}

// TopK returns the k largest (or smallest) elements along dim and their indices.
func (t *Tensor) TopK(k, dim int64, largest, sorted bool) (values, indices *Tensor) {
	v, i, err := cgotorch.TopK(t.Handle(), k, dim, largest, sorted)
	check("topk", err)
	return wrap(v), wrap(i)
}

// Norm returns the p-norm of all elements.
func (t *Tensor) Norm(p float64) *Tensor {
	h, err := cgotorch.Norm(t.Handle(), p)
	return must("norm", h, err)
}

func (t *Tensor) dimOp(op int, name string, dim int64, keepdim bool) *Tensor {
	h, err := cgotorch.DimOp(op, t.Handle(), dim, keepdim)
	return must(name, h, err)
}

// Argmax returns the indices of the maxima along dim.
func (t *Tensor) Argmax(dim int64, keepdim bool) *Tensor {
	return t.dimOp(dArgmax, "argmax", dim, keepdim)
}

// ArgmaxAll returns the flat index of the largest element.
func (t *Tensor) ArgmaxAll() *Tensor { return t.dimOp(dArgmax, "argmax", math.MinInt64, false) }

// Argmin returns the indices of the minima along dim.
func (t *Tensor) Argmin(dim int64, keepdim bool) *Tensor {
	return t.dimOp(dArgmin, "argmin", dim, keepdim)
}

// Softmax returns softmax along dim.
func (t *Tensor) Softmax(dim int64) *Tensor { return t.dimOp(dSoftmax, "softmax", dim, false) }

// LogSoftmax returns log_softmax along dim.
func (t *Tensor) LogSoftmax(dim int64) *Tensor {
	return t.dimOp(dLogSoftmax, "log_softmax", dim, false)
}

// Cumsum returns the cumulative sum along dim.
func (t *Tensor) Cumsum(dim int64) *Tensor { return t.dimOp(dCumsum, "cumsum", dim, false) }

// ---- shape ----

func (t *Tensor) shapeOp(op int, name string, s []int64) *Tensor {
	h, err := cgotorch.ShapeOp(op, t.Handle(), s)
	return must(name, h, err)
}

// View returns a view with a new shape (-1 infers one dimension).
func (t *Tensor) View(shape ...int64) *Tensor { return t.shapeOp(shView, "view", shape) }

// Reshape returns t with a new shape, as a view when possible.
func (t *Tensor) Reshape(shape ...int64) *Tensor { return t.shapeOp(shReshape, "reshape", shape) }

// Permute reorders the dimensions.
func (t *Tensor) Permute(dims ...int64) *Tensor { return t.shapeOp(shPermute, "permute", dims) }

// Expand broadcasts to a larger shape without copying (-1 keeps a size).
func (t *Tensor) Expand(shape ...int64) *Tensor { return t.shapeOp(shExpand, "expand", shape) }

// Repeat tiles the tensor.
func (t *Tensor) Repeat(times ...int64) *Tensor { return t.shapeOp(shRepeat, "repeat", times) }

// Flip reverses the order along dims.
func (t *Tensor) Flip(dims ...int64) *Tensor { return t.shapeOp(shFlip, "flip", dims) }

// Transpose swaps two dimensions.
func (t *Tensor) Transpose(d0, d1 int64) *Tensor {
	h, err := cgotorch.Dim2Op(0, t.Handle(), d0, d1)
	return must("transpose", h, err)
}

// Flatten merges dimensions start..end (inclusive; -1 is the last).
func (t *Tensor) Flatten(start, end int64) *Tensor {
	h, err := cgotorch.Flatten(t.Handle(), start, end)
	return must("flatten", h, err)
}

// Squeeze removes all dimensions of size 1.
func (t *Tensor) Squeeze() *Tensor { return t.unary(uSqueeze, "squeeze") }

// SqueezeDim removes dimension dim if its size is 1.
func (t *Tensor) SqueezeDim(dim int64) *Tensor { return t.dimOp(dSqueeze, "squeeze", dim, false) }

// Unsqueeze inserts a dimension of size 1 at dim.
func (t *Tensor) Unsqueeze(dim int64) *Tensor { return t.dimOp(dUnsqueeze, "unsqueeze", dim, false) }

// Narrow returns elements start..start+length-1 along dim (a view).
func (t *Tensor) Narrow(dim, start, length int64) *Tensor {
	h, err := cgotorch.Narrow(t.Handle(), dim, start, length)
	return must("narrow", h, err)
}

// Slice returns t[start:end:step] along dim (a view); end is clamped to the size.
func (t *Tensor) Slice(dim, start, end, step int64) *Tensor {
	h, err := cgotorch.Slice(t.Handle(), dim, start, end, step)
	return must("slice", h, err)
}

// Select returns t[index] along dim, removing that dimension (a view).
func (t *Tensor) Select(dim, index int64) *Tensor {
	h, err := cgotorch.Select(t.Handle(), dim, index)
	return must("select", h, err)
}

// IndexSelect gathers the entries at index (an int64 tensor) along dim.
func (t *Tensor) IndexSelect(dim int64, index *Tensor) *Tensor {
	h, err := cgotorch.IndexSelect(t.Handle(), dim, index.Handle())
	return must("index_select", h, err)
}

// Gather is torch.gather along dim.
func (t *Tensor) Gather(dim int64, index *Tensor) *Tensor {
	h, err := cgotorch.Gather(t.Handle(), dim, index.Handle())
	return must("gather", h, err)
}

// MaskedFill returns t with v where mask is true.
func (t *Tensor) MaskedFill(mask *Tensor, v float64) *Tensor {
	h, err := cgotorch.MaskedFill(t.Handle(), mask.Handle(), v)
	return must("masked_fill", h, err)
}

// MaskedSelect returns the elements where mask is true, as a 1-D tensor.
func (t *Tensor) MaskedSelect(mask *Tensor) *Tensor {
	h, err := cgotorch.MaskedSelect(t.Handle(), mask.Handle())
	return must("masked_select", h, err)
}

// Clamp limits values to [lo, hi]; pass math.Inf to leave a side open.
func (t *Tensor) Clamp(lo, hi float64) *Tensor {
	h, err := cgotorch.Clamp(t.Handle(), lo, hi, !math.IsInf(lo, -1), !math.IsInf(hi, 1))
	return must("clamp", h, err)
}

// Where returns a where cond is true and b elsewhere.
func Where(cond, a, b *Tensor) *Tensor {
	h, err := cgotorch.Where(cond.Handle(), a.Handle(), b.Handle())
	return must("where", h, err)
}

func handles(ts []*Tensor) []cgotorch.Tensor {
	hs := make([]cgotorch.Tensor, len(ts))
	for i, t := range ts {
		hs[i] = t.Handle()
	}
	return hs
}

// Cat concatenates tensors along dim.
func Cat(ts []*Tensor, dim int64) *Tensor {
	h, err := cgotorch.Cat(handles(ts), dim, false)
	return must("cat", h, err)
}

// Stack stacks tensors along a new dimension dim.
func Stack(ts []*Tensor, dim int64) *Tensor {
	h, err := cgotorch.Cat(handles(ts), dim, true)
	return must("stack", h, err)
}
