// metrics.cc: the Trainer's per-batch bookkeeping in one call. A training step adds its
// loss and metrics to running sums that stay where they were computed, so that a CUDA
// step needs no device-to-host synchronisation; done with ATen ops that bookkeeping is
// about seven dispatches a batch, as much as a small model's forward. This file does it
// in one crossing: on the CPU (where reading a value is no synchronisation) with plain
// arithmetic on the values, elsewhere with a few ATen ops queued on the device.
#include <ATen/core/grad_mode.h>
#include <algorithm>
#include <cmath>

#include "internal.h"

namespace {

// host_value reads a one-element CPU tensor of any real dtype as a double, without a
// dispatch.
double host_value(const at::Tensor &v) {
  // The usual dtypes of a loss first, without the dispatch switch.
  if (v.scalar_type() == at::kFloat) return *v.const_data_ptr<float>();
  if (v.scalar_type() == at::kDouble) return *v.const_data_ptr<double>();
  double out = 0;
  AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, v.scalar_type(), "cg_accumulate",
                             [&] { out = static_cast<double>(*v.const_data_ptr<scalar_t>()); });
  return out;
}

void accumulate_host(double *a, const cg_tensor *vs, int n, double weight, int64_t step, int flags) {
  double first = 0;
  for (int i = 0; i < n; i++) {
    double v = host_value(cg::T(vs[i]));
    if (i == 0) first = v;
    if ((flags & CG_ACC_SKIP_NONFINITE) && !std::isfinite(v)) continue;
    a[i] += weight * v;
  }
  if (flags & CG_ACC_TRACK) {
    a[n] = first;
    if (!std::isfinite(first)) a[n + 1] = std::min(a[n + 1], static_cast<double>(step));
  }
}

void accumulate_aten(at::Tensor &acc, const std::vector<at::Tensor> &vs, double weight, int64_t step, int flags) {
  int64_t n = static_cast<int64_t>(vs.size());
  std::vector<at::Tensor> flat;
  flat.reserve(vs.size());
  for (auto &v : vs) flat.push_back(v.reshape({}).to(at::kDouble));
  at::Tensor vals = at::stack(flat);
  at::Tensor first = vals.select(0, 0);
  if (flags & CG_ACC_SKIP_NONFINITE) vals = at::where(at::isfinite(vals), vals, at::zeros_like(vals));
  acc.narrow(0, 0, n).add_(vals, weight);
  if (flags & CG_ACC_TRACK) {
    acc.select(0, n).copy_(first);
    at::Tensor bad = acc.select(0, n + 1);
    bad.copy_(at::where(at::isfinite(first), bad, bad.clamp_max(static_cast<double>(step))));
  }
}

}  // namespace

void cg::accumulate(cg_tensor acc, cg_tensor *values, int n, double weight, int64_t step, int flags) {
  at::NoGradGuard no_grad;
  at::Tensor &a = cg::T(acc);
  int64_t need = n + ((flags & CG_ACC_TRACK) ? 2 : 0);
  TORCH_CHECK(n > 0, "accumulate: no values");
  TORCH_CHECK(a.dim() == 1 && a.scalar_type() == at::kDouble && a.is_contiguous() && a.numel() >= need,
              "accumulate: the accumulator must be a contiguous float64 vector of at least ", need,
              " elements, got ", a.scalar_type(), a.sizes());
  for (int i = 0; i < n; i++) {
    const at::Tensor &v = cg::T(values[i]);
    TORCH_CHECK(v.numel() == 1, "accumulate: a value has ", v.numel(), " elements, not 1 (shape ", v.sizes(), ")");
    TORCH_CHECK(!v.is_complex(), "accumulate: a value is complex");
    // A value on another device would be copied, and so synchronise, every batch.
    TORCH_CHECK(v.device() == a.device(), "accumulate: a value is on ", v.device(), ", the accumulator on ", a.device());
  }
  if (a.is_cpu() && !(flags & CG_ACC_ATEN)) {
    accumulate_host(a.data_ptr<double>(), values, n, weight, step, flags);
  } else {
    accumulate_aten(a, cg::tensors(values, n), weight, step, flags);
  }
}

extern "C" {

cg_status cg_accumulate(cg_tensor acc, cg_tensor *values, int n, double weight, int64_t step, int flags) {
  CG_TRY cg::accumulate(acc, values, n, weight, step, flags);
  if (cg::recording()) cg::record_accumulate(acc, values, n, weight, step, flags);
  return cg::ok();
  CG_CATCH_STATUS
}

}  // extern "C"
