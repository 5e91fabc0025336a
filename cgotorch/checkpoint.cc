// checkpoint.cc: activation checkpointing over a Go function (checkpoint.h says why this
// form).
#include <ATen/autocast_mode.h>
#include <ATen/core/grad_mode.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <mutex>
#include <utility>
#include <vector>
#include "checkpoint.h"
#include "internal.h"

// cgotorchCheckpointRun is the Go side (checkpoint.go): it runs Go function fn over the
// n input handles and appends its outputs to sink through cg_checkpoint_collect. A
// failure returns its code and a malloc'd message in *msg.
extern "C" int32_t cgotorchCheckpointRun(uintptr_t fn, cg_tensor *inputs, int n, uintptr_t sink, cg_msg *msg);

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// released holds the ids of Go functions no node needs any more. It is never destroyed:
// nodes can die during exit, after static destructors would have run.
std::mutex released_mu;
std::vector<uintptr_t> *released = new std::vector<uintptr_t>;

// Autocast is a thread's autocast state, as torch.utils.checkpoint records it for the
// recomputation (device_autocast_kwargs and cpu_autocast_kwargs).
struct Autocast {
  bool cpu = false, cuda = false, cache = true;
  at::ScalarType cpu_dtype = at::kBFloat16, cuda_dtype = at::kHalf;

  static Autocast now() {
    Autocast a;
    a.cpu = at::autocast::is_autocast_enabled(at::kCPU);
    a.cuda = at::autocast::is_autocast_enabled(at::kCUDA);
    a.cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
    a.cuda_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
    a.cache = at::autocast::is_autocast_cache_enabled();
    return a;
  }
  void apply() const {
    at::autocast::set_autocast_enabled(at::kCPU, cpu);
    at::autocast::set_autocast_enabled(at::kCUDA, cuda);
    at::autocast::set_autocast_dtype(at::kCPU, cpu_dtype);
    at::autocast::set_autocast_dtype(at::kCUDA, cuda_dtype);
    at::autocast::set_autocast_cache_enabled(cache);
  }
};

// AutocastAs enters the recorded autocast state for its lifetime, as the `with
// torch.autocast(...)` blocks of the recomputation do: a region that is on counts in the
// nesting, and the weight-cast cache is cleared when the outermost region ends.
class AutocastAs {
 public:
  explicit AutocastAs(const Autocast &want) : prev_(Autocast::now()), nested_(want.cpu || want.cuda) {
    want.apply();
    if (nested_) at::autocast::increment_nesting();
  }
  ~AutocastAs() {
    if (nested_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    prev_.apply();
  }
  AutocastAs(const AutocastAs &) = delete;
  AutocastAs &operator=(const AutocastAs &) = delete;

 private:
  Autocast prev_;
  bool nested_;
};

at::Generator generator(c10::Device d) {
  if (d.is_cuda()) return at::detail::getCUDAHooks().getDefaultGenerator(d.index());
  return at::detail::getDefaultCPUGenerator();
}

at::Tensor get_state(at::Generator g) {
  std::lock_guard<std::mutex> lock(g.mutex());
  return g.get_state();
}

void set_state(at::Generator g, const at::Tensor &s) {
  std::lock_guard<std::mutex> lock(g.mutex());
  g.set_state(s);
}

// RNG is the state of the generators the function may draw from: the CPU's and those of
// the CUDA devices of its inputs (torch.utils.checkpoint's preserve_rng_state).
struct RNG {
  std::vector<std::pair<c10::Device, at::Tensor>> states;

