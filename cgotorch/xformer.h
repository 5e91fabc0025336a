// xformer.h: the ops the attention and transformer layers need (scaled dot-product
// attention, triangular masks, splitting, fused matmul-adds, sampling, sorting).
//
// Temporary, hand-written form: these entry points become rows of the generated op
// table, which must produce the same torch signatures.
#ifndef GOTRAIN_CGOTORCH_XFORMER_H
#define GOTRAIN_CGOTORCH_XFORMER_H

#include "cgotorch.h"

#ifdef __cplusplus
extern "C" {
#endif

// at::scaled_dot_product_attention; mask may be NULL; has_scale 0 means the default
// 1/sqrt(E).
cg_result cg_xf_sdpa(cg_tensor q, cg_tensor k, cg_tensor v, cg_tensor mask, double dropout, int causal, double scale, int has_scale);
// at::_fused_sdp_choice: the sdp::SDPBackend libtorch would run for these inputs.
cg_status cg_xf_sdpa_backend(cg_tensor q, cg_tensor k, cg_tensor v, cg_tensor mask, double dropout, int causal, double scale, int has_scale, int64_t *out);
cg_result cg_xf_triu(cg_tensor a, int64_t diagonal);
cg_result cg_xf_tril(cg_tensor a, int64_t diagonal);
// cg_xf_split is at::split (chunk 0) or at::chunk (chunk 1); *out is a malloc'd array of
// *n handles that the caller frees with free().
cg_status cg_xf_split(cg_tensor a, int64_t size, int64_t dim, int chunk, cg_tensor **out, int *n);
cg_result cg_xf_baddbmm(cg_tensor self, cg_tensor b1, cg_tensor b2, double beta, double alpha);
cg_result cg_xf_addmm(cg_tensor self, cg_tensor m1, cg_tensor m2, double beta, double alpha);
cg_result cg_xf_multinomial(cg_tensor a, int64_t num_samples, int replacement);
cg_result cg_xf_one_hot(cg_tensor a, int64_t num_classes);
cg_status cg_xf_sort(cg_tensor a, int64_t dim, int descending, int stable, cg_tensor *values, cg_tensor *indices);
cg_result cg_xf_scatter(cg_tensor a, int64_t dim, cg_tensor index, cg_tensor src);

#ifdef __cplusplus
}
#endif

#endif
