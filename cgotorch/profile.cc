// profile.cc: libtorch's Kineto profiler, as torch.profiler.profile drives it from Python
// (prepare, enable, run, disable), with its events handed to Go as plain structs.
#include <torch/csrc/autograd/profiler_kineto.h>

#include <cstdlib>
#include <set>

#include "internal.h"
#include "profile.h"

namespace {

namespace prof = torch::profiler::impl;

// libkineto's ActivityType values (kineto/ActivityType.h, stable since 2021): the header
// is not shipped by every libtorch, so the few used here are named here.
enum : uint8_t { kCpuOp = 0, kMemcpy = 3, kMemset = 4, kKernel = 5, kRuntime = 7, kDriver = 8 };

int32_t kind_of(uint8_t a) {
  switch (a) {
    case kCpuOp:
      return CG_PROFILE_OP;
    case kKernel:
      return CG_PROFILE_KERNEL;
    case kMemcpy:
      return CG_PROFILE_MEMCPY;
    case kMemset:
      return CG_PROFILE_MEMSET;
    case kRuntime:
    case kDriver:
      return CG_PROFILE_RUNTIME;
    default:
      return CG_PROFILE_OTHER;
  }
}

std::set<prof::ActivityType> activities(bool cuda) {
  std::set<prof::ActivityType> a{prof::ActivityType::CPU};
  if (cuda) a.insert(prof::ActivityType::CUDA);
  return a;
}

}  // namespace

extern "C" {

cg_status cg_profile_start(int cuda) {
  CG_TRY prof::ProfilerConfig cfg(prof::ProfilerState::KINETO);
  auto acts = activities(cuda != 0);
  torch::autograd::profiler::prepareProfiler(cfg, acts);
  torch::autograd::profiler::enableProfiler(cfg, acts);
  return cg::ok();
  CG_CATCH_STATUS
}

cg_status cg_profile_stop(cg_profile_event **events, int64_t *n) {
  *events = nullptr;
  *n = 0;
  CG_TRY auto res = torch::autograd::profiler::disableProfiler();
  const auto &evs = res->events();
  auto *out = static_cast<cg_profile_event *>(std::calloc(evs.size() ? evs.size() : 1, sizeof(cg_profile_event)));
  if (!out) throw std::bad_alloc();
  int64_t k = 0;
  for (const auto &e : evs) {
    cg_profile_event &o = out[k++];
    o.name = cg::dup(e.name());
    o.kind = kind_of(e.activityType());
    o.device = e.deviceType() == c10::DeviceType::CUDA ? CG_DEVICE_CUDA : CG_DEVICE_CPU;
    o.thread = e.startThreadId();
    o.start_ns = static_cast<int64_t>(e.startNs());
    o.dur_ns = static_cast<int64_t>(e.durationNs());
  }
  *events = out;
  *n = k;
  return cg::ok();
  CG_CATCH_STATUS
}

void cg_profile_free(cg_profile_event *events, int64_t n) {
  if (!events) return;
  for (int64_t i = 0; i < n; i++) std::free(events[i].name);
  std::free(events);
}

}  // extern "C"
