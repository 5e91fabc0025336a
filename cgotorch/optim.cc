// optim.cc: optimizer steps, zero_grad and gradient clipping, each one call over all
// parameters, written with ATen's multi-tensor (_foreach_*) kernels the way
// torch/optim/*.py's _multi_tensor_* functions are, so the arithmetic is PyTorch's.
//
// Only the default (foreach) forms of SGD, Adam, RMSprop and Adagrad are here: each step
// computes host values from the step count in float64 (Adam's bias corrections, Adagrad's
// decayed rate) that must equal PyTorch's to the bit, and a replayed step (replay.cc) has
// no Go between steps to compute them, so the step reads its counts here. The fused
// forms (ATen's _fused_adam(w)_ and _fused_sgd_, which read the counts and the learning
// rate from tensors) are Go over ops: torch/optim/fused.go.
#include <ATen/core/grad_mode.h>
#include <cmath>
#include <map>
#include <sstream>
#include <tuple>
#include <vector>
#include "internal.h"

using cg::T;

namespace {

using List = std::vector<at::Tensor>;

// uniform reports whether every tensor of ts has the first one's device and dtype: the
// usual case, one bucket, found without building buckets' map every step.
bool uniform(const List &ts) {
  for (size_t i = 1; i < ts.size(); i++)
    if (ts[i].device() != ts[0].device() || ts[i].scalar_type() != ts[0].scalar_type()) return false;
  return true;
}

// Buckets are the indices of tensors that share a device and dtype, in first-seen order,
// as torch.optim.Optimizer._group_tensors_by_device_and_dtype groups them.
std::vector<std::vector<size_t>> buckets(const List &ts) {
  if (!ts.empty() && uniform(ts)) {
    std::vector<size_t> all(ts.size());
    for (size_t i = 0; i < all.size(); i++) all[i] = i;
    return {std::move(all)};
  }
  std::map<std::tuple<int, int, int>, size_t> where;
  std::vector<std::vector<size_t>> out;
  for (size_t i = 0; i < ts.size(); i++) {
    auto d = ts[i].device();
    std::tuple<int, int, int> key{static_cast<int>(d.type()), static_cast<int>(d.index()),
                                  static_cast<int>(ts[i].scalar_type())};
    auto it = where.find(key);
    if (it == where.end()) {
      where.emplace(key, out.size());
      out.push_back({i});
    } else {
      out[it->second].push_back(i);
    }
  }
  return out;
}

List pick(const List &ts, const std::vector<size_t> &idx) {
  List out;
  out.reserve(idx.size());
  for (auto i : idx) out.push_back(ts[i]);
  return out;
}

at::Tensor new_step(const at::Tensor &) { return at::zeros({}, at::TensorOptions().dtype(at::kFloat)); }
at::Tensor zeros_like(const at::Tensor &p) { return at::zeros_like(p, at::MemoryFormat::Preserve); }

// Slot is one state tensor of one parameter: state[param*CG_OPT_NSTATE + k].
struct Slots {
  cg_tensor *state;
  at::Tensor get(size_t p, int k) const {
    cg_tensor h = state[p * CG_OPT_NSTATE + k];
    return h ? T(h) : at::Tensor();
  }
  void set(size_t p, int k, at::Tensor t) const { state[p * CG_OPT_NSTATE + k] = cg::owned(std::move(t)); }
  // replace puts t in an existing slot's handle, which its Go tensor keeps.
  void replace(size_t p, int k, at::Tensor t) const { T(state[p * CG_OPT_NSTATE + k]) = std::move(t); }
};

std::vector<at::Scalar> scalars(const std::vector<double> &v) { return std::vector<at::Scalar>(v.begin(), v.end()); }

// grads_for applies maximize and (coupled) weight decay without touching p.grad.
List grads_for(const List &params, List grads, bool maximize, double weight_decay) {
  if (maximize) grads = at::_foreach_neg(grads);
  if (weight_decay != 0) grads = at::_foreach_add(grads, params, weight_decay);
  return grads;
}

// Each step reads its group's hyperparameters h in torch.OptimizerKeys' order.

void sgd(const double *h, const List &params, const List &grads_in, const std::vector<size_t> &pid, const Slots &s) {
  double lr = h[0], momentum = h[1], dampening = h[2], wd = h[3];
  bool nesterov = h[4] != 0, maximize = h[5] != 0;
  List grads = grads_for(params, grads_in, maximize, wd);
  if (momentum != 0) {
    List bufs;
    bool all = true;
    for (size_t i = 0; i < params.size(); i++) all = all && s.get(pid[i], 0).defined();
    if (all) {
      for (size_t i = 0; i < params.size(); i++) bufs.push_back(s.get(pid[i], 0));
      at::_foreach_mul_(bufs, momentum);
      at::_foreach_add_(bufs, grads, 1 - dampening);
    } else {
      for (size_t i = 0; i < params.size(); i++) {
        at::Tensor buf = s.get(pid[i], 0);
        if (!buf.defined()) {
          buf = grads[i].detach().clone();
          s.set(pid[i], 0, buf);
        } else {
          buf.mul_(momentum).add_(grads[i], 1 - dampening);
        }
        bufs.push_back(buf);
      }
    }
    if (nesterov)
      grads = at::_foreach_add(grads, bufs, momentum);
    else
      grads = bufs;
  }
  at::_foreach_add_(params, grads, -lr);
}

// ensure returns state slot k of each parameter, creating it with make when missing.
template <class F>
List ensure(const List &params, const std::vector<size_t> &pid, const Slots &s, int k, F make) {
  List out;
  out.reserve(params.size());
  for (size_t i = 0; i < params.size(); i++) {
    at::Tensor t = s.get(pid[i], k);
    if (!t.defined()) {
      t = make(params[i]);
      s.set(pid[i], k, t);
    }
    out.push_back(t);
  }
  return out;
}

std::vector<double> step_values(const List &steps) {
  at::_foreach_add_(steps, 1);
  std::vector<double> v;
  v.reserve(steps.size());
  for (auto &st : steps) v.push_back(st.item<double>());
  return v;
}

void adam(const double *h, const List &params, const List &grads_in, const std::vector<size_t> &pid, const Slots &s) {
  double lr = h[0], beta1 = h[1], beta2 = h[2], eps = h[3], wd = h[4];
  bool amsgrad = h[5] != 0, maximize = h[6] != 0, decoupled = h[7] != 0;
  List steps = ensure(params, pid, s, 0, new_step);
  List exp_avgs = ensure(params, pid, s, 1, zeros_like);
  List exp_avg_sqs = ensure(params, pid, s, 2, zeros_like);
  List max_sqs;
  if (amsgrad) max_sqs = ensure(params, pid, s, 3, zeros_like);

  List grads = maximize ? at::_foreach_neg(grads_in) : grads_in;
  std::vector<double> stepv = step_values(steps);
  if (wd != 0) {
    if (decoupled)
      at::_foreach_mul_(params, 1 - lr * wd);
    else
      grads = at::_foreach_add(grads, params, wd);
  }
  at::_foreach_lerp_(exp_avgs, grads, 1 - beta1);
  at::_foreach_mul_(exp_avg_sqs, beta2);
  at::_foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2);

