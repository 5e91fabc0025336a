// jit.cc: TorchScript modules saved by Python's torch.jit.save: load, forward, train/eval,
// their parameters and buffers, save. The only file that includes <torch/script.h>, so
// the heavy JIT headers stay out of the rest of the shim.
#include <torch/script.h>
#include <string>
#include <vector>
#include "internal.h"

using cg::T;
using cg::res;

// Declared in torch/csrc/jit/codegen/fuser/interface.h, which Debian's libtorch-dev does
// not install; the function is exported by libtorch_cpu in every supported version.
namespace torch::jit {
TORCH_API void overrideCanFuseOnCPU(bool value);
}

namespace {

// CPU fusion of TorchScript graphs is off in PyTorch's wheels but on in builds with LLVM
// (Debian's libtorch 2.6), where it compiles every new input shape for minutes. gotrain
// turns it off everywhere, so scripted models run the same kernels on every libtorch.
const bool cpu_fusion_off = (torch::jit::overrideCanFuseOnCPU(false), true);

torch::jit::Module &M(cg_module m) { return *static_cast<torch::jit::Module *>(m); }

// collect walks m in state_dict order: its own parameters, its own buffers, then each
// child, pre-order, with dotted names.
void collect(const torch::jit::Module &m, const std::string &prefix, std::vector<std::string> &names,
             std::vector<at::Tensor> &ts, std::vector<int32_t> &kinds) {
  for (const auto &p : m.named_parameters(/*recurse=*/false)) {
    names.push_back(prefix + p.name);
    ts.push_back(p.value);
    kinds.push_back(0);
  }
  for (const auto &b : m.named_buffers(/*recurse=*/false)) {
    names.push_back(prefix + b.name);
    ts.push_back(b.value);
    kinds.push_back(1);
  }
  for (const auto &c : m.named_children()) collect(c.value, prefix + c.name + ".", names, ts, kinds);
}

}  // namespace

extern "C" {

cg_status cg_jit_load(const char *path, int device_type, int device_index, cg_module *out) {
  CG_TRY *out = nullptr;
  auto m = torch::jit::load(std::string(path), cg::device(device_type, device_index));
  *out = new torch::jit::Module(std::move(m));
  return cg::ok();
  CG_CATCH_STATUS
}

void cg_jit_free(cg_module m) { delete static_cast<torch::jit::Module *>(m); }

cg_result cg_jit_forward(cg_module m, cg_tensor x) {
  CG_TRY if (cg::recording()) cg::refuse("a TorchScript forward is not recorded");
  std::vector<c10::IValue> in{T(x)};
  c10::IValue out = M(m).forward(std::move(in));
  if (!out.isTensor()) return res(cg::fail(CG_ERR_INVALID, "TorchScript forward returned " + std::string(out.tagKind()) + ", not a Tensor"));
  return res(out.toTensor());
  CG_CATCH_RESULT
}

cg_status cg_jit_train(cg_module m, int on) {
  CG_TRY M(m).train(on != 0);
  return cg::ok();
  CG_CATCH_STATUS
}

int cg_jit_is_training(cg_module m) { return M(m).is_training() ? 1 : 0; }

cg_status cg_jit_save(cg_module m, const char *path) {
  CG_TRY M(m).save(std::string(path));
  return cg::ok();
  CG_CATCH_STATUS
}

cg_status cg_jit_named_tensors(cg_module m, cg_named_tensors *out) {
  CG_TRY *out = cg_named_tensors{0, nullptr, nullptr, nullptr};
  std::vector<std::string> names;
  std::vector<at::Tensor> ts;
  std::vector<int32_t> kinds;
  collect(M(m), "", names, ts, kinds);
  size_t n = names.size();
  auto **np = static_cast<char **>(std::calloc(n ? n : 1, sizeof(char *)));
  auto *tp = static_cast<cg_tensor *>(std::calloc(n ? n : 1, sizeof(cg_tensor)));
  auto *kp = static_cast<int32_t *>(std::calloc(n ? n : 1, sizeof(int32_t)));
  if (!np || !tp || !kp) {
    std::free(np), std::free(tp), std::free(kp);
    throw std::bad_alloc();
  }
  for (size_t i = 0; i < n; i++) {
    np[i] = cg::dup(names[i]);
    tp[i] = cg::owned(ts[i]);  // an alias: same TensorImpl as the module's slot
    kp[i] = kinds[i];
  }
  *out = cg_named_tensors{static_cast<int64_t>(n), np, tp, kp};
  return cg::ok();
  CG_CATCH_STATUS
}

void cg_named_tensors_free(cg_named_tensors *nt) {
  for (int64_t i = 0; i < nt->n; i++) std::free(nt->names[i]);
  std::free(nt->names);
  std::free(nt->tensors);
  std::free(nt->kinds);
  *nt = cg_named_tensors{0, nullptr, nullptr, nullptr};
}

cg_status cg_tensor_set_data(cg_tensor t, cg_tensor src) {
  CG_TRY if (cg::recording()) cg::refuse("set_data changes a tensor outside the trace");
  T(t).set_data(T(src));
  return cg::ok();
  CG_CATCH_STATUS
}

}  // extern "C"