  static RNG of(at::TensorList inputs) {
    RNG r;
    r.states.emplace_back(c10::Device(at::kCPU), get_state(generator(c10::Device(at::kCPU))));
    for (const at::Tensor &t : inputs) {
      if (!t.defined() || !t.is_cuda()) continue;
      bool seen = false;
      for (auto &s : r.states) seen = seen || s.first == t.device();
      if (!seen) r.states.emplace_back(t.device(), get_state(generator(t.device())));
    }
    return r;
  }
  void apply() const {
    for (auto &s : states) set_state(generator(s.first), s.second);
  }
};

// ForkRNG sets the recorded generator states for its lifetime and then puts back the
// ones it found (torch.random.fork_rng), so the recomputation draws the forward's random
// numbers (the same dropout masks) without disturbing the draws that follow.
class ForkRNG {
 public:
  explicit ForkRNG(const RNG &want) {
    prev_.states.reserve(want.states.size());
    for (auto &s : want.states) prev_.states.emplace_back(s.first, get_state(generator(s.first)));
    want.apply();
  }
  ~ForkRNG() {
    try {
      prev_.apply();
    } catch (...) {
    }
  }
  ForkRNG(const ForkRNG &) = delete;
  ForkRNG &operator=(const ForkRNG &) = delete;

 private:
  RNG prev_;
};

// State is what a checkpoint node keeps besides its saved tensors. Its destructor hands
// the Go function's id back (cg_checkpoint_released).
struct State : torch::CustomClassHolder {
  uintptr_t fn;
  size_t n_inputs = 0;
  Autocast autocast;
  RNG rng;

  explicit State(uintptr_t f) : fn(f) {}
  ~State() override {
    std::lock_guard<std::mutex> lock(released_mu);
    released->push_back(fn);
  }
};

// run_go runs the Go function over in and returns its outputs.
std::vector<at::Tensor> run_go(uintptr_t fn, const std::vector<at::Tensor> &in) {
  std::vector<cg_tensor> hs;
  hs.reserve(in.size());
  struct Unbox {
    std::vector<cg_tensor> &hs;
    ~Unbox() {
      for (cg_tensor h : hs) cg::unbox(cg::ptr(h));
    }
  } unbox{hs};
  for (const at::Tensor &t : in) hs.push_back(cg::owned(t));
  std::vector<at::Tensor> out;
  cg_msg msg = 0;
  int32_t code = cgotorchCheckpointRun(fn, hs.data(), static_cast<int>(hs.size()), reinterpret_cast<uintptr_t>(&out), &msg);
  if (code == CG_OK) return out;
  std::string m = msg != 0 ? reinterpret_cast<const char *>(msg) : "the checkpointed function failed";
  std::free(reinterpret_cast<void *>(msg));
  if (code == CG_ERR_OOM) TORCH_CHECK_WITH(OutOfMemoryError, false, m);
  if (code == CG_ERR_NOT_IMPLEMENTED) TORCH_CHECK_NOT_IMPLEMENTED(false, m);
  TORCH_CHECK(false, m);
}

struct Checkpoint : torch::autograd::Function<Checkpoint> {
  // forward runs with grad mode off (Function::apply sees to it): no activation of the
  // function is kept, only its inputs and the parameters, saved for the recomputation.
  static variable_list forward(AutogradContext *ctx, const c10::intrusive_ptr<State> &st, at::TensorList inputs,
                               at::TensorList params) {
    st->n_inputs = inputs.size();
    st->autocast = Autocast::now();
    st->rng = RNG::of(inputs);
    std::vector<at::Tensor> out = run_go(st->fn, std::vector<at::Tensor>(inputs.begin(), inputs.end()));
    std::vector<at::Tensor> saved(inputs.begin(), inputs.end());
    saved.insert(saved.end(), params.begin(), params.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["state"] = c10::IValue::make_capsule(st);
    std::vector<at::Tensor> nondiff;
    for (const at::Tensor &t : out)
      if (t.defined() && !at::isFloatingType(t.scalar_type()) && !at::isComplexType(t.scalar_type())) nondiff.push_back(t);
    if (!nondiff.empty()) ctx->mark_non_differentiable(nondiff);
    return out;
  }

  // backward reruns the function with gradients on over detached copies of the inputs
  // (the same RNG and autocast state as the forward) and backpropagates grads through
  // that graph to the inputs and parameters; the recomputed activations are freed when
  // it returns.
  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    auto st = c10::static_intrusive_pointer_cast<State>(ctx->saved_data["state"].toCapsule());
    variable_list saved = ctx->get_saved_variables();
    const size_t n = st->n_inputs;
    const bool create_graph = at::GradMode::is_enabled();
    std::vector<at::Tensor> in(n);
    for (size_t i = 0; i < n; i++) {
      if (!saved[i].defined()) continue;
      in[i] = saved[i].detach();
      in[i].requires_grad_(saved[i].requires_grad());
    }
    std::vector<at::Tensor> out;
    {
      ForkRNG rng(st->rng);
      AutocastAs autocast(st->autocast);
      at::AutoGradMode grad_on(true);
      out = run_go(st->fn, in);
    }
    TORCH_CHECK(out.size() == grads.size(), "checkpoint: the function returned ", out.size(),
                " outputs when recomputed in backward, ", grads.size(), " in the forward pass");
    variable_list outs, grad_outs;
    for (size_t i = 0; i < out.size(); i++) {
      if (out[i].defined() && out[i].requires_grad() && grads[i].defined()) {
        outs.push_back(out[i]);
        grad_outs.push_back(grads[i]);
      }
    }
    variable_list wrt;
    std::vector<size_t> where;
    for (size_t i = 0; i < saved.size(); i++) {
      const at::Tensor &t = i < n ? in[i] : saved[i];
      if (t.defined() && t.requires_grad()) {
        wrt.push_back(t);
        where.push_back(i);
      }
    }
    // One result per argument of forward: the state first (no gradient), then the
    // inputs and the parameters.
    variable_list result(1 + saved.size());
    if (outs.empty() || wrt.empty()) return result;
    variable_list g = torch::autograd::grad(outs, wrt, grad_outs, /*retain_graph=*/create_graph, create_graph,
                                            /*allow_unused=*/true);
    for (size_t k = 0; k < where.size(); k++) result[1 + where[k]] = g[k];
    return result;
  }
};

}  // namespace