  std::vector<double> step_size, bc2_sqrt;
  for (double st : stepv) {
    double bc1 = 1 - std::pow(beta1, st), bc2 = 1 - std::pow(beta2, st);
    step_size.push_back((lr / bc1) * -1);
    bc2_sqrt.push_back(std::pow(bc2, 0.5));
  }
  List denom;
  if (amsgrad) {
    at::_foreach_maximum_(max_sqs, exp_avg_sqs);
    denom = at::_foreach_sqrt(max_sqs);
  } else {
    denom = at::_foreach_sqrt(exp_avg_sqs);
  }
  at::_foreach_div_(denom, scalars(bc2_sqrt));
  at::_foreach_add_(denom, eps);
  at::_foreach_addcdiv_(params, exp_avgs, denom, scalars(step_size));
}

void rmsprop(const double *h, const List &params, const List &grads_in, const std::vector<size_t> &pid, const Slots &s) {
  double lr = h[0], alpha = h[1], eps = h[2], wd = h[3], momentum = h[4];
  bool centered = h[5] != 0, maximize = h[6] != 0;
  List steps = ensure(params, pid, s, 0, new_step);
  List square_avgs = ensure(params, pid, s, 1, zeros_like);
  List bufs, grad_avgs;
  if (momentum > 0) bufs = ensure(params, pid, s, 2, zeros_like);
  if (centered) grad_avgs = ensure(params, pid, s, 3, zeros_like);

  List grads = grads_for(params, grads_in, maximize, wd);
  at::_foreach_add_(steps, 1);
  at::_foreach_mul_(square_avgs, alpha);
  at::_foreach_addcmul_(square_avgs, grads, grads, 1 - alpha);
  List avg;
  if (centered) {
    at::_foreach_lerp_(grad_avgs, grads, 1 - alpha);
    avg = at::_foreach_addcmul(square_avgs, grad_avgs, grad_avgs, -1);
    at::_foreach_sqrt_(avg);
  } else {
    avg = at::_foreach_sqrt(square_avgs);
  }
  at::_foreach_add_(avg, eps);
  if (momentum > 0) {
    at::_foreach_mul_(bufs, momentum);
    at::_foreach_addcdiv_(bufs, grads, avg);
    at::_foreach_add_(params, bufs, -lr);
  } else {
    at::_foreach_addcdiv_(params, grads, avg, -lr);
  }
}

