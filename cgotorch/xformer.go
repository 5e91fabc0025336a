package cgotorch

// Temporary, hand-written wrappers of xformer.h; they become rows of the generated op
// table with the same torch signatures.

/*
#include <stdlib.h>
#include "xformer.h"
*/
import "C"

import "unsafe"

func scaleArg(scale float64) (C.double, C.int) {
	if scale <= 0 {
		return 0, 0
	}
	return C.double(scale), 1
}

// SDPA is at::scaled_dot_product_attention; mask may be nil; scale <= 0 is the default.
func SDPA(q, k, v, mask Tensor, dropout float64, causal bool, scale float64) (Tensor, error) {
	s, has := scaleArg(scale)
	return rt(C.cg_xf_sdpa(h(q), h(k), h(v), h(mask), C.double(dropout), cbool(causal), s, has))
}

// SDPABackend is at::_fused_sdp_choice: the backend number (sdp::SDPBackend) libtorch
// picks for these inputs.
func SDPABackend(q, k, v, mask Tensor, dropout float64, causal bool, scale float64) (int64, error) {
	s, has := scaleArg(scale)
	var out C.int64_t
	err := st(C.cg_xf_sdpa_backend(h(q), h(k), h(v), h(mask), C.double(dropout), cbool(causal), s, has, &out))
	return int64(out), err
}

// Triu is at::triu.
func Triu(a Tensor, diagonal int64) (Tensor, error) {
	return rt(C.cg_xf_triu(h(a), C.int64_t(diagonal)))
}

// Tril is at::tril.
func Tril(a Tensor, diagonal int64) (Tensor, error) {
	return rt(C.cg_xf_tril(h(a), C.int64_t(diagonal)))
}

// Split is at::split(a, size, dim), or at::chunk(a, size, dim) when chunk is true.
func Split(a Tensor, size, dim int64, chunk bool) ([]Tensor, error) {
	var arr *C.cg_tensor
	var n C.int
	if err := st(C.cg_xf_split(h(a), C.int64_t(size), C.int64_t(dim), cbool(chunk), &arr, &n)); err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(arr))
	hs := unsafe.Slice(arr, int(n))
	out := make([]Tensor, len(hs))
	for i, p := range hs {
		out[i] = Tensor(p)
	}
	return out, nil
}

// Baddbmm is at::baddbmm(self, b1, b2, beta, alpha).
func Baddbmm(self, b1, b2 Tensor, beta, alpha float64) (Tensor, error) {
	return rt(C.cg_xf_baddbmm(h(self), h(b1), h(b2), C.double(beta), C.double(alpha)))
}

// Addmm is at::addmm(self, m1, m2, beta, alpha).
func Addmm(self, m1, m2 Tensor, beta, alpha float64) (Tensor, error) {
	return rt(C.cg_xf_addmm(h(self), h(m1), h(m2), C.double(beta), C.double(alpha)))
}

// Multinomial is at::multinomial with the default generator.
func Multinomial(a Tensor, numSamples int64, replacement bool) (Tensor, error) {
	return rt(C.cg_xf_multinomial(h(a), C.int64_t(numSamples), cbool(replacement)))
}

// OneHot is at::one_hot.
func OneHot(a Tensor, numClasses int64) (Tensor, error) {
	return rt(C.cg_xf_one_hot(h(a), C.int64_t(numClasses)))
}

// Sort is at::sort(a, stable, dim, descending).
func Sort(a Tensor, dim int64, descending, stable bool) (Tensor, Tensor, error) {
	var v, i C.cg_tensor
	err := st(C.cg_xf_sort(h(a), C.int64_t(dim), cbool(descending), cbool(stable), &v, &i))
	return Tensor(v), Tensor(i), err
}

// Scatter is at::scatter(a, dim, index, src).
func Scatter(a Tensor, dim int64, index, src Tensor) (Tensor, error) {
	return rt(C.cg_xf_scatter(h(a), C.int64_t(dim), h(index), h(src)))
}
