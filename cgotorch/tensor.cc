// tensor.cc: tensor lifetime, creation, conversion, element-wise and shape ops, autograd.
#include <ATen/Config.h>
#include <ATen/Parallel.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/version.h>
#include <malloc.h>
#include <cmath>
#include <limits>
#include <sstream>
#include "internal.h"

using cg::T;
using cg::res;

namespace cg {
std::atomic<uint64_t> threads_epoch{0};
constinit thread_local uint64_t threads_seen = 0;
}  // namespace cg

// A training step frees all of its intermediates when its scope closes. glibc then returns
// the large blocks to the kernel and faults them back in on the next step (hundreds of
// page faults a step for a small MLP). Higher mmap and trim thresholds keep them in the
// heap, as a long-running trainer wants; a user's own MALLOC_* settings win.
static const bool malloc_tuned = [] {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_") || std::getenv("GLIBC_TUNABLES")) return false;
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  return true;
}();

extern "C" {

void cg_free_msg(cg_msg msg) { std::free(reinterpret_cast<void *>(msg)); }

#define CG_STR2(x) #x
#define CG_STR(x) CG_STR2(x)
const char *cg_torch_version(void) {
  return CG_STR(TORCH_VERSION_MAJOR) "." CG_STR(TORCH_VERSION_MINOR) "." CG_STR(TORCH_VERSION_PATCH);
}

cg_status cg_set_num_threads(int n) {
  CG_TRY at::set_num_threads(n);
  cg::threads_seen = cg::threads_epoch.fetch_add(1, std::memory_order_acq_rel) + 1;
  return cg::ok();
  CG_CATCH_STATUS
}
int cg_get_num_threads(void) {
  try {
    cg::sync_num_threads();
  } catch (...) {
  }
  return at::get_num_threads();
}

cg_status cg_manual_seed(uint64_t seed) {
  CG_TRY if (cg::recording()) cg::refuse("manual_seed changes the generator outside the trace");
  // at::manual_seed seeds the CPU generator and, when CUDA is present, every CUDA generator.
  at::manual_seed(seed);
  return cg::ok();
  CG_CATCH_STATUS
}

cg_status cg_set_deterministic(int on) {
  CG_TRY auto &ctx = at::globalContext();
  ctx.setDeterministicAlgorithms(on != 0, /*warn_only=*/false);
  ctx.setDeterministicCuDNN(on != 0);
  ctx.setBenchmarkCuDNN(false);
  return cg::ok();
  CG_CATCH_STATUS
}

static at::Generator default_generator(int dt, int di) {
  if (dt == 1) return at::detail::getCUDAHooks().getDefaultGenerator(static_cast<c10::DeviceIndex>(di));
  return at::detail::getDefaultCPUGenerator();
}

cg_result cg_get_rng_state(int dt, int di) {
  CG_TRY auto gen = default_generator(dt, di);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return res(gen.get_state());
  CG_CATCH_RESULT
}

cg_status cg_set_rng_state(int dt, int di, cg_tensor state) {
  CG_TRY if (cg::recording()) cg::refuse("set_rng_state changes the generator outside the trace");
  auto gen = default_generator(dt, di);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(T(state));
  return cg::ok();
  CG_CATCH_STATUS
}

cg_status cg_show_config(char **out) {
  CG_TRY *out = cg::dup(at::show_config());
  return cg::ok();
  CG_CATCH_STATUS
}

int cg_cuda_kernels_registered(void) {
  try {
    auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::add", "Tensor");
    return op.hasKernelForDispatchKey(c10::DispatchKey::CUDA) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

// ---- lifetime and metadata ----
void cg_tensor_free(cg_tensor t) { cg::unbox(cg::ptr(t)); }
cg_result cg_tensor_shallow_clone(cg_tensor t) {
  CG_TRY return res(T(t));
  CG_CATCH_RESULT
}
int cg_tensor_dim(cg_tensor t) { return static_cast<int>(T(t).dim()); }
void cg_tensor_sizes(cg_tensor t, int64_t *out) {
  auto s = T(t).sizes();
  std::copy(s.begin(), s.end(), out);
}
void cg_tensor_strides(cg_tensor t, int64_t *out) {
  auto s = T(t).strides();
  std::copy(s.begin(), s.end(), out);
}
int64_t cg_tensor_numel(cg_tensor t) { return T(t).numel(); }
int cg_tensor_dtype(cg_tensor t) { return static_cast<int>(T(t).scalar_type()); }
void cg_tensor_device(cg_tensor t, int *type, int *index) {
  auto d = T(t).device();
  *type = d.is_cuda() ? 1 : 0;
  *index = d.has_index() ? d.index() : -1;
}
int cg_tensor_requires_grad(cg_tensor t) { return T(t).requires_grad() ? 1 : 0; }
int cg_tensor_is_contiguous(cg_tensor t) { return T(t).is_contiguous() ? 1 : 0; }
void *cg_tensor_data_ptr(cg_tensor t) {
  if (cg::recording()) cg::refuse("data_ptr gives the host a tensor's memory");
  const at::Tensor &x = T(t);
  return cg::freed(x) ? nullptr : x.data_ptr();
}
int64_t cg_tensor_storage_offset(cg_tensor t) { return T(t).storage_offset(); }

// ---- creation ----
cg_result cg_from_blob(const void *data, const int64_t *shape, int ndim, int dtype, int pinned) {
  CG_TRY auto opts = at::TensorOptions().dtype(static_cast<at::ScalarType>(dtype));
  at::IntArrayRef sizes(shape, ndim);
  at::Tensor out = at::empty(sizes, opts.pinned_memory(pinned != 0));
  if (out.numel() > 0) std::memcpy(out.data_ptr(), data, out.numel() * out.element_size());
  return res(std::move(out));
  CG_CATCH_RESULT
}

cg_result cg_from_blob_strided(const void *data, const int64_t *shape, const int64_t *strides, int ndim, int dtype) {
  CG_TRY auto opts = at::TensorOptions().dtype(static_cast<at::ScalarType>(dtype));
  return res(at::from_blob(const_cast<void *>(data), at::IntArrayRef(shape, ndim), at::IntArrayRef(strides, ndim), opts).clone());
  CG_CATCH_RESULT
}

// cg_randperm_seeded is torch.randperm(n, generator=g) with g.manual_seed(seed): the
// permutation PyTorch's DistributedSampler draws for (seed + epoch).
cg_status cg_randperm_seeded(int64_t n, uint64_t seed, int64_t *out) {
  CG_TRY auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor p = at::randperm(n, gen, at::TensorOptions().dtype(at::kLong));
  std::memcpy(out, p.data_ptr<int64_t>(), n * sizeof(int64_t));
  return cg::ok();
  CG_CATCH_STATUS
}

cg_status cg_copy_to_host(cg_tensor t, void *dst, int64_t nbytes) {
  CG_TRY if (cg::recording()) cg::refuse("a copy to the host reads values on the host");
  at::Tensor c = cg::A(t).detach().to(at::kCPU).contiguous();
  int64_t need = c.numel() * c.element_size();
  if (need != nbytes) return cg::fail(CG_ERR_INVALID, "copy_to_host: buffer is " + std::to_string(nbytes) + " bytes, tensor needs " + std::to_string(need));
  if (need > 0) std::memcpy(dst, c.data_ptr(), need);
  return cg::ok();
  CG_CATCH_STATUS
}

cg_status cg_item(cg_tensor t, double *d, int64_t *i) {
  CG_TRY if (cg::recording()) cg::refuse("item reads a value on the host");
  at::Scalar s = cg::A(t).item();
  if (s.isIntegral(true)) {
    *i = s.toLong();
    *d = static_cast<double>(*i);
  } else {
    *d = s.toDouble();
    *i = static_cast<int64_t>(*d);
  }
  return cg::ok();
  CG_CATCH_STATUS
}

// ---- autograd ----
cg_status cg_set_requires_grad(cg_tensor t, int on) {
  CG_TRY if (cg::recording()) cg::refuse("set_requires_grad changes autograd state outside the trace");
  T(t).set_requires_grad(on != 0);
  return cg::ok();
  CG_CATCH_STATUS
}

cg_status cg_backward(cg_tensor t, cg_tensor grad, int retain_graph) {
  CG_TRY T(t).backward(cg::undefined_or(grad), retain_graph ? std::optional<bool>(true) : std::nullopt);
  if (cg::recording()) cg::record_backward(t, grad, retain_graph);
  return cg::ok();
  CG_CATCH_STATUS
}

cg_result cg_grad(cg_tensor t) {
  CG_TRY const at::Tensor &g = T(t).grad();
  cg_result r = g.defined() ? res(g) : cg_result{CG_OK, 0, 0, 0};
  if (cg::recording()) cg::record_grad(t, r.t);
  return r;
  CG_CATCH_RESULT
}

cg_status cg_set_grad(cg_tensor t, cg_tensor grad) {
  CG_TRY if (cg::recording()) cg::refuse("set_grad changes a gradient outside the trace");
  T(t).mutable_grad() = cg::undefined_or(grad);
  return cg::ok();
  CG_CATCH_STATUS
}

int cg_grad_enabled(void) { return at::GradMode::is_enabled() ? 1 : 0; }
void cg_set_grad_enabled(int on) {
  at::GradMode::set_enabled(on != 0);
  if (cg::recording()) {
    try {
      cg::record_grad_mode(on);
    } catch (...) {
      cg::refuse("set_grad_enabled: recording failed");
    }
  }
}

}  // extern "C"

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
