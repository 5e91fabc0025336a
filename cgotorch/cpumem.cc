// cpumem.cc: the counting CPU allocator of cpumem.h. cgotorch compiles it into the Go
// binary; `make bench` also compiles this file alone into a shared object that
// bench/gpu/bench.py loads with ctypes, so that gotrain and PyTorch count a step's memory
// with the same code: every CPU tensor storage libtorch allocates goes through
// c10::GetCPUAllocator(), and this allocator, installed there with a higher priority than
// the default one, counts the bytes asked for and passes the call on.
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "cpumem.h"

namespace {

// Counting wraps the CPU allocator that was current when it was installed.
class Counting final : public c10::Allocator {
 public:
  explicit Counting(c10::Allocator *inner) : inner_(inner) {}

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr d = inner_->allocate(n);
    void *data = d.get();
    if (n == 0 || data == nullptr) return d;  // nothing to count, and null is not a key
    const c10::Device dev = d.device();
    if (d.get_context() == data) {
      // The default allocator's kind (context == data, one deleter): the pointer is the
      // key, so the storage stays a "simple" data pointer as it was without counting.
      c10::DeleterFnPtr del = d.get_deleter();
      (void)d.release_context();  // counted_delete frees it with del from now on
      {
        std::lock_guard<std::mutex> g(mu_);
        simple_.emplace(data, Entry{n, del});
        add(static_cast<int64_t>(n));
      }
      return c10::DataPtr(data, data, &counted_delete, dev);
    }
    // Any other allocator's: a context that owns the original pointer and its size.
    auto *w = new Wrapped{std::move(d), n};
    {
      std::lock_guard<std::mutex> g(mu_);
      add(static_cast<int64_t>(n));
    }
    return c10::DataPtr(data, w, &wrapped_delete, dev);
  }

  c10::DeleterFnPtr raw_deleter() const override { return &counted_delete; }

  void copy_data(void *dest, const void *src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  void stats(int64_t out[3]) {
    std::lock_guard<std::mutex> g(mu_);
    out[0] = current_;
    out[1] = peak_;
    out[2] = count_;
  }

  void reset_peak() {
    std::lock_guard<std::mutex> g(mu_);
    peak_ = current_;
  }

 private:
  struct Entry {
    size_t n;
    c10::DeleterFnPtr del;
  };
  struct Wrapped {
    c10::DataPtr orig;
    size_t n;
  };

  void add(int64_t n) {  // mu_ held
    current_ += n;
    count_++;
    if (current_ > peak_) peak_ = current_;
  }

  static void counted_delete(void *p);
  static void wrapped_delete(void *ctx);

  c10::Allocator *inner_;
  std::mutex mu_;
  std::unordered_map<void *, Entry> simple_;
  int64_t current_ = 0, peak_ = 0, count_ = 0;
};

// The installed allocator lives until the process exits (storages freed during exit
// still reach it), so it is never destroyed.
std::atomic<Counting *> installed{nullptr};
std::mutex install_mu;

void Counting::counted_delete(void *p) {
  Counting *c = installed.load(std::memory_order_acquire);
  c10::DeleterFnPtr del = nullptr;
  {
    std::lock_guard<std::mutex> g(c->mu_);
    auto it = c->simple_.find(p);
    if (it == c->simple_.end()) return;  // not ours: cannot happen, and never free blindly
    del = it->second.del;
    c->current_ -= static_cast<int64_t>(it->second.n);
    c->simple_.erase(it);
  }
  del(p);
}

void Counting::wrapped_delete(void *ctx) {
  auto *w = static_cast<Wrapped *>(ctx);
  Counting *c = installed.load(std::memory_order_acquire);
  {
    std::lock_guard<std::mutex> g(c->mu_);
    c->current_ -= static_cast<int64_t>(w->n);
  }
  delete w;  // frees the storage through the original DataPtr
}

}  // namespace

extern "C" {

void cg_cpumem_install(void) {
  std::lock_guard<std::mutex> g(install_mu);
  if (installed.load()) return;
  auto *c = new Counting(c10::GetCPUAllocator());
  installed.store(c, std::memory_order_release);
  // Above the default's priority 0, so a later registration at 0 does not displace it.
  c10::SetCPUAllocator(c, /*priority=*/100);
}

int cg_cpumem_installed(void) { return installed.load() != nullptr ? 1 : 0; }

void cg_cpumem_stats(int64_t out[3]) {
  Counting *c = installed.load(std::memory_order_acquire);
  if (c == nullptr) {
    out[0] = out[1] = out[2] = 0;
    return;
  }
  c->stats(out);
}

void cg_cpumem_reset_peak(void) {
  Counting *c = installed.load(std::memory_order_acquire);
  if (c != nullptr) c->reset_peak();
}

}  // extern "C"
