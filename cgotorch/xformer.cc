// xformer.cc: bodies of the entry points in xformer.h, one ATen call each.
#include "internal.h"
#include "xformer.h"

using cg::T;
using cg::res;

static std::optional<double> scale_opt(double scale, int has_scale) {
  return has_scale ? std::optional<double>(scale) : std::nullopt;
}

// some_mask maps a NULL handle to nullopt: SDPA rejects an undefined tensor inside the optional.
static std::optional<at::Tensor> some_mask(cg_tensor m) {
  return m ? std::optional<at::Tensor>(T(m)) : std::nullopt;
}

extern "C" {

cg_result cg_xf_sdpa(cg_tensor q, cg_tensor k, cg_tensor v, cg_tensor mask, double dropout, int causal, double scale, int has_scale) {
  CG_TRY return res(at::scaled_dot_product_attention(T(q), T(k), T(v), some_mask(mask), dropout, causal != 0, scale_opt(scale, has_scale)));
  CG_CATCH_RESULT
}

cg_status cg_xf_sdpa_backend(cg_tensor q, cg_tensor k, cg_tensor v, cg_tensor mask, double dropout, int causal, double scale, int has_scale, int64_t *out) {
  CG_TRY *out = at::_fused_sdp_choice(T(q), T(k), T(v), some_mask(mask), dropout, causal != 0, scale_opt(scale, has_scale));
  return cg::ok();
  CG_CATCH_STATUS
}

cg_result cg_xf_triu(cg_tensor a, int64_t diagonal) {
  CG_TRY return res(at::triu(T(a), diagonal));
  CG_CATCH_RESULT
}

cg_result cg_xf_tril(cg_tensor a, int64_t diagonal) {
  CG_TRY return res(at::tril(T(a), diagonal));
  CG_CATCH_RESULT
}

cg_status cg_xf_split(cg_tensor a, int64_t size, int64_t dim, int chunk, cg_tensor **out, int *n) {
  CG_TRY std::vector<at::Tensor> parts = chunk ? at::chunk(T(a), size, dim) : at::split(T(a), size, dim);
  auto *arr = static_cast<cg_tensor *>(std::malloc(sizeof(cg_tensor) * (parts.empty() ? 1 : parts.size())));
  if (!arr) throw std::bad_alloc();
  for (size_t i = 0; i < parts.size(); i++) arr[i] = new at::Tensor(std::move(parts[i]));
  *out = arr;
  *n = static_cast<int>(parts.size());
  return cg::ok();
  CG_CATCH_STATUS
}

cg_result cg_xf_baddbmm(cg_tensor self, cg_tensor b1, cg_tensor b2, double beta, double alpha) {
  CG_TRY return res(at::baddbmm(T(self), T(b1), T(b2), cg::scalar(beta), cg::scalar(alpha)));
  CG_CATCH_RESULT
}

cg_result cg_xf_addmm(cg_tensor self, cg_tensor m1, cg_tensor m2, double beta, double alpha) {
  CG_TRY return res(at::addmm(T(self), T(m1), T(m2), cg::scalar(beta), cg::scalar(alpha)));
  CG_CATCH_RESULT
}

cg_result cg_xf_multinomial(cg_tensor a, int64_t num_samples, int replacement) {
  CG_TRY return res(at::multinomial(T(a), num_samples, replacement != 0));
  CG_CATCH_RESULT
}

cg_result cg_xf_one_hot(cg_tensor a, int64_t num_classes) {
  CG_TRY return res(at::one_hot(T(a), num_classes));
  CG_CATCH_RESULT
}

cg_status cg_xf_sort(cg_tensor a, int64_t dim, int descending, int stable, cg_tensor *values, cg_tensor *indices) {
  CG_TRY auto r = at::sort(T(a), std::optional<bool>(stable != 0), dim, descending != 0);
  *values = new at::Tensor(std::get<0>(r));
  *indices = new at::Tensor(std::get<1>(r));
  return cg::ok();
  CG_CATCH_STATUS
}

cg_result cg_xf_scatter(cg_tensor a, int64_t dim, cg_tensor index, cg_tensor src) {
  CG_TRY return res(at::scatter(T(a), dim, T(index), T(src)));
  CG_CATCH_RESULT
}

}  // extern "C"
