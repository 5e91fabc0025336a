// scope.cc: per-thread frames of owned handles, so that a scope is found without a lock
// or an extra call (the result of every op names the frame that adopted its handles) and
// is freed in one call.
#include <algorithm>
#include <memory>
#include <mutex>
#include "internal.h"

namespace cg {
constinit thread_local Thread *self_ = nullptr;

namespace {
// threads are the live Threads, for cg_live_handles; exited sums the counts of those gone.
std::mutex threads_mu;
std::vector<Thread *> threads;
std::atomic<int64_t> exited{0};
}  // namespace

Thread *make_thread() {
  // keeper destroys the thread's state when the thread exits; it is touched only here.
  static thread_local std::unique_ptr<Thread> keeper;
  keeper = std::make_unique<Thread>();
  self_ = keeper.get();
  return self_;
}

Thread::Thread() {
  std::lock_guard<std::mutex> g(threads_mu);
  threads.push_back(this);
}

// A scope still open when its thread exits (a goroutine that ended locked to its thread)
// keeps its tensors: Go may still hold them, so they leak rather than dangle.
Thread::~Thread() {
  {
    std::lock_guard<std::mutex> g(threads_mu);
    threads.erase(std::find(threads.begin(), threads.end(), this));
    exited.fetch_add(live.load(), std::memory_order_relaxed);
  }
  for (void *c = free_cells; c != nullptr;) {
    void *next = *static_cast<void **>(c);
    ::operator delete(c);
    c = next;
  }
  self_ = nullptr;
}
}  // namespace cg

namespace {

// unbox_all frees a frame's handles, oldest first, and empties the list.
void unbox_all(cg::Thread &me, std::vector<at::Tensor *> &owned) {
  for (at::Tensor *p : owned) me.unbox(p);
  owned.clear();
}

cg::Frame *find_frame(int32_t slot, size_t *depth) {
  auto &frames = cg::self().frames;
  for (size_t i = frames.size(); i-- > 0;) {
    if (frames[i].slot == slot) {
      if (depth) *depth = i;
      return &frames[i];
    }
  }
  return nullptr;
}

// take removes t from frame f's handles; the most recent handles are searched first, since
// a handle is usually freed or kept soon after it is made.
bool take(cg::Frame *f, cg_tensor t) {
  auto &v = f->owned;
  for (size_t i = v.size(); i-- > 0;) {
    if (v[i] == cg::ptr(t)) {
      v.erase(v.begin() + static_cast<std::ptrdiff_t>(i));
      return true;
    }
  }
  return false;
}

cg_status not_here(const char *what, int32_t slot) {
  return cg::fail(CG_ERR_INVALID, std::string(what) + ": the tensor's scope (slot " + std::to_string(slot) +
                                      ") is not open on this thread: scopes and their tensors belong to the "
                                      "goroutine that opened them");
}

}  // namespace

extern "C" {

void cg_free_handles(cg_tensor *ts) { std::free(ts); }

int64_t cg_live_handles(void) {
  std::lock_guard<std::mutex> g(cg::threads_mu);
  int64_t n = cg::exited.load();
  for (cg::Thread *t : cg::threads) n += t->live.load(std::memory_order_relaxed);
  return n;
}

cg_status cg_scope_open(int32_t slot) {
  CG_TRY auto &self = cg::self();
  self.frames.push_back(cg::Frame{slot, {}});
  self.frames.back().owned.swap(self.spare);
  return cg::ok();
  CG_CATCH_STATUS
}

cg_status cg_scope_close(int32_t slot) {
  auto &me = cg::self();
  if (me.frames.empty() || me.frames.back().slot != slot) return not_here("scope close", slot);
  std::vector<at::Tensor *> owned = std::move(me.frames.back().owned);
  me.frames.pop_back();
  unbox_all(me, owned);
  // The next scope reuses the list, as a loop opens and closes one scope per step.
  if (owned.capacity() > me.spare.capacity()) me.spare.swap(owned);
  return cg::ok();
}

cg_status cg_scope_reset(int32_t slot) {
  auto &me = cg::self();
  if (me.frames.empty() || me.frames.back().slot != slot) return not_here("scope reset", slot);
  // Unboxing runs no Go and opens no scope, so the frame stays the innermost throughout.
  unbox_all(me, me.frames.back().owned);
  return cg::ok();
}

cg_status cg_scope_free(cg_tensor t, int32_t slot) {
  if (slot != 0) {
    cg::Frame *f = find_frame(slot, nullptr);
    if (!f || !take(f, t)) return not_here("free", slot);
  }
  cg::unbox(cg::ptr(t));
  return cg::ok();
}

cg_status cg_scope_move(cg_tensor t, int32_t slot, int32_t *now) {
  size_t depth = 0;
  cg::Frame *f = find_frame(slot, &depth);
  if (!f || !take(f, t)) return not_here("keep", slot);
  *now = 0;
  if (depth > 0) {
    auto &frames = cg::self().frames;
    CG_TRY frames[depth - 1].owned.push_back(cg::ptr(t));
    *now = frames[depth - 1].slot;
    CG_CATCH_STATUS
  }
  return cg::ok();
}

cg_status cg_scope_disown(cg_tensor t, int32_t slot) {
  cg::Frame *f = find_frame(slot, nullptr);
  if (!f || !take(f, t)) return not_here("escape", slot);
  return cg::ok();
}

}  // extern "C"
