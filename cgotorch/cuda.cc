//go:build !cpu

// cuda.cc: CUDA queries in a CUDA build. It needs no CUDA headers: libtorch's CUDA hooks
// and device allocator are reached through ATen/c10 interfaces, and the device name,
// capability and memory come from the CUDA driver (libcuda.so.1), looked up at run time,
// so the same source builds against any CUDA libtorch, wheel or unpacked.
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/version.h>
#include <dlfcn.h>
#include <cstring>
#include "internal.h"

#define CG_HAS_DEVICE_ALLOCATOR (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9))

namespace {
cg_status check_device(int device) {
  int n = at::detail::getCUDAHooks().getNumGPUs();
  if (n == 0) return cg::fail(CG_ERR_INVALID, "CUDA is not available (no device visible to this process)");
  if (device < 0 || device >= n) return cg::fail(CG_ERR_INVALID, "CUDA device " + std::to_string(device) + " does not exist; " + std::to_string(n) + " visible");
  return cg::ok();
}

// The few driver entry points used, resolved once from libcuda.so.1.
struct Driver {
  int (*init)(unsigned) = nullptr;
  int (*get)(int *, int) = nullptr;
  int (*name)(char *, int, int) = nullptr;
  int (*attr)(int *, int, int) = nullptr;
  int (*mem)(size_t *, int) = nullptr;
  bool ok = false;
  Driver() {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) return;
    init = reinterpret_cast<int (*)(unsigned)>(dlsym(h, "cuInit"));
    get = reinterpret_cast<int (*)(int *, int)>(dlsym(h, "cuDeviceGet"));
    name = reinterpret_cast<int (*)(char *, int, int)>(dlsym(h, "cuDeviceGetName"));
    attr = reinterpret_cast<int (*)(int *, int, int)>(dlsym(h, "cuDeviceGetAttribute"));
    mem = reinterpret_cast<int (*)(size_t *, int)>(dlsym(h, "cuDeviceTotalMem_v2"));
    ok = init && get && name && attr && mem && init(0) == 0;
  }
};
const Driver &driver() {
  static Driver d;
  return d;
}
cg_status driver_device(int device, int *dev) {
  auto s = check_device(device);
  if (s.code) return s;
  if (!driver().ok) return cg::fail(CG_ERR_OTHER, "the CUDA driver (libcuda.so.1) could not be loaded or initialised");
  if (driver().get(dev, device) != 0) return cg::fail(CG_ERR_INVALID, "cuDeviceGet failed for device " + std::to_string(device));
  return cg::ok();
}
}  // namespace

extern "C" {
int cg_cuda_available(void) {
  try {
    return at::detail::getCUDAHooks().hasCUDA() && at::detail::getCUDAHooks().getNumGPUs() > 0 ? 1 : 0;
  } catch (...) {
    return 0;
  }
}
int cg_cuda_device_count(void) {
  try {
    return at::detail::getCUDAHooks().getNumGPUs();
  } catch (...) {
    return 0;
  }
}
cg_status cg_cuda_device_name(int device, char *buf, int n) {
  CG_TRY int dev;
  auto s = driver_device(device, &dev);
  if (s.code) return s;
  if (driver().name(buf, n, dev) != 0) return cg::fail(CG_ERR_OTHER, "cuDeviceGetName failed");
  return cg::ok();
  CG_CATCH_STATUS
}
cg_status cg_cuda_capability(int device, int *major, int *minor) {
  CG_TRY int dev;
  auto s = driver_device(device, &dev);
  if (s.code) return s;
  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75, _MINOR = 76
  if (driver().attr(major, 75, dev) != 0 || driver().attr(minor, 76, dev) != 0) return cg::fail(CG_ERR_OTHER, "cuDeviceGetAttribute failed");
  return cg::ok();
  CG_CATCH_STATUS
}
cg_status cg_cuda_total_memory(int device, int64_t *bytes) {
  CG_TRY int dev;
  auto s = driver_device(device, &dev);
  if (s.code) return s;
  size_t b = 0;
  if (driver().mem(&b, dev) != 0) return cg::fail(CG_ERR_OTHER, "cuDeviceTotalMem failed");
  *bytes = static_cast<int64_t>(b);
  return cg::ok();
  CG_CATCH_STATUS
}
cg_status cg_cuda_set_device(int device) {
  CG_TRY auto s = check_device(device);
  if (s.code) return s;
  c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->setDevice(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)));
  return cg::ok();
  CG_CATCH_STATUS
}
cg_status cg_cuda_synchronize(int device) {
  CG_TRY auto s = check_device(device);
  if (s.code) return s;
  at::detail::getCUDAHooks().deviceSynchronize(static_cast<c10::DeviceIndex>(device));
  return cg::ok();
  CG_CATCH_STATUS
}
cg_status cg_cuda_memory_stats(int device, int64_t *allocated, int64_t *reserved, int64_t *peak) {
  CG_TRY auto s = check_device(device);
  if (s.code) return s;
#if CG_HAS_DEVICE_ALLOCATOR
  auto st = c10::getDeviceAllocator(c10::DeviceType::CUDA)->getDeviceStats(static_cast<c10::DeviceIndex>(device));
  auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  *allocated = st.allocated_bytes[agg].current;
  *reserved = st.reserved_bytes[agg].current;
  *peak = st.allocated_bytes[agg].peak;
  return cg::ok();
#else
  return cg::fail(CG_ERR_NOT_IMPLEMENTED, "CUDA memory statistics need libtorch 2.9 or newer");
#endif
  CG_CATCH_STATUS
}
cg_status cg_cuda_empty_cache(void) {
  CG_TRY
#if CG_HAS_DEVICE_ALLOCATOR
  if (cg_cuda_available()) c10::getDeviceAllocator(c10::DeviceType::CUDA)->emptyCache();
#endif
  return cg::ok();
  CG_CATCH_STATUS
}
cg_status cg_cuda_reset_peak(int device) {
  CG_TRY auto s = check_device(device);
  if (s.code) return s;
#if CG_HAS_DEVICE_ALLOCATOR
  c10::getDeviceAllocator(c10::DeviceType::CUDA)->resetPeakStats(static_cast<c10::DeviceIndex>(device));
  return cg::ok();
#else
  return cg::fail(CG_ERR_NOT_IMPLEMENTED, "CUDA memory statistics need libtorch 2.9 or newer");
#endif
  CG_CATCH_STATUS
}
int cg_cudnn_version(void) {
  try {
    return static_cast<int>(at::detail::getCUDAHooks().versionCuDNN());
  } catch (...) {
    return 0;
  }
}
int cg_cuda_runtime_version(void) {
  try {
    return static_cast<int>(at::detail::getCUDAHooks().versionCUDART());
  } catch (...) {
    return 0;
  }
}
}
