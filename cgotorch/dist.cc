//go:build !nodist

// dist.cc: torch.distributed's c10d for gotrain: a TCPStore for rendezvous and a Gloo
// or NCCL process group (NCCL's is made in dist_nccl.cc), with the few collectives
// data-parallel training needs.
//
// PyTorch's wheel ships c10d's headers but not gloo's, which ProcessGroupGloo.hpp
// includes; the build uses Debian's libgloo-dev headers for those declarations while
// libtorch_cpu carries its own gloo. gotrain only touches gloo through c10d's API
// (the Options' device list is a vector of shared_ptrs), so the two need not match.
// Build tag nodist swaps in dist_stub.cc where the gloo headers are missing.
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <chrono>
#include <sstream>
#include <thread>
#include "internal.h"

using cg::T;

// Defined in dist_nccl.cc: an NCCL backend, or an exception saying why this build has none.
c10::intrusive_ptr<c10d::Backend> cg_make_nccl_backend(const c10::intrusive_ptr<c10d::Store> &store, int rank,
                                                      int world, std::chrono::milliseconds timeout);

namespace {

struct PG {
  c10::intrusive_ptr<c10d::Store> store;  // the TCPStore itself: rank 0 hosts it
  c10::intrusive_ptr<c10d::Backend> backend;
  int rank, world;
  std::chrono::milliseconds timeout;
  std::string addr;
  int port;
  int64_t failures = 0;  // generation of lost-peer checks
};

PG &P(cg_pg p) { return *static_cast<PG *>(p); }

// run waits for a collective and, when it fails, asks the store which ranks are gone so
// the error names them: every surviving rank posts a key under this failure's
// generation, and ranks that post nothing within a few seconds are reported lost. When
// the store itself is unreachable its host, rank 0, is the one lost.
void run(PG &pg, const c10::intrusive_ptr<c10d::Work> &work, const char *what) {
  try {
    work->wait(pg.timeout);
    return;
  } catch (const std::exception &e) {
    std::string cause = e.what();
    if (auto *ce = dynamic_cast<const c10::Error *>(&e)) cause = ce->what_without_backtrace();
    if (cause.size() > 600) cause = cause.substr(0, 600) + "...";
    std::string gen = "gotrain/failed/" + std::to_string(pg.failures++) + "/";
    std::ostringstream lost;
    try {
      pg.store->set(gen + std::to_string(pg.rank), std::string("1"));
      auto deadline = std::chrono::steady_clock::now() + std::min(pg.timeout, std::chrono::milliseconds(3000));
      std::vector<int> missing;
      for (;;) {
        missing.clear();
        for (int r = 0; r < pg.world; r++)
          if (!pg.store->check({gen + std::to_string(r)})) missing.push_back(r);
        if (missing.empty() || std::chrono::steady_clock::now() >= deadline) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      for (size_t i = 0; i < missing.size(); i++) lost << (i ? ", " : "") << missing[i];
      if (missing.empty()) lost.str("");
    } catch (...) {
      lost.str("0 (the rendezvous store host at " + pg.addr + ":" + std::to_string(pg.port) + " is unreachable)");
    }
    std::ostringstream msg;
    msg << "distributed " << what << " failed on rank " << pg.rank << " of " << pg.world;
    if (!lost.str().empty()) msg << ": lost rank " << lost.str();
    msg << ": " << cause;
    throw std::runtime_error(msg.str());
  }
}

// flat concatenates same-dtype, same-device tensors into one contiguous buffer.
at::Tensor flat(const std::vector<at::Tensor> &ts) {
  std::vector<at::Tensor> views;
  views.reserve(ts.size());
  for (auto &t : ts) views.push_back(t.reshape({-1}));
  return at::cat(views);
}

void unflat(const at::Tensor &buf, std::vector<at::Tensor> &ts) {
  int64_t off = 0;
  for (auto &t : ts) {
    int64_t n = t.numel();
    t.copy_(buf.narrow(0, off, n).view(t.sizes()));
    off += n;
  }
}

// groups splits tensors by (dtype, device), keeping order within a group.
std::vector<std::vector<at::Tensor>> groups(const std::vector<at::Tensor> &ts) {
  std::vector<std::vector<at::Tensor>> gs;
  for (auto &t : ts) {
    bool placed = false;
    for (auto &g : gs)
      if (g[0].scalar_type() == t.scalar_type() && g[0].device() == t.device()) {
        g.push_back(t);
        placed = true;
        break;
      }
    if (!placed) gs.push_back({t});
  }
  return gs;
}

c10d::ReduceOp reduce_op(int op) {
  switch (op) {
    case CG_DIST_SUM: return c10d::ReduceOp::SUM;
    case CG_DIST_MAX: return c10d::ReduceOp::MAX;
    case CG_DIST_MIN: return c10d::ReduceOp::MIN;
  }
  throw std::invalid_argument("unknown reduce op " + std::to_string(op));
}

}  // namespace

extern "C" {

int cg_dist_available(void) { return 1; }

cg_status cg_dist_init(const char *addr, int port, int rank, int world, int64_t timeout_ms, enum cg_dist_backend backend,
                       cg_pg *out) {
  CG_TRY
  if (backend != CG_DIST_GLOO && backend != CG_DIST_NCCL)
    return cg::fail(CG_ERR_INVALID, "unknown process group backend " + std::to_string(backend));
  if (backend == CG_DIST_NCCL) {
    const char *why = nullptr;
    if (!cg_dist_nccl_available(&why)) return cg::fail(CG_ERR_NOT_IMPLEMENTED, why);
  }
  if (world < 1 || rank < 0 || rank >= world)
    return cg::fail(CG_ERR_INVALID, "rank " + std::to_string(rank) + " is not in [0, " + std::to_string(world) + ")");
  if (port <= 0 || port > 65535) return cg::fail(CG_ERR_INVALID, "port " + std::to_string(port) + " is not in 1..65535");
  auto pg = std::make_unique<PG>();
  pg->rank = rank;
  pg->world = world;
  pg->timeout = std::chrono::milliseconds(timeout_ms);
  pg->addr = addr;
  pg->port = port;
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(port);
  so.isServer = rank == 0;
  so.numWorkers = static_cast<size_t>(world);
  so.waitWorkers = true;
  so.timeout = pg->timeout;
  try {
    try {
      pg->store = c10::make_intrusive<c10d::TCPStore>(std::string(addr), so);
    } catch (const c10::Error &e) {
      // libuv is TCPStore's default backend, but some builds (Debian's 2.6) lack it:
      // fall back to the classic socket backend, as Python's TCPStore does on request.
      if (std::string(e.what_without_backtrace()).find("libuv") == std::string::npos) throw;
      so.useLibUV = false;
      pg->store = c10::make_intrusive<c10d::TCPStore>(std::string(addr), so);
    }
  } catch (const std::exception &e) {
    std::string m = e.what();
    if (auto *ce = dynamic_cast<const c10::Error *>(&e)) m = ce->what_without_backtrace();
    std::ostringstream s;
    if (rank == 0)
      s << "rank 0 could not host the rendezvous store on " << addr << ":" << port << " (is the port in use, or the address not local?)";
    else
      s << "rank " << rank << " could not reach the rendezvous store at " << addr << ":" << port << " within " << timeout_ms << " ms";
    s << ": " << m;
    return cg::fail(CG_ERR_OTHER, s.str());
  }
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("gotrain/pg/", pg->store);
  if (backend == CG_DIST_NCCL) {
    pg->backend = cg_make_nccl_backend(prefixed, rank, world, pg->timeout);
    *out = pg.release();
    return cg::ok();
  }
  auto opts = c10d::ProcessGroupGloo::Options::create(pg->timeout);
  // Gloo connects to peers on the address they resolve for MASTER_ADDR's side of the
  // network; the loopback address keeps single-node runs off the hostname lookup.
  std::string a(addr);
  if (a == "127.0.0.1" || a == "localhost")
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  else
    opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  pg->backend = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, world, opts);
  *out = pg.release();
  return cg::ok();
  CG_CATCH_STATUS
}

void cg_dist_free(cg_pg p) {
  try {
    delete static_cast<PG *>(p);
  } catch (...) {
  }
}

cg_status cg_dist_broadcast(cg_pg p, cg_tensor *ts, int n, int root) {
  CG_TRY auto &pg = P(p);
  std::vector<at::Tensor> all;
  for (int i = 0; i < n; i++) all.push_back(T(ts[i]));
  at::NoGradGuard ng;
  for (auto &g : groups(all)) {
    std::vector<at::Tensor> buf{flat(g)};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    o.timeout = pg.timeout;
    run(pg, pg.backend->broadcast(buf, o), "broadcast");
    unflat(buf[0], g);
  }
  return cg::ok();
  CG_CATCH_STATUS
}

cg_status cg_dist_allreduce(cg_pg p, cg_tensor *ts, int n, enum cg_reduce_op op) {
  CG_TRY auto &pg = P(p);
  std::vector<at::Tensor> all;
  for (int i = 0; i < n; i++) all.push_back(T(ts[i]));
  at::NoGradGuard ng;
  for (auto &g : groups(all)) {
    std::vector<at::Tensor> buf{flat(g)};
    c10d::AllreduceOptions o;
    o.reduceOp = reduce_op(op);
    o.timeout = pg.timeout;
    run(pg, pg.backend->allreduce(buf, o), "all-reduce");
    unflat(buf[0], g);
  }
  return cg::ok();
  CG_CATCH_STATUS
}

cg_status cg_dist_allreduce_grads(cg_pg p, cg_tensor *params, int n) {
  CG_TRY auto &pg = P(p);
  std::vector<at::Tensor> grads;
  at::NoGradGuard ng;
  for (int i = 0; i < n; i++) {
    auto &param = T(params[i]);
    // A parameter this rank did not use still takes part, as zeros, so every rank
    // reduces buffers of the same layout.
    if (!param.grad().defined()) param.mutable_grad() = at::zeros_like(param);
    grads.push_back(param.grad());
  }
  for (auto &g : groups(grads)) {
    std::vector<at::Tensor> buf{flat(g)};
    c10d::AllreduceOptions o;
    o.timeout = pg.timeout;
    run(pg, pg.backend->allreduce(buf, o), "gradient all-reduce");
    buf[0].div_(pg.world);
    unflat(buf[0], g);
  }
  return cg::ok();
  CG_CATCH_STATUS
}

cg_status cg_dist_barrier(cg_pg p) {
  CG_TRY auto &pg = P(p);
  c10d::BarrierOptions o;
  o.timeout = pg.timeout;
  run(pg, pg.backend->barrier(o), "barrier");
  return cg::ok();
  CG_CATCH_STATUS
}

}  // extern "C"
