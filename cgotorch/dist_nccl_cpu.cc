//go:build cpu && !nodist

// dist_nccl_cpu.cc: a CPU-only build (tag cpu) links no libtorch_cuda and so no NCCL.
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <chrono>
#include <stdexcept>
#include "cgotorch.h"

static const char kNoNCCL[] =
    "NCCL needs a CUDA build of gotrain; this binary was built with -tags cpu (use the gloo backend, or "
    "build without the cpu tag against a CUDA libtorch)";

extern "C" int cg_dist_nccl_available(const char **why) {
  if (why) *why = kNoNCCL;
  return 0;
}

c10::intrusive_ptr<c10d::Backend> cg_make_nccl_backend(const c10::intrusive_ptr<c10d::Store> &, int, int,
                                                      std::chrono::milliseconds) {
  throw std::runtime_error(kNoNCCL);
}
