//go:build !nodist

// dist_nccl.cc: c10d's NCCL process group. ProcessGroupNCCL.hpp needs NCCL's and the CUDA
// runtime's headers, which PyTorch's wheel has as the nvidia-* packages beside it (nccl,
// cuda-runtime, and the crt and cccl headers the runtime's headers include).
// libtorch.mk defines GOTRAIN_NCCL when it finds all of them, and link_cuda.go defines
// GOTRAIN_CUDA_BUILD in builds that link libtorch_cuda, which carries the
// implementation. Without both, NCCL reports what is missing.
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <chrono>
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

c10::intrusive_ptr<c10d::Backend> cg_make_nccl_backend(const c10::intrusive_ptr<c10d::Store> &store, int rank,
                                                      int world, std::chrono::milliseconds timeout) {
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout;
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
