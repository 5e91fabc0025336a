// chain.cc: a Sequential of built-in layers in one crossing (cgotorch.h, "chains"). Each
// stage runs its op's ops.tab expression (cg::chain_stage, generated into stages_gen.cc),
// so a chain and the layers called one by one compute the same bits, build the same
// autograd graph and draw the same random numbers.
#include <ATen/core/grad_mode.h>
#include <string>

#include "internal.h"

at::Tensor cg::batch_norm_counted(const at::Tensor &x, const std::optional<at::Tensor> &w,
                                  const std::optional<at::Tensor> &b, const std::optional<at::Tensor> &running_mean,
                                  const std::optional<at::Tensor> &running_var, const std::optional<at::Tensor> &count,
                                  int64_t ranks, bool training, double momentum, double eps) {
  int64_t d = x.dim();
  if (!(d >= 0 && d < 63 && (ranks >> d) & 1)) {
    std::string want;
    for (int64_t i = 0; i < 63; i++)
      if ((ranks >> i) & 1) want += (want.empty() ? "" : " ") + std::to_string(i);
    TORCH_CHECK(false, "expected [", want, "]-d input, got ", d, "-d");
  }
  if (training && count) {
    at::NoGradGuard no_grad;
    count->add_(cg::scalar(1));
  }
  return at::batch_norm(x, w, b, running_mean, running_var, training || !running_mean, momentum, eps, true);
}

extern "C" {

cg_chain_result cg_chain_forward(const cg_stage *stages, int n, cg_tensor x_) {
  int i = -1;
  try {
    cg::sync_num_threads();
    at::Tensor x = cg::T(x_);
    for (i = 0; i < n; i++) x = cg::chain_stage(stages[i], x);
    cg_result r = cg::res(std::move(x));
    return cg_chain_result{r.code, r.scope, r.msg, r.t, -1};
  } catch (...) {
    cg_status s = cg::classify();
    return cg_chain_result{s.code, 0, s.msg, 0, i};
  }
}

}  // extern "C"
