/* profile.h: libtorch's (Kineto) profiler around a span of work (profile.cc). */
#ifndef GOTRAIN_PROFILE_H
#define GOTRAIN_PROFILE_H
#include "cgotorch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What an event is: an ATen op on the host, a kernel, copy or fill on a device, a call
 * into the CUDA runtime or driver, or something else. */
enum cg_profile_kind {
  CG_PROFILE_OP = 0,
  CG_PROFILE_KERNEL = 1,
  CG_PROFILE_MEMCPY = 2,
  CG_PROFILE_MEMSET = 3,
  CG_PROFILE_RUNTIME = 4,
  CG_PROFILE_OTHER = 5,
};

typedef struct {
  char *name;      /* malloc'd */
  int32_t kind;    /* cg_profile_kind */
  int32_t device;  /* cg_device_type where it ran */
  uint64_t thread; /* the host thread of an op (for nesting) */
  int64_t start_ns, dur_ns;
} cg_profile_event;

/* cg_profile_start starts recording this thread's ops (and the autograd threads'
 * they start) and, with cuda, the device's kernels through CUPTI. */
cg_status cg_profile_start(int cuda);

/* cg_profile_stop stops recording and returns the events (free them with
 * cg_profile_free). */
cg_status cg_profile_stop(cg_profile_event **events, int64_t *n);

void cg_profile_free(cg_profile_event *events, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