extern "C" {

cg_results cg_checkpoint(uintptr_t fn, cg_tensor *inputs, int n, cg_tensor *params, int np) {
  // Its backward calls back into Go to recompute, which a replay cannot do.
  if (cg::recording()) cg::refuse("activation checkpointing recomputes in Go");
  c10::intrusive_ptr<State> st;
  try {
    st = c10::make_intrusive<State>(fn);
  } catch (...) {
    std::lock_guard<std::mutex> lock(released_mu);
    released->push_back(fn);
    return cg::resn(cg::classify());
  }
  try {
    cg::sync_num_threads();
    std::vector<at::Tensor> in, ps;
    in.reserve(n);
    ps.reserve(np);
    for (int i = 0; i < n; i++) in.push_back(cg::T(inputs[i]));
    for (int i = 0; i < np; i++) ps.push_back(cg::T(params[i]));
    variable_list out = Checkpoint::apply(st, at::TensorList(in), at::TensorList(ps));
    return cg::resn(out);
  } catch (...) {
    return cg::resn(cg::classify());
  }
}

cg_status cg_checkpoint_collect(uintptr_t sink, cg_tensor *ts, int n) {
  CG_TRY auto *out = reinterpret_cast<std::vector<at::Tensor> *>(sink);
  for (int i = 0; i < n; i++) out->push_back(ts[i] != 0 ? cg::T(ts[i]) : at::Tensor());
  return cg::ok();
  CG_CATCH_STATUS
}

int cg_checkpoint_released(uintptr_t *out, int cap) {
  std::lock_guard<std::mutex> lock(released_mu);
  int k = 0;
  while (k < cap && !released->empty()) {
    out[k++] = released->back();
    released->pop_back();
  }
  return k;
}

}  // extern "C"
