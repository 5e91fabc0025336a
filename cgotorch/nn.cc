// nn.cc: the functional layer ops and losses the nn package is built on.
#include "internal.h"

using cg::T;
using cg::opt;
using cg::res;

extern "C" {

cg_result cg_linear(cg_tensor x, cg_tensor w, cg_tensor b) {
  CG_TRY return res(at::linear(T(x), T(w), opt(b)));
  CG_CATCH_RESULT
}

cg_result cg_conv2d(cg_tensor x, cg_tensor w, cg_tensor b, const int64_t *stride, const int64_t *padding, const int64_t *dilation, int64_t groups) {
  CG_TRY return res(at::conv2d(T(x), T(w), opt(b), at::IntArrayRef(stride, 2), at::IntArrayRef(padding, 2), at::IntArrayRef(dilation, 2), groups));
  CG_CATCH_RESULT
}

cg_result cg_max_pool2d(cg_tensor x, const int64_t *k, const int64_t *s, const int64_t *p, const int64_t *d, int ceil_mode) {
  CG_TRY return res(at::max_pool2d(T(x), at::IntArrayRef(k, 2), at::IntArrayRef(s, 2), at::IntArrayRef(p, 2), at::IntArrayRef(d, 2), ceil_mode != 0));
  CG_CATCH_RESULT
}

cg_result cg_avg_pool2d(cg_tensor x, const int64_t *k, const int64_t *s, const int64_t *p, int ceil_mode, int count_include_pad) {
  CG_TRY return res(at::avg_pool2d(T(x), at::IntArrayRef(k, 2), at::IntArrayRef(s, 2), at::IntArrayRef(p, 2), ceil_mode != 0, count_include_pad != 0));
  CG_CATCH_RESULT
}

cg_result cg_adaptive_avg_pool2d(cg_tensor x, const int64_t *out) {
  CG_TRY return res(at::adaptive_avg_pool2d(T(x), at::IntArrayRef(out, 2)));
  CG_CATCH_RESULT
}

cg_result cg_batch_norm(cg_tensor x, cg_tensor w, cg_tensor b, cg_tensor rm, cg_tensor rv, int training, double momentum, double eps) {
  CG_TRY return res(at::batch_norm(T(x), opt(w), opt(b), opt(rm), opt(rv), training != 0, momentum, eps, /*cudnn_enabled=*/true));
  CG_CATCH_RESULT
}

cg_result cg_layer_norm(cg_tensor x, const int64_t *shape, int n, cg_tensor w, cg_tensor b, double eps) {
  CG_TRY return res(at::layer_norm(T(x), at::IntArrayRef(shape, n), opt(w), opt(b), eps));
  CG_CATCH_RESULT
}

cg_result cg_group_norm(cg_tensor x, int64_t groups, cg_tensor w, cg_tensor b, double eps) {
  CG_TRY return res(at::group_norm(T(x), groups, opt(w), opt(b), eps));
  CG_CATCH_RESULT
}

cg_result cg_embedding(cg_tensor w, cg_tensor idx, int64_t padding_idx) {
  CG_TRY return res(at::embedding(T(w), T(idx), padding_idx));
  CG_CATCH_RESULT
}

cg_result cg_cross_entropy(cg_tensor x, cg_tensor y, cg_tensor weight, int reduction, int64_t ignore_index, double label_smoothing) {
  CG_TRY return res(at::cross_entropy_loss(T(x), T(y), opt(weight), reduction, ignore_index, label_smoothing));
  CG_CATCH_RESULT
}

cg_result cg_nll_loss(cg_tensor x, cg_tensor y, cg_tensor weight, int reduction, int64_t ignore_index) {
  CG_TRY return res(at::nll_loss_nd(T(x), T(y), opt(weight), reduction, ignore_index));
  CG_CATCH_RESULT
}

cg_result cg_mse_loss(cg_tensor x, cg_tensor y, int reduction) {
  CG_TRY return res(at::mse_loss(T(x), T(y), reduction));
  CG_CATCH_RESULT
}

cg_result cg_l1_loss(cg_tensor x, cg_tensor y, int reduction) {
  CG_TRY return res(at::l1_loss(T(x), T(y), reduction));
  CG_CATCH_RESULT
}

cg_result cg_smooth_l1_loss(cg_tensor x, cg_tensor y, int reduction, double beta) {
  CG_TRY return res(at::smooth_l1_loss(T(x), T(y), reduction, beta));
  CG_CATCH_RESULT
}

cg_result cg_bce_with_logits(cg_tensor x, cg_tensor y, cg_tensor weight, cg_tensor pos_weight, int reduction) {
  CG_TRY return res(at::binary_cross_entropy_with_logits(T(x), T(y), opt(weight), opt(pos_weight), reduction));
  CG_CATCH_RESULT
}

}  // extern "C"
