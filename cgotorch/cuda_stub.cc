//go:build cpu

// cuda_stub.cc: the CUDA queries in a CPU-only build (tag cpu): no device, clear errors.
#include "internal.h"

namespace {
cg_status no_cuda() { return cg::fail(CG_ERR_NOT_IMPLEMENTED, "gotrain was built with the cpu tag: CUDA is not linked (build without -tags cpu against a CUDA libtorch)"); }
}  // namespace

extern "C" {
int cg_cuda_available(void) { return 0; }
int cg_cuda_device_count(void) { return 0; }
cg_status cg_cuda_device_name(int, char *, int) { return no_cuda(); }
cg_status cg_cuda_capability(int, int *, int *) { return no_cuda(); }
cg_status cg_cuda_total_memory(int, int64_t *) { return no_cuda(); }
cg_status cg_cuda_set_device(int) { return no_cuda(); }
cg_status cg_cuda_synchronize(int) { return no_cuda(); }
cg_status cg_cuda_memory_stats(int, int64_t *, int64_t *, int64_t *) { return no_cuda(); }
cg_status cg_cuda_empty_cache(void) { return no_cuda(); }
cg_status cg_cuda_reset_peak(int) { return no_cuda(); }
int cg_cudnn_version(void) { return 0; }
int cg_cuda_runtime_version(void) { return 0; }
}
