// scope.cc: per-thread frames of owned handles, so that a scope is found without a lock
// or an extra call (the result of every op names the frame that adopted its handles) and
// is freed in one call.
#include <algorithm>
#include "internal.h"

namespace cg {
thread_local std::vector<Frame> frames;
}

namespace {

cg::Frame *find_frame(int32_t slot, size_t *depth) {
  for (size_t i = cg::frames.size(); i-- > 0;) {
    if (cg::frames[i].slot == slot) {
      if (depth) *depth = i;
      return &cg::frames[i];
    }
  }
  return nullptr;
}

// take removes t from frame f's handles; the most recent handles are searched first, since
// a handle is usually freed or kept soon after it is made.
bool take(cg::Frame *f, cg_tensor t) {
  auto &v = f->owned;
  for (size_t i = v.size(); i-- > 0;) {
    if (v[i] == t) {
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

cg_status cg_scope_open(int32_t slot) {
  CG_TRY cg::frames.push_back(cg::Frame{slot, {}});
  return cg::ok();
  CG_CATCH_STATUS
}

cg_status cg_scope_close(int32_t slot, int64_t *freed) {
  *freed = 0;
  if (cg::frames.empty() || cg::frames.back().slot != slot) return not_here("scope close", slot);
  std::vector<at::Tensor *> owned = std::move(cg::frames.back().owned);
  cg::frames.pop_back();
  // Newest first, as the Go side used to free them.
  for (size_t i = owned.size(); i-- > 0;) delete owned[i];
  *freed = static_cast<int64_t>(owned.size());
  return cg::ok();
}

cg_status cg_scope_free(cg_tensor t, int32_t slot) {
  if (slot != 0) {
    cg::Frame *f = find_frame(slot, nullptr);
    if (!f || !take(f, t)) return not_here("free", slot);
  }
  delete static_cast<at::Tensor *>(t);
  return cg::ok();
}

cg_status cg_scope_move(cg_tensor t, int32_t slot, int32_t *now) {
  size_t depth = 0;
  cg::Frame *f = find_frame(slot, &depth);
  if (!f || !take(f, t)) return not_here("keep", slot);
  *now = 0;
  if (depth > 0) {
    CG_TRY cg::frames[depth - 1].owned.push_back(static_cast<at::Tensor *>(t));
    *now = cg::frames[depth - 1].slot;
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
