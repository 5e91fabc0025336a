// fsdp.cc: storage freeing and refilling and the pre-backward node of sharded training
// (fsdp.h).
#include <c10/core/StorageImpl.h>
#include <torch/csrc/autograd/custom_function.h>
#include <cstdlib>
#include <string>
#include <vector>
#include "fsdp.h"
#include "internal.h"

// cgotorchFSDPPreBackward is the Go side (fsdp.go): it gathers unit's parameters. A
// failure returns its code and a malloc'd message in *msg.
extern "C" int32_t cgotorchFSDPPreBackward(uintptr_t unit, cg_msg *msg);

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct PreBackward : torch::autograd::Function<PreBackward> {
  static variable_list forward(AutogradContext *ctx, int64_t unit, at::TensorList xs) {
    ctx->saved_data["unit"] = unit;
    variable_list out;
    out.reserve(xs.size());
    // Views of the inputs: the node's outputs must be new tensors.
    for (const at::Tensor &x : xs) out.push_back(x.view_as(x));
    return out;
  }

  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    auto unit = static_cast<uintptr_t>(ctx->saved_data["unit"].toInt());
    cg_msg msg = 0;
    int32_t code = cgotorchFSDPPreBackward(unit, &msg);
    if (code != CG_OK) {
      std::string m = msg != 0 ? reinterpret_cast<const char *>(msg) : "gathering a unit's parameters failed";
      std::free(reinterpret_cast<void *>(msg));
      if (code == CG_ERR_OOM) TORCH_CHECK_WITH(OutOfMemoryError, false, m);
      TORCH_CHECK(false, m);
    }
    variable_list out;
    out.push_back(at::Tensor());  // unit
    for (auto &g : grads) out.push_back(g);
    return out;
  }
};

size_t bytes_needed(const at::Tensor &t) {
  return static_cast<size_t>(t.storage_offset() + t.numel()) * t.element_size();
}

// refill gives a parameter whose storage cg_fsdp_free emptied its bytes back, from the
// storage's own allocator, and returns its data without autograd's version counter.
at::Tensor refill(at::Tensor &t) {
  c10::StorageImpl *st = t.storage().unsafeGetStorageImpl();
  size_t need = bytes_needed(t);
  if (st->nbytes() < need) {
    TORCH_CHECK(st->allocator() != nullptr, "fsdp: the parameter's storage has no allocator to fill it again");
    st->set_data_ptr_noswap(st->allocator()->allocate(need));
    st->set_nbytes(need);
  }
  return t.variable_data();
}

}  // namespace

// refuse_freed is the error of an operation given a tensor whose storage cg_fsdp_free
// emptied (internal.h: A).
void cg::refuse_freed(const at::Tensor &t) {
  TORCH_CHECK(false, "a tensor of ", t.sizes(), " whose memory sharded training freed (FullyShardedDataParallel with ",
              "ReshardAfterForward frees a unit's parameters between its forward and backward, and between steps): ",
              "call Unshard (or Unsharded) on every rank before reading the model");
}

extern "C" {

cg_results cg_fsdp_pre_backward(uintptr_t unit, cg_tensor *xs, int n) {
  try {
    std::vector<at::Tensor> in, out(n);
    std::vector<int> at;
    for (int i = 0; i < n; i++) {
      const at::Tensor &x = cg::T(xs[i]);
      if (x.defined() && x.requires_grad()) {
        in.push_back(x);
        at.push_back(i);
      } else {
        out[i] = x;
      }
    }
    if (!in.empty()) {
      variable_list got = PreBackward::apply(static_cast<int64_t>(unit), at::TensorList(in));
      for (size_t k = 0; k < at.size(); k++) out[at[k]] = got[k];
    }
    return cg::resn(out);
  } catch (...) {
    return cg::resn(cg::classify());
  }
}

cg_status cg_fsdp_own(cg_tensor *ts, int n) {
  CG_TRY for (int i = 0; i < n; i++) {
    at::Tensor &t = cg::T(ts[i]);
    // Aliases of the whole tensor (detached handles) may share its storage: freeing it
    // frees theirs, which is what they alias.
    if (t.is_contiguous() && t.storage_offset() == 0 && t.storage().nbytes() == bytes_needed(t)) continue;
    at::Tensor c;
    {
      at::NoGradGuard g;
      c = t.detach().clone(at::MemoryFormat::Contiguous);
    }
    auto *impl = t.unsafeGetTensorImpl();
    impl->set_storage_keep_dtype(c.storage());
    impl->set_storage_offset(0);
    impl->set_sizes_contiguous(c.sizes());
  }
  return cg::ok();
  CG_CATCH_STATUS
}

cg_status cg_fsdp_free(cg_tensor *ts, int n) {
  CG_TRY for (int i = 0; i < n; i++) {
    at::Tensor &t = cg::T(ts[i]);
    c10::StorageImpl *s = t.storage().unsafeGetStorageImpl();
    if (s->nbytes() == 0) continue;
    s->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
    s->set_nbytes(0);
  }
  return cg::ok();
  CG_CATCH_STATUS
}

cg_results cg_fsdp_alloc(cg_tensor *ts, int n) {
  try {
    std::vector<at::Tensor> out;
    out.reserve(n);
    for (int i = 0; i < n; i++) out.push_back(refill(cg::T(ts[i])));
    return cg::resn(out);
  } catch (...) {
    return cg::resn(cg::classify());
  }
}

cg_status cg_fsdp_fill(cg_tensor *dst, cg_tensor *src, int n) {
  CG_TRY for (int i = 0; i < n; i++) {
    // variable_data shares the storage under a version counter of its own: the copy
    // does not count as a change autograd would refuse.
    at::Tensor v = refill(cg::T(dst[i]));
    const at::Tensor &s = cg::T(src[i]);
    at::NoGradGuard g;
    v.copy_(s.narrow(0, 0, v.size(0)).view(v.sizes()));
  }
  return cg::ok();
  CG_CATCH_STATUS
}

int64_t cg_fsdp_storage_bytes(cg_tensor t) {
  try {
    const at::Tensor &x = cg::T(t);
    if (!x.has_storage()) return -1;
    return static_cast<int64_t>(x.storage().nbytes());
  } catch (...) {
    return -1;
  }
}

}  // extern "C"
