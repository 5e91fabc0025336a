// internal.h: helpers shared by the cgotorch C++ files (not part of the C ABI).
#pragma once
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include "cgotorch.h"

namespace cg {

inline char *dup(const std::string &s) {
  char *p = static_cast<char *>(std::malloc(s.size() + 1));
  if (p) std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

inline cg_status fail(int code, const std::string &msg) { return cg_status{code, dup(msg)}; }
inline cg_status ok() { return cg_status{CG_OK, nullptr}; }

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

inline cg_result res(const cg_status &s) { return cg_result{s.code, s.msg, nullptr}; }
inline cg_result res(at::Tensor t) { return cg_result{CG_OK, nullptr, new at::Tensor(std::move(t))}; }

inline at::Tensor &T(cg_tensor t) { return *static_cast<at::Tensor *>(t); }
// opt maps a NULL handle to an undefined tensor (an absent optional argument).
inline at::Tensor opt(cg_tensor t) { return t ? *static_cast<at::Tensor *>(t) : at::Tensor(); }

inline at::Device device(int type, int index) {
  return type == 1 ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index)) : at::Device(at::kCPU);
}
inline at::TensorOptions options(int dtype, int device_type, int device_index) {
  return at::TensorOptions().dtype(static_cast<at::ScalarType>(dtype)).device(device(device_type, device_index));
}
// scalar keeps integral values integral, so int tensors stay int as in Python (t + 1).
inline at::Scalar scalar(double v) {
  if (v == static_cast<double>(static_cast<int64_t>(v)) && v > -9e15 && v < 9e15) return at::Scalar(static_cast<int64_t>(v));
  return at::Scalar(v);
}

}  // namespace cg

#define CG_TRY try {
#define CG_CATCH_STATUS \
  }                     \
  catch (...) { return cg::classify(); }
#define CG_CATCH_RESULT \
  }                     \
  catch (...) { return cg::res(cg::classify()); }
