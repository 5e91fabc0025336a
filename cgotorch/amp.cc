// amp.cc: autocast regions and GradScaler's unscale and scale update, each one call.
#include <ATen/autocast_mode.h>
#include <ATen/core/grad_mode.h>
#include <map>
#include <tuple>
#include <vector>
#include "internal.h"

using cg::T;

namespace {

at::DeviceType devtype(int t) { return t == 1 ? at::kCUDA : at::kCPU; }

}  // namespace

extern "C" {

cg_status cg_autocast_enter(int device_type, int dtype, int *prev_enabled, int *prev_dtype, int *prev_cache) {
  CG_TRY if (cg::recording()) cg::refuse("autocast changes thread state outside the trace");
  auto dt = devtype(device_type);
  *prev_enabled = at::autocast::is_autocast_enabled(dt) ? 1 : 0;
  *prev_dtype = static_cast<int>(at::autocast::get_autocast_dtype(dt));
  *prev_cache = at::autocast::is_autocast_cache_enabled() ? 1 : 0;
  at::autocast::set_autocast_enabled(dt, true);
  at::autocast::set_autocast_dtype(dt, static_cast<at::ScalarType>(dtype));
  at::autocast::set_autocast_cache_enabled(true);
  at::autocast::increment_nesting();
  return cg::ok();
  CG_CATCH_STATUS
}

cg_status cg_autocast_exit(int device_type, int prev_enabled, int prev_dtype, int prev_cache) {
  CG_TRY auto dt = devtype(device_type);
  // As torch.autocast.__exit__: the weight-cast cache lives while the outermost region does.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(dt, prev_enabled != 0);
  at::autocast::set_autocast_dtype(dt, static_cast<at::ScalarType>(prev_dtype));
  at::autocast::set_autocast_cache_enabled(prev_cache != 0);
  return cg::ok();
  CG_CATCH_STATUS
}

cg_status cg_amp_unscale(cg_tensor *params, int n, cg_tensor scale, cg_tensor *found_inf) {
  CG_TRY at::NoGradGuard no_grad;
  if (cg::recording()) cg::refuse("the GradScaler's unscale is not recorded");
  const at::Tensor &sc = T(scale);
  // GradScaler.unscale_: inv_scale = scale.double().reciprocal().float().
  at::Tensor inv = sc.to(at::kDouble).reciprocal().to(at::kFloat);
  at::Tensor found = at::zeros({}, sc.options().dtype(at::kFloat));
  std::map<std::tuple<int, int, int>, std::vector<at::Tensor>> groups;
  std::vector<std::tuple<int, int, int>> order;
  for (int i = 0; i < n; i++) {
    const at::Tensor &g = T(params[i]).grad();
    if (!g.defined()) continue;
    if (g.scalar_type() == at::kHalf) return cg::fail(CG_ERR_INVALID, "Attempting to unscale FP16 gradients.");
    std::tuple<int, int, int> key{static_cast<int>(g.device().type()), static_cast<int>(g.device().index()),
                                  static_cast<int>(g.scalar_type())};
    auto it = groups.find(key);
    if (it == groups.end()) {
      order.push_back(key);
      groups[key] = {g};
    } else {
      it->second.push_back(g);
    }
  }
  // One found_inf per device, summed onto the scale's device as GradScaler.update sums them.
  std::map<std::pair<int, int>, at::Tensor> per_device;
  for (auto &key : order) {
    auto &gs = groups[key];
    at::Device d = gs[0].device();
    std::pair<int, int> dk{std::get<0>(key), std::get<1>(key)};
    auto it = per_device.find(dk);
    if (it == per_device.end()) it = per_device.emplace(dk, d == sc.device() ? found : at::zeros({}, sc.options().dtype(at::kFloat).device(d))).first;
    at::_amp_foreach_non_finite_check_and_unscale_(gs, it->second, inv.to(d));
  }
  for (auto &kv : per_device)
    if (!kv.second.is_same(found)) found.add_(kv.second.to(sc.device()));
  *found_inf = cg::owned(std::move(found));
  return cg::ok();
  CG_CATCH_STATUS
}

cg_status cg_amp_update_scale(cg_tensor scale, cg_tensor growth_tracker, cg_tensor *found_infs, int n, double growth,
                              double backoff, int64_t interval) {
  CG_TRY at::NoGradGuard no_grad;
  at::Tensor &sc = T(scale);
  at::Tensor combined = T(found_infs[0]).to(sc.device());
  if (n > 1) {
    combined = combined.clone();
    for (int i = 1; i < n; i++) combined.add_(T(found_infs[i]).to(sc.device()));
  }
  at::_amp_update_scale_(sc, T(growth_tracker), combined, growth, backoff, interval);
  return cg::ok();
  CG_CATCH_STATUS
}

}  // extern "C"