void adagrad(const double *h, const List &params, const List &grads_in, const std::vector<size_t> &pid, const Slots &s) {
  double lr = h[0], lr_decay = h[1], eps = h[2], wd = h[3], init = h[4];
  bool maximize = h[5] != 0;
  List steps = ensure(params, pid, s, 0, new_step);
  List sums = ensure(params, pid, s, 1,
                     [init](const at::Tensor &p) { return at::full_like(p, init, at::MemoryFormat::Preserve); });
  List grads = grads_for(params, grads_in, maximize, wd);
  std::vector<double> stepv = step_values(steps);
  std::vector<double> minus_clr;
  for (double st : stepv) minus_clr.push_back(-lr / (1 + (st - 1) * lr_decay));
  at::_foreach_addcmul_(sums, grads, grads, 1);
  List std_ = at::_foreach_sqrt(sums);
  at::_foreach_add_(std_, eps);
  // param.addcdiv_(grad, std, value=-clr): _single_tensor_adagrad's arithmetic, which is
  // what Python runs on CPU by default.
  at::_foreach_addcdiv_(params, grads, std_, scalars(minus_clr));
}

using Step = void (*)(const double *, const List &, const List &, const std::vector<size_t> &, const Slots &);

// run_groups steps every group with step.
cg_status run_groups(Step step, int ngroups, const int64_t *group_sizes, const double *hyper, cg_tensor *params,
                     const Slots &s) {
  size_t base = 0;
  List ps, gs;
  std::vector<size_t> pid;
  for (int g = 0; g < ngroups; g++) {
    ps.clear();
    gs.clear();
    pid.clear();
    for (int64_t j = 0; j < group_sizes[g]; j++) {
      at::Tensor &p = T(params[base + j]);
      const at::Tensor &gr = p.grad();
      if (!gr.defined()) continue;
      if (gr.is_sparse()) return cg::fail(CG_ERR_NOT_IMPLEMENTED, "optimizer step: sparse gradients are not supported");
      ps.push_back(p);
      gs.push_back(gr);
      pid.push_back(base + j);
    }
    base += group_sizes[g];
    if (ps.empty()) continue;
    if (uniform(ps)) {  // one bucket, the usual case: no index lists, no copies
      step(hyper + g * CG_OPT_NHYPER, ps, gs, pid, s);
      continue;
    }
    for (auto &b : buckets(ps)) {
      std::vector<size_t> bid;
      for (auto i : b) bid.push_back(pid[i]);
      step(hyper + g * CG_OPT_NHYPER, pick(ps, b), pick(gs, b), bid, s);
    }
  }
  return cg::ok();
}

// grads_of returns the defined gradients of params.
List grads_of(cg_tensor *params, int n) {
  List grads;
  for (int i = 0; i < n; i++)
    if (T(params[i]).grad().defined()) grads.push_back(T(params[i]).grad());
  return grads;
}

}  // namespace

