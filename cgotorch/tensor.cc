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
#include <sys/syscall.h>
#include <unistd.h>
#include <cmath>
#include <limits>
#include <sstream>
#include "internal.h"

using cg::T;
using cg::opt;
using cg::res;

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

void cg_free_msg(char *msg) { std::free(msg); }

#define CG_STR2(x) #x
#define CG_STR(x) CG_STR2(x)
const char *cg_torch_version(void) {
  return CG_STR(TORCH_VERSION_MAJOR) "." CG_STR(TORCH_VERSION_MINOR) "." CG_STR(TORCH_VERSION_PATCH);
}
int cg_torch_version_num(void) { return TORCH_VERSION_MAJOR * 10000 + TORCH_VERSION_MINOR * 100 + TORCH_VERSION_PATCH; }

cg_status cg_set_num_threads(int n) {
  CG_TRY at::set_num_threads(n);
  return cg::ok();
  CG_CATCH_STATUS
}
int cg_get_num_threads(void) { return at::get_num_threads(); }
int64_t cg_thread_id(void) {
  static thread_local int64_t tid = static_cast<int64_t>(syscall(SYS_gettid));
  return tid;
}

cg_status cg_manual_seed(uint64_t seed) {
  CG_TRY
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
  CG_TRY auto gen = default_generator(dt, di);
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
void cg_tensor_free(cg_tensor t) { delete static_cast<at::Tensor *>(t); }
cg_tensor cg_tensor_shallow_clone(cg_tensor t) { return new at::Tensor(T(t)); }
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
int cg_tensor_defined(cg_tensor t) { return T(t).defined() ? 1 : 0; }
void *cg_tensor_data_ptr(cg_tensor t) { return T(t).data_ptr(); }
int64_t cg_tensor_storage_offset(cg_tensor t) { return T(t).storage_offset(); }
int64_t cg_tensor_element_size(cg_tensor t) { return T(t).element_size(); }

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

cg_result cg_fill(int kind, const int64_t *shape, int ndim, int dtype, int dt, int di) {
  CG_TRY auto o = cg::options(dtype, dt, di);
  at::IntArrayRef s(shape, ndim);
  switch (kind) {
    case CG_FILL_EMPTY: return res(at::empty(s, o));
    case CG_FILL_ZEROS: return res(at::zeros(s, o));
    case CG_FILL_ONES: return res(at::ones(s, o));
    case CG_FILL_RAND: return res(at::rand(s, o));
    case CG_FILL_RANDN: return res(at::randn(s, o));
  }
  return res(cg::fail(CG_ERR_INVALID, "unknown fill kind"));
  CG_CATCH_RESULT
}

cg_result cg_full(const int64_t *shape, int ndim, double v, int dtype, int dt, int di) {
  CG_TRY return res(at::full(at::IntArrayRef(shape, ndim), cg::scalar(v), cg::options(dtype, dt, di)));
  CG_CATCH_RESULT
}

cg_result cg_arange(double start, double end, double step, int dtype, int dt, int di) {
  CG_TRY return res(at::arange(cg::scalar(start), cg::scalar(end), cg::scalar(step), cg::options(dtype, dt, di)));
  CG_CATCH_RESULT
}

cg_result cg_randint(int64_t low, int64_t high, const int64_t *shape, int ndim, int dtype, int dt, int di) {
  CG_TRY return res(at::randint(low, high, at::IntArrayRef(shape, ndim), cg::options(dtype, dt, di)));
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
  CG_TRY at::Tensor c = T(t).detach().to(at::kCPU).contiguous();
  int64_t need = c.numel() * c.element_size();
  if (need != nbytes) return cg::fail(CG_ERR_INVALID, "copy_to_host: buffer is " + std::to_string(nbytes) + " bytes, tensor needs " + std::to_string(need));
  if (need > 0) std::memcpy(dst, c.data_ptr(), need);
  return cg::ok();
  CG_CATCH_STATUS
}

cg_status cg_item(cg_tensor t, double *d, int64_t *i) {
  CG_TRY at::Scalar s = T(t).item();
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

cg_status cg_copy_(cg_tensor dst, cg_tensor src, int non_blocking) {
  CG_TRY at::NoGradGuard g;
  T(dst).copy_(T(src), non_blocking != 0);
  return cg::ok();
  CG_CATCH_STATUS
}

cg_result cg_to(cg_tensor t, int dt, int di, int dtype, int non_blocking, int copy) {
  CG_TRY auto st = dtype < 0 ? T(t).scalar_type() : static_cast<at::ScalarType>(dtype);
  auto dev = dt < 0 ? T(t).device() : cg::device(dt, di);
  return res(T(t).to(dev, st, non_blocking != 0, copy != 0));
  CG_CATCH_RESULT
}

// ---- op families; the numbering is mirrored in ops.go ----
cg_result cg_unary(int op, cg_tensor ah) {
  CG_TRY const at::Tensor &a = T(ah);
  switch (op) {
    case 0: return res(at::neg(a));
    case 1: return res(at::exp(a));
    case 2: return res(at::log(a));
    case 3: return res(at::sqrt(a));
    case 4: return res(at::abs(a));
    case 5: return res(at::relu(a));
    case 6: return res(at::sigmoid(a));
    case 7: return res(at::tanh(a));
    case 8: return res(at::silu(a));
    case 9: return res(a.contiguous());
    case 10: return res(a.detach());
    case 11: return res(at::sign(a));
    case 12: return res(at::floor(a));
    case 13: return res(at::ceil(a));
    case 14: return res(at::round(a));
    case 15: return res(at::sin(a));
    case 16: return res(at::cos(a));
    case 17: return res(at::log1p(a));
    case 18: return res(at::rsqrt(a));
    case 19: return res(at::square(a));
    case 20: return res(a.clone());
    case 21: return res(at::isnan(a));
    case 22: return res(at::isinf(a));
    case 23: return res(at::logical_not(a));
    case 24: return res(at::reciprocal(a));
    case 25: return res(a.squeeze());
    case 26: return res(at::isfinite(a));
    case 27: return res(at::zeros_like(a));
    case 28: return res(at::ones_like(a));
    case 29: return res(a.t());
  }
  return res(cg::fail(CG_ERR_INVALID, "unknown unary op " + std::to_string(op)));
  CG_CATCH_RESULT
}

cg_result cg_binary(int op, cg_tensor ah, cg_tensor bh) {
  CG_TRY const at::Tensor &a = T(ah);
  const at::Tensor &b = T(bh);
  switch (op) {
    case 0: return res(at::add(a, b));
    case 1: return res(at::sub(a, b));
    case 2: return res(at::mul(a, b));
    case 3: return res(at::div(a, b));
    case 4: return res(at::pow(a, b));
    case 5: return res(at::eq(a, b));
    case 6: return res(at::ne(a, b));
    case 7: return res(at::lt(a, b));
    case 8: return res(at::le(a, b));
    case 9: return res(at::gt(a, b));
    case 10: return res(at::ge(a, b));
    case 11: return res(at::maximum(a, b));
    case 12: return res(at::minimum(a, b));
    case 13: return res(at::matmul(a, b));
    case 14: return res(at::bmm(a, b));
    case 15: return res(at::mm(a, b));
    case 16: return res(at::logical_and(a, b));
    case 17: return res(at::logical_or(a, b));
    case 18: return res(at::remainder(a, b));
  }
  return res(cg::fail(CG_ERR_INVALID, "unknown binary op " + std::to_string(op)));
  CG_CATCH_RESULT
}

cg_result cg_scalar(int op, cg_tensor ah, double sv) {
  CG_TRY const at::Tensor &a = T(ah);
  at::Scalar s = cg::scalar(sv);
  switch (op) {
    case 0: return res(at::add(a, s));
    case 1: return res(at::sub(a, s));
    case 2: return res(at::mul(a, s));
    case 3: return res(at::div(a, s));
    case 4: return res(at::pow(a, s));
    case 5: return res(at::eq(a, s));
    case 6: return res(at::ne(a, s));
    case 7: return res(at::lt(a, s));
    case 8: return res(at::le(a, s));
    case 9: return res(at::gt(a, s));
    case 10: return res(at::ge(a, s));
    case 11: return res(at::rsub(a, s));
    case 12: return res(at::remainder(a, s));
    case 13: return res(at::full_like(a, s));
  }
  return res(cg::fail(CG_ERR_INVALID, "unknown scalar op " + std::to_string(op)));
  CG_CATCH_RESULT
}

cg_status cg_inplace_scalar(int op, cg_tensor ah, double sv) {
  CG_TRY at::Tensor &a = T(ah);
  at::Scalar s = cg::scalar(sv);
  switch (op) {
    case 0: a.add_(s); break;
    case 1: a.mul_(s); break;
    case 2: a.fill_(s); break;
    case 3: a.zero_(); break;
    case 4: a.div_(s); break;
    case 5: a.sub_(s); break;
    default: return cg::fail(CG_ERR_INVALID, "unknown in-place scalar op " + std::to_string(op));
  }
  return cg::ok();
  CG_CATCH_STATUS
}

cg_status cg_inplace_binary(int op, cg_tensor ah, cg_tensor bh, double alpha) {
  CG_TRY at::Tensor &a = T(ah);
  const at::Tensor &b = T(bh);
  switch (op) {
    case 0: a.add_(b, cg::scalar(alpha)); break;
    case 1: a.copy_(b); break;
    case 2: a.mul_(b); break;
    case 3: a.sub_(b, cg::scalar(alpha)); break;
    default: return cg::fail(CG_ERR_INVALID, "unknown in-place op " + std::to_string(op));
  }
  return cg::ok();
  CG_CATCH_STATUS
}

cg_result cg_reduce(int op, cg_tensor ah, const int64_t *dims, int nd, int keepdim) {
  CG_TRY const at::Tensor &a = T(ah);
  at::IntArrayRef d(dims, nd);
  bool all = nd == 0, k = keepdim != 0;
  switch (op) {
    case 0: return res(all ? at::sum(a) : at::sum(a, d, k));
    case 1: return res(all ? at::mean(a) : at::mean(a, d, k));
    case 2: return res(at::amax(a, d, k));
    case 3: return res(at::amin(a, d, k));
    case 4: return res(all ? at::prod(a) : at::prod(a, d[0], k));
    case 5: return res(all ? at::std(a) : at::std(a, d, /*unbiased=*/true, k));
    case 6: return res(all ? at::var(a) : at::var(a, d, /*unbiased=*/true, k));
    case 7: return res(at::logsumexp(a, d, k));
    case 8: return res(all ? at::all(a) : at::all(a, d[0], k));
    case 9: return res(all ? at::any(a) : at::any(a, d[0], k));
  }
  return res(cg::fail(CG_ERR_INVALID, "unknown reduction " + std::to_string(op)));
  CG_CATCH_RESULT
}

cg_result cg_dim(int op, cg_tensor ah, int64_t dim, int keepdim) {
  CG_TRY const at::Tensor &a = T(ah);
  bool none = dim == std::numeric_limits<int64_t>::min();
  switch (op) {
    case 0: return res(at::softmax(a, dim));
    case 1: return res(at::log_softmax(a, dim));
    case 2: return res(none ? at::argmax(a) : at::argmax(a, dim, keepdim != 0));
    case 3: return res(none ? at::argmin(a) : at::argmin(a, dim, keepdim != 0));
    case 4: return res(a.unsqueeze(dim));
    case 5: return res(a.squeeze(dim));
    case 6: return res(at::cumsum(a, dim));
  }
  return res(cg::fail(CG_ERR_INVALID, "unknown dim op " + std::to_string(op)));
  CG_CATCH_RESULT
}

cg_result cg_shape(int op, cg_tensor ah, const int64_t *shape, int n) {
  CG_TRY const at::Tensor &a = T(ah);
  at::IntArrayRef s(shape, n);
  switch (op) {
    case 0: return res(a.view(s));
    case 1: return res(a.reshape(s));
    case 2: return res(a.permute(s));
    case 3: return res(a.expand(s));
    case 4: return res(a.repeat(s));
    case 5: return res(a.flip(s));
  }
  return res(cg::fail(CG_ERR_INVALID, "unknown shape op " + std::to_string(op)));
  CG_CATCH_RESULT
}

cg_result cg_dim2(int op, cg_tensor ah, int64_t d0, int64_t d1) {
  CG_TRY const at::Tensor &a = T(ah);
  switch (op) {
    case 0: return res(a.transpose(d0, d1));
  }
  return res(cg::fail(CG_ERR_INVALID, "unknown op " + std::to_string(op)));
  CG_CATCH_RESULT
}

cg_status cg_min_max_dim(int is_max, cg_tensor ah, int64_t dim, int keepdim, cg_tensor *values, cg_tensor *indices) {
  CG_TRY auto r = is_max ? at::max(T(ah), dim, keepdim != 0) : at::min(T(ah), dim, keepdim != 0);
  *values = new at::Tensor(std::get<0>(r));
  *indices = new at::Tensor(std::get<1>(r));
  return cg::ok();
  CG_CATCH_STATUS
}

cg_status cg_topk(cg_tensor ah, int64_t k, int64_t dim, int largest, int sorted, cg_tensor *values, cg_tensor *indices) {
  CG_TRY auto r = at::topk(T(ah), k, dim, largest != 0, sorted != 0);
  *values = new at::Tensor(std::get<0>(r));
  *indices = new at::Tensor(std::get<1>(r));
  return cg::ok();
  CG_CATCH_STATUS
}

cg_result cg_cat(cg_tensor *ts, int n, int64_t dim, int stack) {
  CG_TRY std::vector<at::Tensor> v;
  v.reserve(n);
  for (int i = 0; i < n; i++) v.push_back(T(ts[i]));
  return res(stack ? at::stack(v, dim) : at::cat(v, dim));
  CG_CATCH_RESULT
}

cg_result cg_narrow(cg_tensor a, int64_t dim, int64_t start, int64_t length) {
  CG_TRY return res(T(a).narrow(dim, start, length));
  CG_CATCH_RESULT
}
cg_result cg_slice(cg_tensor a, int64_t dim, int64_t start, int64_t end, int64_t step) {
  CG_TRY return res(T(a).slice(dim, start, end, step));
  CG_CATCH_RESULT
}
cg_result cg_select(cg_tensor a, int64_t dim, int64_t index) {
  CG_TRY return res(T(a).select(dim, index));
  CG_CATCH_RESULT
}
cg_result cg_index_select(cg_tensor a, int64_t dim, cg_tensor index) {
  CG_TRY return res(at::index_select(T(a), dim, T(index)));
  CG_CATCH_RESULT
}
cg_result cg_gather(cg_tensor a, int64_t dim, cg_tensor index) {
  CG_TRY return res(at::gather(T(a), dim, T(index)));
  CG_CATCH_RESULT
}
cg_result cg_masked_fill(cg_tensor a, cg_tensor mask, double value) {
  CG_TRY return res(at::masked_fill(T(a), T(mask), cg::scalar(value)));
  CG_CATCH_RESULT
}
cg_result cg_masked_select(cg_tensor a, cg_tensor mask) {
  CG_TRY return res(at::masked_select(T(a), T(mask)));
  CG_CATCH_RESULT
}
cg_result cg_where(cg_tensor c, cg_tensor a, cg_tensor b) {
  CG_TRY return res(at::where(T(c), T(a), T(b)));
  CG_CATCH_RESULT
}
cg_result cg_clamp(cg_tensor a, double lo, double hi, int has_lo, int has_hi) {
  CG_TRY std::optional<at::Scalar> l, h;
  if (has_lo) l = cg::scalar(lo);
  if (has_hi) h = cg::scalar(hi);
  return res(at::clamp(T(a), l, h));
  CG_CATCH_RESULT
}
cg_result cg_flatten(cg_tensor a, int64_t start, int64_t end) {
  CG_TRY return res(T(a).flatten(start, end));
  CG_CATCH_RESULT
}
cg_result cg_leaky_relu(cg_tensor a, double slope) {
  CG_TRY return res(at::leaky_relu(T(a), slope));
  CG_CATCH_RESULT
}
cg_result cg_gelu(cg_tensor a, int tanh_approx) {
  CG_TRY return res(at::gelu(T(a), tanh_approx ? "tanh" : "none"));
  CG_CATCH_RESULT
}
cg_result cg_dropout(cg_tensor a, double p, int train) {
  CG_TRY return res(at::dropout(T(a), p, train != 0));
  CG_CATCH_RESULT
}
cg_result cg_norm(cg_tensor a, double p) {
  CG_TRY return res(at::norm(T(a), p));
  CG_CATCH_RESULT
}

// ---- autograd ----
cg_status cg_set_requires_grad(cg_tensor t, int on) {
  CG_TRY T(t).set_requires_grad(on != 0);
  return cg::ok();
  CG_CATCH_STATUS
}

cg_status cg_backward(cg_tensor t, cg_tensor grad, int retain_graph) {
  CG_TRY T(t).backward(opt(grad), retain_graph ? std::optional<bool>(true) : std::nullopt);
  return cg::ok();
  CG_CATCH_STATUS
}

cg_result cg_grad(cg_tensor t) {
  CG_TRY const at::Tensor &g = T(t).grad();
  if (!g.defined()) return cg_result{CG_OK, nullptr, nullptr};
  return res(g);
  CG_CATCH_RESULT
}

cg_status cg_set_grad(cg_tensor t, cg_tensor grad) {
  CG_TRY T(t).mutable_grad() = opt(grad);
  return cg::ok();
  CG_CATCH_STATUS
}

int cg_grad_enabled(void) { return at::GradMode::is_enabled() ? 1 : 0; }
void cg_set_grad_enabled(int on) { at::GradMode::set_enabled(on != 0); }

}  // extern "C"
