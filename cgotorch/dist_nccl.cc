//go:build !nodist

// dist_nccl.cc: c10d's NCCL process group. ProcessGroupNCCL.hpp needs NCCL's and the CUDA
// runtime's headers, which PyTorch's wheel has as the nvidia-* packages beside it (nccl,
// cuda-runtime, and the crt and cccl headers the runtime's headers include).
// libtorch.mk defines GOTRAIN_NCCL when it finds all of them, and link_cuda.go defines
// GOTRAIN_CUDA_BUILD in builds that link libtorch_cuda, which carries the
// implementation. Without both, NCCL reports what is missing.
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include "cgotorch.h"

#if defined(GOTRAIN_NCCL) && defined(GOTRAIN_CUDA_BUILD)
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

extern "C" int cg_dist_nccl_available(const char **why) {
  if (why) *why = "";
  return 1;
}

namespace {
bool env_set(const char *name) {
  const char *v = std::getenv(name);
  return v && *v;
}
}  // namespace

// A hung or lost peer must end the job, not stall it: gotrain waits for every collective
// with the group's timeout on the host (the wait throws, and the error names the lost
// ranks), and NCCL's watchdog is the backstop for work no host thread waits on. Neither
// is left at PyTorch's defaults (SkipCleanUp, 10 minutes): unless the user chose a mode
// (TORCH_NCCL_ASYNC_ERROR_HANDLING or TORCH_NCCL_BLOCKING_WAIT, or their NCCL_ names),
// error handling is TearDown (1), which aborts the communicators and ends the process,
// as torchrun expects of a failed worker; and the watchdog's limit is the collective
// timeout plus a margin, so that the host's error, which says which rank was lost,
// comes first.
c10::intrusive_ptr<c10d::Backend> cg_make_nccl_backend(const c10::intrusive_ptr<c10d::Store> &store, int rank,
                                                      int world, std::chrono::milliseconds timeout) {
  if (!env_set("TORCH_NCCL_ASYNC_ERROR_HANDLING") && !env_set("NCCL_ASYNC_ERROR_HANDLING") &&
      !env_set("TORCH_NCCL_BLOCKING_WAIT") && !env_set("NCCL_BLOCKING_WAIT"))
    setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1", 0);  // read by ProcessGroupNCCL's constructor
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout + std::max(std::chrono::milliseconds(10000), timeout / 10);
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, opts);
}
#else
static const char kNoNCCL[] =
#ifdef GOTRAIN_CUDA_BUILD
    "this CUDA build of gotrain has no NCCL: the headers it needs (nccl.h, cuda_runtime_api.h, "
    "crt/host_config.h, nv/target) were not found when it was built (scripts/setup.sh installs them into "
    ".venv; or set CUDA_INCDIRS for make); use the gloo backend, which also carries CUDA tensors";
#else
    "NCCL needs a CUDA build of gotrain; this binary was built with -tags cpu (use the gloo backend, or "
    "build without the cpu tag against a CUDA libtorch)";
#endif

extern "C" int cg_dist_nccl_available(const char **why) {
  if (why) *why = kNoNCCL;
  return 0;
}

c10::intrusive_ptr<c10d::Backend> cg_make_nccl_backend(const c10::intrusive_ptr<c10d::Store> &, int, int,
                                                      std::chrono::milliseconds) {
  throw std::runtime_error(kNoNCCL);
}
#endif