extern "C" {

cg_status cg_optim_step(enum cg_optimizer kind, int ngroups, const int64_t *group_sizes, const double *hyper,
                        cg_tensor *params, cg_tensor *state) {
  CG_TRY at::NoGradGuard no_grad;
  // Recorded before it runs: the state slots it fills are empty in this step's record.
  if (cg::recording()) cg::record_optim_step(kind, ngroups, group_sizes, params, state);
  Slots s{state};
  switch (kind) {
    case CG_OPT_SGD: return run_groups(sgd, ngroups, group_sizes, hyper, params, s);
    case CG_OPT_ADAM: return run_groups(adam, ngroups, group_sizes, hyper, params, s);
    case CG_OPT_RMSPROP: return run_groups(rmsprop, ngroups, group_sizes, hyper, params, s);
    case CG_OPT_ADAGRAD: return run_groups(adagrad, ngroups, group_sizes, hyper, params, s);
  }
  return cg::fail(CG_ERR_INVALID, "optimizer step: unknown optimizer kind");
  CG_CATCH_STATUS
}

cg_status cg_zero_grad(cg_tensor *params, int n, int set_to_none) {
  CG_TRY at::NoGradGuard no_grad;
  List zero;
  for (int i = 0; i < n; i++) {
    at::Tensor &g = T(params[i]).mutable_grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      g.reset();
      continue;
    }
    if (g.grad_fn())
      g.detach_();
    else
      g.requires_grad_(false);
    zero.push_back(g);
  }
  for (auto &b : buckets(zero)) at::_foreach_zero_(pick(zero, b));
  if (cg::recording()) cg::record_zero_grad(params, n, set_to_none);
  return cg::ok();
  CG_CATCH_STATUS
}

}  // extern "C"

namespace {

// clip_norm is clip_grad_norm_: it scales the gradients and returns the total norm as a
// 0-dim tensor on the gradients' device (undefined when no parameter has a gradient).
// With error_if_nonfinite a non-finite norm throws before anything is scaled.
at::Tensor clip_norm(cg_tensor *params, int n, double max_norm, double norm_type, bool error_if_nonfinite) {
  at::NoGradGuard no_grad;
  List grads = grads_of(params, n);
  if (grads.empty()) return at::Tensor();
  auto bs = buckets(grads);
  List norms;
  for (auto &b : bs)
    for (auto &nm : at::_foreach_norm(pick(grads, b), norm_type)) norms.push_back(nm.to(grads[0].device()));
  at::Tensor total = at::linalg_vector_norm(at::stack(norms), norm_type);
  if (error_if_nonfinite && at::logical_or(total.isnan(), total.isinf()).item<bool>()) {
    std::ostringstream m;
    m << "The total norm of order " << norm_type
      << " for gradients from `parameters` is non-finite, so it cannot be clipped. To disable this error and scale "
         "the gradients by the non-finite norm anyway, set `error_if_nonfinite=False`";
    throw std::invalid_argument(m.str());
  }
  // Python computes max_norm / (total + 1e-6) as Tensor.__rtruediv__: reciprocal, then multiply.
  at::Tensor coef = at::clamp(at::reciprocal(total + 1e-6) * max_norm, std::nullopt, 1.0);
  for (auto &b : bs) at::_foreach_mul_(pick(grads, b), coef.to(grads[b[0]].device()));
  return total;
}

}  // namespace

extern "C" {

cg_status cg_clip_grad_norm(cg_tensor *params, int n, double max_norm, double norm_type, int error_if_nonfinite,
                            double *total_norm) {
  *total_norm = 0;
  CG_TRY if (cg::recording()) cg::refuse("clip_grad_norm_ reads the norm on the host");
  at::Tensor total = clip_norm(params, n, max_norm, norm_type, error_if_nonfinite != 0);
  if (total.defined()) *total_norm = total.item<double>();
  return cg::ok();
  CG_CATCH_STATUS
}

cg_result cg_clip_grad_norm_tensor(cg_tensor *params, int n, double max_norm, double norm_type) {
  CG_TRY at::Tensor total = clip_norm(params, n, max_norm, norm_type, false);
  if (!total.defined()) total = at::zeros({}, at::TensorOptions().dtype(at::kFloat));
  cg_result r = cg::res(total);
  if (cg::recording()) cg::record_clip_norm(params, n, max_norm, norm_type, r.t);
  return r;
  CG_CATCH_RESULT
}

cg_status cg_clip_grad_value(cg_tensor *params, int n, double clip_value) {
  CG_TRY at::NoGradGuard no_grad;
  List grads = grads_of(params, n);
  for (auto &b : buckets(grads)) {
    List l = pick(grads, b);
    at::_foreach_clamp_min_(l, -clip_value);
    at::_foreach_clamp_max_(l, clip_value);
  }
  if (cg::recording()) cg::record_clip_value(params, n, clip_value);
  return cg::ok();
  CG_CATCH_STATUS
}

}  // extern "C"
