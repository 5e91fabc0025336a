// chain.cc: a Sequential of built-in layers in one crossing (cgotorch.h, "chains"). Each
// case is the ATen call of the layer's own forward (ops.tab's row for it, with the same
// argument conversions), so a chain and the layers called one by one compute the same
// bits, build the same autograd graph and draw the same random numbers.
#include <ATen/core/grad_mode.h>
#include <string>

#include "internal.h"

namespace {

at::IntArrayRef two(const int64_t (&v)[2]) { return at::IntArrayRef(v, 2); }

// rank_check is BatchNorm's input check, with nn's message.
void rank_check(const cg_stage &s, const at::Tensor &x) {
  int64_t d = x.dim();
  if (d >= 0 && d < 63 && (s.input_dims >> d) & 1) return;
  std::string want;
  for (int64_t i = 0; i < 63; i++)
    if ((s.input_dims >> i) & 1) want += (want.empty() ? "" : " ") + std::to_string(i);
  TORCH_CHECK(false, "expected [", want, "]-d input, got ", d, "-d");
}

}  // namespace

at::Tensor cg::chain_stage(const cg_stage &s, const at::Tensor &x) {
  switch (static_cast<cg_stage_kind>(s.kind)) {
    case CG_STAGE_LINEAR:
      return at::linear(x, cg::T(s.weight), cg::opt(s.bias));
    case CG_STAGE_CONV2D:
      return at::conv2d(x, cg::T(s.weight), cg::opt(s.bias), two(s.stride), two(s.padding), two(s.dilation), s.groups);
    case CG_STAGE_MAX_POOL2D:
      return at::max_pool2d(x, two(s.kernel), two(s.stride), two(s.padding), two(s.dilation), s.ceil_mode != 0);
    case CG_STAGE_AVG_POOL2D:
      return at::avg_pool2d(x, two(s.kernel), two(s.stride), two(s.padding), s.ceil_mode != 0, s.count_include_pad != 0);
    case CG_STAGE_ADAPTIVE_AVG_POOL2D:
      return at::adaptive_avg_pool2d(x, two(s.kernel));
    case CG_STAGE_BATCH_NORM: {
      rank_check(s, x);
      if (s.training && s.num_batches_tracked) {
        at::NoGradGuard no_grad;
        cg::T(s.num_batches_tracked).add_(cg::scalar(1));
      }
      return at::batch_norm(x, cg::opt(s.weight), cg::opt(s.bias), cg::opt(s.running_mean), cg::opt(s.running_var),
                            s.training != 0 || !s.running_mean, s.momentum, s.eps, true);
    }
    case CG_STAGE_DROPOUT:
      return at::dropout(x, s.p, s.training != 0);
    case CG_STAGE_FLATTEN:
      return x.flatten(s.start_dim, s.end_dim);
    case CG_STAGE_RELU:
      return at::relu(x);
    case CG_STAGE_LEAKY_RELU:
      return at::leaky_relu(x, cg::scalar(s.slope));
    case CG_STAGE_GELU:
      return at::gelu(x, s.tanh ? "tanh" : "none");
    case CG_STAGE_SILU:
      return at::silu(x);
    case CG_STAGE_TANH:
      return at::tanh(x);
    case CG_STAGE_SIGMOID:
      return at::sigmoid(x);
    case CG_STAGE_KINDS:
      break;
  }
  TORCH_CHECK(false, "unknown stage kind ", s.kind);
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
