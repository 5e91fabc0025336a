// internal.h: helpers shared by the cgotorch C++ files (not part of the C ABI).
#pragma once
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <string>
#include <vector>
#include "cgotorch.h"

namespace cg {

inline char *dup(const std::string &s) {
  char *p = static_cast<char *>(std::malloc(s.size() + 1));
  if (p) std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

inline cg_status fail(int code, const std::string &msg) { return cg_status{code, reinterpret_cast<cg_msg>(dup(msg))}; }
inline cg_status ok() { return cg_status{CG_OK, 0}; }
inline cg_status status(const cg_status &s) { return s; }

// classify turns the exception in flight into a status. CPU allocation failures are
// plain c10::Errors in some versions, so their message decides.
inline cg_status classify() {
  try {
    throw;
  } catch (const c10::OutOfMemoryError &e) {
    return fail(CG_ERR_OOM, e.what_without_backtrace());
  } catch (const c10::NotImplementedError &e) {
    return fail(CG_ERR_NOT_IMPLEMENTED, e.what_without_backtrace());
  } catch (const c10::Error &e) {
    std::string m = e.what_without_backtrace();
    if (m.find("can't allocate memory") != std::string::npos || m.find("out of memory") != std::string::npos)
      return fail(CG_ERR_OOM, m);
    return fail(CG_ERR_INVALID, m);
  } catch (const std::bad_alloc &e) {
    return fail(CG_ERR_OOM, std::string("allocation failed: ") + e.what());
  } catch (const std::invalid_argument &e) {
    return fail(CG_ERR_INVALID, e.what());
  } catch (const std::exception &e) {
    return fail(CG_ERR_OTHER, e.what());
  } catch (...) {
    return fail(CG_ERR_OTHER, "unknown C++ exception");
  }
}

// A frame is one open scope of a thread: the handles it owns, deleted when it closes.
struct Frame {
  int32_t slot;
  std::vector<at::Tensor *> owned;
};

// Thread is the per-thread state of the boundary: its open scopes, its free handle cells
// and its count of live handles.
//
// A handle is a box: one heap cell holding an at::Tensor. A step makes and frees hundreds of
// them in bursts, more than glibc's per-thread cache holds (7 cells a size), so a freed
// cell goes on its thread's free list, linked through the cells themselves, for the next
// op rather than back to malloc.
struct Thread {
  static constexpr int64_t kMaxFree = 4096;  // free cells kept (32 KiB)
  std::vector<Frame> frames;                  // open scopes, innermost last
  std::vector<at::Tensor *> spare;            // a closed scope's emptied list, for the next
  void *free_cells = nullptr;
  int64_t nfree = 0;
  // live counts the boxes this thread made less those it freed (a box may be freed on
  // another thread, so one thread's count can be negative; the sum is what counts). Only
  // this thread writes it, so a plain load and store suffice; cg_live_handles reads it.
  std::atomic<int64_t> live{0};

  Thread();
  ~Thread();

  [[gnu::always_inline]] at::Tensor *box(at::Tensor t) {
    void *c = free_cells;
    if (C10_LIKELY(c != nullptr)) {
      free_cells = *static_cast<void **>(c);
      nfree--;
    } else {
      c = ::operator new(sizeof(at::Tensor));
    }
    live.store(live.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return new (c) at::Tensor(std::move(t));
  }
  void unbox(at::Tensor *p) {
    static_assert(sizeof(at::Tensor) >= sizeof(void *), "a free cell holds the next one's address");
    p->~Tensor();
    live.store(live.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
    if (nfree < kMaxFree) {
      *reinterpret_cast<void **>(p) = free_cells;
      free_cells = p;
      nfree++;
    } else {
      ::operator delete(p);
    }
  }
  int32_t top_slot() const { return frames.empty() ? 0 : frames.back().slot; }
};
// self_ is the calling thread's Thread, made on its first call. It is a plain pointer,
// constant-initialised, so that reaching it costs no thread-local init check per call.
extern constinit thread_local Thread *self_;
Thread *make_thread();
[[gnu::always_inline]] inline Thread &self() {
  Thread *t = self_;
  return C10_LIKELY(t != nullptr) ? *t : *make_thread();
}

inline int32_t top_slot() { return self().top_slot(); }
inline at::Tensor *box(at::Tensor t) { return self().box(std::move(t)); }
inline void unbox(at::Tensor *p) { self().unbox(p); }

inline at::Tensor *ptr(cg_tensor t) { return reinterpret_cast<at::Tensor *>(t); }
inline cg_tensor handle(at::Tensor *p) { return reinterpret_cast<cg_tensor>(p); }
// owned boxes t into a handle no scope owns (an out-parameter the Go side wraps itself).
inline cg_tensor owned(at::Tensor t) { return handle(box(std::move(t))); }

// adopt makes a new handle for t, owned by the thread's innermost scope if one is open.
[[gnu::always_inline]] inline cg_tensor adopt(Thread &me, at::Tensor t) {
  at::Tensor *p = me.box(std::move(t));
  if (!me.frames.empty()) me.frames.back().owned.push_back(p);
  return handle(p);
}
inline cg_tensor adopt(at::Tensor t) { return adopt(self(), std::move(t)); }

inline cg_result res(const cg_status &s) { return cg_result{s.code, 0, s.msg, 0}; }
[[gnu::always_inline]] inline cg_result res(at::Tensor t) {
  Thread &me = self();
  cg_tensor h = adopt(me, std::move(t));
  return cg_result{CG_OK, me.top_slot(), 0, h};
}
inline cg_result2 res2(const cg_status &s) { return cg_result2{s.code, 0, s.msg, 0, 0}; }
inline cg_result2 res2(at::Tensor a, at::Tensor b) {
  Thread &me = self();
  cg_tensor ha = adopt(me, std::move(a)), hb = adopt(me, std::move(b));
  return cg_result2{CG_OK, me.top_slot(), 0, ha, hb};
}
inline cg_results resn(const cg_status &s) { return cg_results{s.code, 0, s.msg, 0, nullptr}; }
inline cg_results resn(const std::vector<at::Tensor> &ts) {
  auto *hs = static_cast<cg_tensor *>(std::malloc(sizeof(cg_tensor) * (ts.empty() ? 1 : ts.size())));
  if (!hs) throw std::bad_alloc();
  for (size_t i = 0; i < ts.size(); i++) hs[i] = adopt(ts[i]);
  return cg_results{CG_OK, top_slot(), 0, static_cast<int64_t>(ts.size()), hs};
}

inline at::Tensor &T(cg_tensor t) { return *ptr(t); }
// freed says whether t has elements but no memory: a parameter whose storage sharded
// training freed (cg_fsdp_free), which a kernel would read through a null pointer.
inline bool freed(const at::Tensor &t) {
  const c10::TensorImpl *i = t.unsafeGetTensorImpl();
  const c10::Storage &s = i->unsafe_storage();
  return s && s.data() == nullptr && i->numel() != 0 && !i->is_meta();
}
[[noreturn]] void refuse_freed(const at::Tensor &t);
// A is an operation's tensor argument: T(h), refused (a returned error, not a crash)
// when its storage is freed.
inline at::Tensor &A(cg_tensor h) {
  at::Tensor &t = T(h);
  if (C10_UNLIKELY(t.defined() && freed(t))) refuse_freed(t);
  return t;
}
// opt maps a NULL handle to an absent optional argument.
inline std::optional<at::Tensor> opt(cg_tensor t) {
  if (!t) return std::nullopt;
  return A(t);
}
// undefined_or maps a NULL handle to an undefined tensor (ATen's other spelling of "absent").
inline at::Tensor undefined_or(cg_tensor t) { return t ? *ptr(t) : at::Tensor(); }
inline std::vector<at::Tensor> tensors(const cg_tensor *ts, int n) {
  std::vector<at::Tensor> v;
  v.reserve(n);
  for (int i = 0; i < n; i++) v.push_back(A(ts[i]));
  return v;
}

inline at::Device device(int type, int index) {
  return type == 1 ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index)) : at::Device(at::kCPU);
}
inline at::TensorOptions options(at::ScalarType dtype, at::Device dev) { return at::TensorOptions().dtype(dtype).device(dev); }
// scalar keeps integral values integral, so int tensors stay int as in Python (t + 1).
inline at::Scalar scalar(double v) {
  if (v == static_cast<double>(static_cast<int64_t>(v)) && v > -9e15 && v < 9e15) return at::Scalar(static_cast<int64_t>(v));
  return at::Scalar(v);
}

// at::set_num_threads reaches only the calling OS thread and threads that have not yet
// run a parallel op (OpenMP's thread count is per thread; ATen applies its setting to
// a thread once, on its first parallel op). Go moves goroutines between OS threads, so
// a count set on one would not govern the ops of a loop that later runs on another, and
// results that depend on the thread count (reductions, LayerNorm's backward) would
// depend on scheduling. threads_epoch counts cg_set_num_threads calls; every call
// through CG_TRY re-applies the count on a thread that has not seen the latest one.
extern std::atomic<uint64_t> threads_epoch;
extern constinit thread_local uint64_t threads_seen;
[[gnu::always_inline]] inline void sync_num_threads() {
  uint64_t e = threads_epoch.load(std::memory_order_acquire);
  if (C10_UNLIKELY(e != threads_seen)) {
    threads_seen = e;
    at::init_num_threads();  // applies the count the last at::set_num_threads stored
  }
}

// batch_norm_counted is ops.tab's batchNormCounted: nn's BatchNorm layers' forward
// (tensor.cc).
at::Tensor batch_norm_counted(const at::Tensor &x, const std::optional<at::Tensor> &w,
                              const std::optional<at::Tensor> &b, const std::optional<at::Tensor> &running_mean,
                              const std::optional<at::Tensor> &running_var, const std::optional<at::Tensor> &count,
                              int64_t ranks, bool training, double momentum, double eps);
// accumulate is cg_accumulate without the exception guard (metrics.cc).
void accumulate(cg_tensor acc, cg_tensor *values, int n, double weight, int64_t step, int flags);

// ---- recording a step (replay.cc) ----
// While a thread records (cg_trace_begin), every generated op and every hand-written
// entry point a step uses appends an entry to the thread's trace: its number, its
// arguments (tensors as slots) and its results' slots. An entry point that cannot be
// replayed calls refuse instead, which makes the trace unusable.
struct Trace;
extern constinit thread_local Trace *recording_;
[[gnu::always_inline]] inline bool recording() { return C10_UNLIKELY(recording_ != nullptr); }
// refuse marks the trace being recorded, if any, as not replayable, for reason why.
void refuse(const char *why);

// Rec appends one entry to the trace being recorded; op is an ops.tab row's index, or
// one of replay.cc's numbers for the hand-written entry points.
class Rec {
 public:
  explicit Rec(int op);
  void t(cg_tensor h);  // a tensor argument (0: none)
  void list(const cg_tensor *hs, int n);
  void list(const int64_t *vs, int n);
  void v(int64_t x);
  void v(int x) { v(static_cast<int64_t>(x)); }
  void v(double x);
  void out(cg_tensor h);  // a tensor result
  void outs(const cg_tensor *hs, int64_t n);

 private:
  Trace &tr_;
};

// Reader reads an entry back while a trace replays, in the order Rec wrote it: tensors
// come back as handles to their slots, which stay valid for the entry's call.
class Reader {
 public:
  Reader(Trace &tr, const int64_t *w) : tr_(tr), w_(w) {}
  cg_tensor t();
  const cg_tensor *tensors(int *n);
  const int64_t *ints(int *n);
  int64_t i() { return *w_++; }
  double d() {
    double x;
    std::memcpy(&x, w_++, sizeof x);
    return x;
  }
  void out(at::Tensor t);
  void outs(const std::vector<at::Tensor> &ts);

 private:
  Trace &tr_;
  const int64_t *w_;
};

// The records of the hand-written entry points a step uses (replay.cc).
void record_zero_grad(const cg_tensor *params, int n, int set_to_none);
void record_backward(cg_tensor t, cg_tensor grad, int retain);
void record_optim_step(int kind, int ngroups, const int64_t *group_sizes, const cg_tensor *params,
                       const cg_tensor *state);
void record_accumulate(cg_tensor acc, const cg_tensor *values, int n, double weight, int64_t step, int flags);
void record_clip_norm(const cg_tensor *params, int n, double max_norm, double norm_type, cg_tensor total);
void record_clip_value(const cg_tensor *params, int n, double clip_value);
void record_grad(cg_tensor t, cg_tensor grad);
void record_grad_mode(int on);

// replay_op runs ops.tab's op number op from r (ops_gen.cc); op_name is its name
// (nullptr for a number that is not an ops.tab row).
void replay_op(int op, Reader &r);
const char *op_name(int op);

}  // namespace cg

#define CG_TRY try { cg::sync_num_threads();
#define CG_CATCH_STATUS \
  }                     \
  catch (...) { return cg::classify(); }
#define CG_CATCH_RESULT \
  }                     \
  catch (...) { return cg::res(cg::classify()); }
// CG_CATCH_INTO ends a generated op, whose result goes through its last parameter, ret_.
#define CG_CATCH_INTO(wrap) \
  }                         \
  catch (...) { *ret_ = cg::wrap(cg::classify()); }
