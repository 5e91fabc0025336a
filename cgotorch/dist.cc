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
#include <unistd.h>
#include <chrono>
#include <sstream>
#include <thread>
#include "internal.h"

using cg::T;

// Defined in dist_nccl.cc: an NCCL backend, or an exception saying why this build has none.
// timeout bounds every collective (the watchdog's own limit is set a little above it).
c10::intrusive_ptr<c10d::Backend> cg_make_nccl_backend(const c10::intrusive_ptr<c10d::Store> &store, int rank,
                                                      int world, std::chrono::milliseconds timeout);

namespace {

using ms = std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

struct PG {
  c10::intrusive_ptr<c10d::Store> store;  // the TCPStore itself: rank 0 (or the launcher's agent) hosts it
  c10::intrusive_ptr<c10d::Backend> backend;
  int rank, world;
  bool nccl = false;  // NCCL backend (else Gloo)
  ms timeout;
  std::string addr, prefix;
  int port;
  int64_t failures = 0;  // generation of lost-peer checks
  bool failed = false;   // a collective failed: the backend may be blocked on a lost peer
};

PG &P(cg_pg p) { return *static_cast<PG *>(p); }

// gloo_set_timeout: whether this libtorch's ProcessGroupGloo can change its timeout
// after start-up (2.6's cannot).
template <class G>
constexpr bool gloo_set_timeout = requires(G &g) { g.setTimeout(std::chrono::milliseconds(1)); };

// set_timeout sets g's timeout where this libtorch can (a template, so that the call
// is not compiled where it cannot).
template <class G>
void set_timeout(G &g, std::chrono::milliseconds d) {
  if constexpr (gloo_set_timeout<G>) g.setTimeout(d);
}

std::string message(const std::exception &e) {
  if (auto *ce = dynamic_cast<const c10::Error *>(&e)) return ce->what_without_backtrace();
  return e.what();
}

std::string seconds(ms d) {
  std::ostringstream s;
  s << d.count() / 1000.0 << " s";
  return s.str();
}

std::string rank_list(const std::vector<int> &rs) {
  std::ostringstream s;
  s << (rs.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < rs.size() && i < 32; i++) s << (i ? ", " : "") << rs[i];
  if (rs.size() > 32) s << " and " << rs.size() - 32 << " more";
  return s.str();
}

std::vector<uint8_t> bytes(const std::string &s) { return std::vector<uint8_t>(s.begin(), s.end()); }

std::string text(const std::vector<uint8_t> &b) { return std::string(b.begin(), b.end()); }

// missing_ranks lists the ranks whose arrival key is not in the store.
std::vector<int> missing_ranks(PG &pg, const std::string &k) {
  std::vector<int> missing;
  for (int r = 0; r < pg.world; r++)
    if (!pg.store->check({k + "rank/" + std::to_string(r)})) missing.push_back(r);
  return missing;
}

// arrive is the rendezvous, as torchrun's agents do it over their store: every rank
// claims its rank's key (a second process with the same RANK is refused), counts itself
// in, and the last to arrive opens the gate ("ok") that the others wait on. When rank 0's
// deadline passes first, rank 0 closes the gate instead, with a message naming the ranks
// that never arrived, so that every waiting rank fails with the same message; it keeps
// the store up until they have read it (or for a few seconds).
void arrive(PG &pg, steady::time_point deadline, ms limit) {
  std::string k = pg.prefix + "rdzv/", gate = k + "gate";
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string me = std::string(host) + " pid " + std::to_string(getpid());
  auto got = pg.store->compareSet(k + "rank/" + std::to_string(pg.rank), {}, bytes(me));
  if (got != bytes(me))
    throw std::invalid_argument("rank " + std::to_string(pg.rank) + " arrived twice: " + text(got) +
                                " already joined as rank " + std::to_string(pg.rank) +
                                " (is RANK the same for two processes?)");
  // The gate is decided by compareSet, which the classic TCPStore backend (Debian's 2.6,
  // built without libuv) does not report to waiting clients; so whoever decides it also
  // sets "opened", a plain key that every backend wakes waiters on, and ranks wait on that.
  std::string opened = k + "opened";
  int64_t n = pg.store->add(k + "count", 1);
  if (n == pg.world) {
    pg.store->compareSet(gate, {}, bytes("ok"));
    pg.store->set(opened, bytes("1"));
  }
  auto left = [&](ms extra) { return std::max(ms(1), std::chrono::duration_cast<ms>(deadline - steady::now()) + extra); };
  auto failed = [&](const std::string &v) { return v.rfind("fail:", 0) == 0; };
  std::string where = pg.addr + ":" + std::to_string(pg.port);
  try {
    // Rank 0 decides; the others wait a little longer for its decision.
    pg.store->wait({opened}, left(pg.rank == 0 ? ms(0) : ms(10000)));
  } catch (const std::exception &e) {
    std::vector<int> missing;
    try {
      missing = missing_ranks(pg, k);
    } catch (...) {
      throw std::runtime_error("rank " + std::to_string(pg.rank) + " lost the rendezvous store at " + where +
                               " while waiting for the other ranks (its host, rank 0, exited?): " + message(e));
    }
    std::ostringstream s;
    s << "rendezvous timed out after " << seconds(limit) << " at " << where << ": " << pg.world - missing.size() << " of "
      << pg.world << " ranks arrived; ";
    if (missing.empty())
      s << "every rank arrived but the rendezvous did not complete in time";
    else
      s << rank_list(missing) << " did not arrive (never started, crashed before joining, or cannot reach " << where
        << ")";
    if (pg.rank != 0) throw std::runtime_error(s.str());
    std::string v = text(pg.store->compareSet(gate, {}, bytes("fail:" + s.str())));
    pg.store->set(opened, bytes("1"));
    if (v == "ok") return;  // the last rank arrived just now
    auto linger = steady::now() + ms(3000);
    while (pg.store->add(k + "read", 0) < static_cast<int64_t>(pg.world - missing.size()) - 1 && steady::now() < linger)
      std::this_thread::sleep_for(ms(50));
    throw std::runtime_error(s.str());
  }
  std::string v = text(pg.store->get(gate));
  if (failed(v)) {
    pg.store->add(k + "read", 1);
    throw std::runtime_error(v.substr(5));
  }
}

// run waits for a collective and, when it fails, asks the store which ranks are gone so
// the error names them: every surviving rank posts a key under this failure's
// generation, and ranks that post nothing within a few seconds are reported lost. When
// the store itself is unreachable its host, rank 0, is the one lost.
void run(PG &pg, const c10::intrusive_ptr<c10d::Work> &work, const char *what) {
  try {
    work->wait(pg.timeout);
    return;
  } catch (const std::exception &e) {
    pg.failed = true;
    std::string cause = message(e);
    if (cause.size() > 600) cause = cause.substr(0, 600) + "...";
    std::string gen = pg.prefix + "failed/" + std::to_string(pg.failures++) + "/";
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

// pair_groups splits the indices of ts by (dtype, device), keeping order.
std::vector<std::vector<int>> pair_groups(const std::vector<at::Tensor> &ts) {
  std::vector<std::vector<int>> gs;
  for (int k = 0; k < static_cast<int>(ts.size()); k++) {
    bool placed = false;
    for (auto &g : gs)
      if (ts[g[0]].scalar_type() == ts[k].scalar_type() && ts[g[0]].device() == ts[k].device()) {
        g.push_back(k);
        placed = true;
        break;
      }
    if (!placed) gs.push_back({k});
  }
  return gs;
}

// groups splits tensors by (dtype, device), keeping order within a group.
std::vector<std::vector<at::Tensor>> groups(const std::vector<at::Tensor> &ts) {
  std::vector<std::vector<at::Tensor>> gs;
  for (auto &idx : pair_groups(ts)) {
    gs.emplace_back();
    for (int k : idx) gs.back().push_back(ts[k]);
  }
  return gs;
}

c10d::ReduceOp reduce_op(int op) {
  switch (op) {
    case CG_DIST_SUM: return c10d::ReduceOp::SUM;
    case CG_DIST_MAX: return c10d::ReduceOp::MAX;
    case CG_DIST_MIN: return c10d::ReduceOp::MIN;
    case CG_DIST_AVG: return c10d::ReduceOp::AVG;
  }
  throw std::invalid_argument("unknown reduce op " + std::to_string(op));
}

// wire_op is the op the backend runs for op: Gloo has no average (c10d refuses
// ReduceOp::AVG there), so it sums and the caller divides by the world size.
c10d::ReduceOp wire_op(const PG &pg, int op) {
  if (op == CG_DIST_AVG && !pg.nccl) return c10d::ReduceOp::SUM;
  return reduce_op(op);
}

bool divides_after(const PG &pg, int op) { return op == CG_DIST_AVG && !pg.nccl; }

// The flat collectives' c10d names: libtorch 2.6 has _allgather_base and
// _reduce_scatter_base; newer releases name them all_gather_single and
// reduce_scatter_single and keep the old names as deprecated forwarding aliases. The
// new name is called where it exists (a template, so that the call is not compiled
// where it does not).
template <class B>
constexpr bool has_single = requires(B &b, at::Tensor &t) { b.all_gather_single(t, t); };

template <class B>
c10::intrusive_ptr<c10d::Work> all_gather_flat(B &b, at::Tensor &out, at::Tensor &in, const c10d::AllgatherOptions &o) {
  if constexpr (has_single<B>)
    return b.all_gather_single(out, in, o);
  else
    return b._allgather_base(out, in, o);
}

template <class B>
c10::intrusive_ptr<c10d::Work> reduce_scatter_flat(B &b, at::Tensor &out, at::Tensor &in,
                                                   const c10d::ReduceScatterOptions &o) {
  if constexpr (has_single<B>)
    return b.reduce_scatter_single(out, in, o);
  else
    return b._reduce_scatter_base(out, in, o);
}

std::string shape(const at::Tensor &t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

// pairs reads n (out, in) handles and checks what Go checked too (a caller of the C
// ABI may not have): both defined, the same dtype and device, and out's size world
// times in's (all-gather) or in's world times out's (reduce-scatter).
void pairs(const PG &pg, cg_tensor *outs, cg_tensor *ins, int n, bool gather, std::vector<at::Tensor> &o,
           std::vector<at::Tensor> &i) {
  const char *what = gather ? "all-gather" : "reduce-scatter";
  for (int k = 0; k < n; k++) {
    if (!outs[k] || !ins[k] || !T(outs[k]).defined() || !T(ins[k]).defined())
      throw std::invalid_argument(std::string(what) + ": pair " + std::to_string(k) + " has an undefined tensor");
    auto &a = T(outs[k]), &b = T(ins[k]);
    if (a.scalar_type() != b.scalar_type() || a.device() != b.device())
      throw std::invalid_argument(std::string(what) + ": pair " + std::to_string(k) + ": output is " +
                                  std::string(c10::toString(a.scalar_type())) + " on " + a.device().str() +
                                  ", input is " + c10::toString(b.scalar_type()) + " on " + b.device().str());
    int64_t big = gather ? a.numel() : b.numel(), small = gather ? b.numel() : a.numel();
    if (big != small * pg.world)
      throw std::invalid_argument(std::string(what) + ": pair " + std::to_string(k) + ": output " + shape(a) + " (" +
                                  std::to_string(a.numel()) + " elements) and input " + shape(b) + " (" +
                                  std::to_string(b.numel()) + ") do not match: " +
                                  (gather ? "output" : "input") + " must have world size " +
                                  std::to_string(pg.world) + " times the " + (gather ? "input" : "output") + "'s");
    o.push_back(a);
    i.push_back(b);
  }
}

// fill copies src (out's numel elements, any layout) into out.
void fill(at::Tensor &out, const at::Tensor &src) {
  if (out.is_contiguous())
    out.view(src.sizes()).copy_(src);
  else
    out.copy_(src.reshape(out.sizes()));
}

// fill_group fills the outputs o[k] of group g from consecutive slices of src along
// dim, slice k having sizes[k].numel() elements.
void fill_group(std::vector<at::Tensor> &o, const std::vector<at::Tensor> &sizes, const std::vector<int> &g,
                const at::Tensor &src, int dim) {
  int64_t off = 0;
  for (int k : g) {
    int64_t m = sizes[k].numel();
    fill(o[k], src.narrow(dim, off, m));
    off += m;
  }
}

// rank_major lays group g's inputs out as [world, total]: row r holds chunk r of every
// input (chunk size its output's numel), one after another.
at::Tensor rank_major(const PG &pg, const std::vector<at::Tensor> &o, const std::vector<at::Tensor> &i,
                      const std::vector<int> &g) {
  std::vector<at::Tensor> parts;
  for (int k : g) parts.push_back(i[k].reshape({pg.world, o[k].numel()}));
  return at::cat(parts, 1);
}

// allreduce_groups all-reduces ts with op through one flat buffer per (dtype, device)
// group, dividing the result by the world size when div is set.
void allreduce_groups(PG &pg, const std::vector<at::Tensor> &ts, c10d::ReduceOp op, bool div, const char *what) {
  at::NoGradGuard ng;
  for (auto &g : groups(ts)) {
    std::vector<at::Tensor> buf{flat(g)};
    c10d::AllreduceOptions o;
    o.reduceOp = op;
    o.timeout = pg.timeout;
    run(pg, pg.backend->allreduce(buf, o), what);
    if (div) buf[0].div_(pg.world);
    unflat(buf[0], g);
  }
}

}  // namespace

extern "C" {

int cg_dist_available(void) { return 1; }

cg_status cg_dist_init(const struct cg_dist_opts *o, cg_pg *out) {
  CG_TRY
  if (!o || !o->addr) return cg::fail(CG_ERR_INVALID, "no process group options");
  int rank = o->rank, world = o->world, port = o->port;
  if (o->backend != CG_DIST_GLOO && o->backend != CG_DIST_NCCL)
    return cg::fail(CG_ERR_INVALID, "unknown process group backend " + std::to_string(o->backend));
  if (o->backend == CG_DIST_NCCL) {
    const char *why = nullptr;
    if (!cg_dist_nccl_available(&why)) return cg::fail(CG_ERR_NOT_IMPLEMENTED, why);
  }
  if (world < 1 || rank < 0 || rank >= world)
    return cg::fail(CG_ERR_INVALID, "rank " + std::to_string(rank) + " is not in [0, " + std::to_string(world) + ")");
  if (port <= 0 || port > 65535) return cg::fail(CG_ERR_INVALID, "port " + std::to_string(port) + " is not in 1..65535");
  if (o->timeout_ms <= 0 || o->rdzv_timeout_ms <= 0) return cg::fail(CG_ERR_INVALID, "timeouts must be > 0");
  ms rdzv(o->rdzv_timeout_ms);
  auto deadline = steady::now() + rdzv;
  auto pg = std::make_unique<PG>();
  pg->rank = rank;
  pg->world = world;
  pg->timeout = ms(o->timeout_ms);
  pg->addr = o->addr;
  pg->port = port;
  pg->prefix = std::string("gotrain/") + (o->key_prefix ? o->key_prefix : "");
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(port);
  so.isServer = rank == 0 && !o->agent_store;
  // gotrain counts the ranks in itself (arrive), which can name the missing ones;
  // TCPStore's own wait for workers can only count them.
  so.waitWorkers = false;
  so.timeout = rdzv;  // a client retries connecting until then; store reads and waits too
  try {
    try {
      pg->store = c10::make_intrusive<c10d::TCPStore>(pg->addr, so);
    } catch (const c10::Error &e) {
      // libuv is TCPStore's default backend, but some builds (Debian's 2.6) lack it:
      // fall back to the classic socket backend, as Python's TCPStore does on request.
      if (std::string(e.what_without_backtrace()).find("libuv") == std::string::npos) throw;
      so.useLibUV = false;
      pg->store = c10::make_intrusive<c10d::TCPStore>(pg->addr, so);
    }
  } catch (const std::exception &e) {
    std::ostringstream s;
    if (so.isServer)
      s << "rank 0 could not host the rendezvous store on " << pg->addr << ":" << port
        << " (is the port in use, or the address not local?)";
    else if (o->agent_store)
      s << "rank " << rank << " could not reach the launcher's rendezvous store at " << pg->addr << ":" << port
        << " within " << seconds(rdzv);
    else
      s << "rank " << rank << " could not reach the rendezvous store at " << pg->addr << ":" << port << " within "
        << seconds(rdzv) << ": rank 0, which hosts it, did not arrive (never started, crashed, or MASTER_ADDR/MASTER_PORT are wrong)";
    s << ": " << message(e);
    return cg::fail(CG_ERR_OTHER, s.str());
  }
  arrive(*pg, deadline, rdzv);
  // The process group's start-up (its connections to every peer) has what is left of
  // the rendezvous budget; collectives then get their own timeout, per operation.
  ms left = std::max(ms(1000), std::chrono::duration_cast<ms>(deadline - steady::now()));
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(pg->prefix + "pg/", pg->store);
  try {
    if (o->backend == CG_DIST_NCCL) {
      pg->backend = cg_make_nccl_backend(prefixed, rank, world, pg->timeout);
      pg->nccl = true;
    } else {
      // Gloo's context timeout bounds its start-up and, in libtorch without
      // ProcessGroupGloo::setTimeout (2.6), every receive of every collective too,
      // whatever the collective's own timeout says: there the start-up gets the
      // collective timeout, lest a peer's late collective fail at what is left of the
      // rendezvous budget.
      auto opts = c10d::ProcessGroupGloo::Options::create(gloo_set_timeout<c10d::ProcessGroupGloo> ? left : std::max(left, pg->timeout));
      // Gloo connects to peers on the address they resolve for MASTER_ADDR's side of the
      // network; the loopback address keeps single-node runs off the hostname lookup.
      if (pg->addr == "127.0.0.1" || pg->addr == "localhost")
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      else
        opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, world, opts);
      set_timeout(*gloo, pg->timeout);
      pg->backend = gloo;
    }
  } catch (const std::exception &e) {
    std::string m = message(e);
    if (m.size() > 600) m = m.substr(0, 600) + "...";
    std::string what = o->backend == CG_DIST_NCCL ? "NCCL" : "Gloo";
    return cg::fail(CG_ERR_OTHER, "rank " + std::to_string(rank) + ": starting the " + what + " process group (within " +
                                      seconds(rdzv) + " of the rendezvous) failed: " + m);
  }
  *out = pg.release();
  return cg::ok();
  CG_CATCH_STATUS
}

void cg_dist_free(cg_pg p) {
  if (!p || P(p).failed) return;  // see cgotorch.h: a failed group is left to the exit
  try {
    delete static_cast<PG *>(p);
  } catch (...) {
  }
}

cg_status cg_dist_broadcast(cg_pg p, cg_tensor *ts, int n, int root) {
  CG_TRY if (cg::recording()) cg::refuse("collectives are not recorded");
  auto &pg = P(p);
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
  CG_TRY if (cg::recording()) cg::refuse("collectives are not recorded");
  auto &pg = P(p);
  std::vector<at::Tensor> all;
  for (int i = 0; i < n; i++) all.push_back(T(ts[i]));
  allreduce_groups(pg, all, wire_op(pg, op), divides_after(pg, op), "all-reduce");
  return cg::ok();
  CG_CATCH_STATUS
}

cg_status cg_dist_allreduce_grads(cg_pg p, cg_tensor *params, int n) {
  CG_TRY if (cg::recording()) cg::refuse("collectives are not recorded");
  auto &pg = P(p);
  std::vector<at::Tensor> grads;
  at::NoGradGuard ng;
  for (int i = 0; i < n; i++) {
    auto &param = T(params[i]);
    // A parameter this rank did not use still takes part, as zeros, so every rank
    // reduces buffers of the same layout.
    if (!param.grad().defined()) param.mutable_grad() = at::zeros_like(param);
    grads.push_back(param.grad());
  }
  allreduce_groups(pg, grads, c10d::ReduceOp::SUM, true, "gradient all-reduce");
  return cg::ok();
  CG_CATCH_STATUS
}

cg_status cg_dist_allgather(cg_pg p, cg_tensor *outs, cg_tensor *ins, int n) {
  CG_TRY if (cg::recording()) cg::refuse("collectives are not recorded");
  auto &pg = P(p);
  std::vector<at::Tensor> o, i;
  pairs(pg, outs, ins, n, true, o, i);
  at::NoGradGuard ng;
  c10d::AllgatherOptions opts;
  opts.timeout = pg.timeout;
  for (auto &g : pair_groups(i)) {
    int64_t total = 0;
    for (int k : g) total += i[k].numel();
    if (total == 0) continue;
    if (g.size() == 1 && o[g[0]].is_contiguous()) {
      // Straight into the caller's buffer.
      at::Tensor out = o[g[0]].view({-1}), in = i[g[0]].contiguous().view({-1});
      run(pg, all_gather_flat(*pg.backend, out, in, opts), "all-gather");
      continue;
    }
    std::vector<at::Tensor> parts;
    for (int k : g) parts.push_back(i[k].reshape({-1}));
    at::Tensor in = g.size() == 1 ? parts[0].contiguous() : at::cat(parts);
    at::Tensor out = at::empty({pg.world * total}, in.options());
    run(pg, all_gather_flat(*pg.backend, out, in, opts), "all-gather");
    // out is rank-major: row r holds rank r's inputs, one after another.
    fill_group(o, i, g, out.view({pg.world, total}), 1);
  }
  return cg::ok();
  CG_CATCH_STATUS
}

cg_status cg_dist_reduce_scatter(cg_pg p, cg_tensor *outs, cg_tensor *ins, int n, enum cg_reduce_op op) {
  CG_TRY if (cg::recording()) cg::refuse("collectives are not recorded");
  auto &pg = P(p);
  std::vector<at::Tensor> o, i;
  pairs(pg, outs, ins, n, false, o, i);
  at::NoGradGuard ng;
  for (auto &g : pair_groups(i)) {
    int64_t total = 0;
    for (int k : g) total += o[k].numel();
    if (total == 0) continue;
    at::Tensor mine;  // this rank's reduced chunk of the group, total elements
    bool direct = false;
    if (pg.nccl) {
      c10d::ReduceScatterOptions opts;
      opts.reduceOp = reduce_op(op);
      opts.timeout = pg.timeout;
      at::Tensor in, out;
      if (g.size() == 1) {
        in = i[g[0]].contiguous().view({-1});
        direct = o[g[0]].is_contiguous();
        out = direct ? o[g[0]].view({-1}) : at::empty({total}, in.options());
      } else {
        in = rank_major(pg, o, i, g).view({-1});
        out = at::empty({total}, in.options());
      }
      run(pg, reduce_scatter_flat(*pg.backend, out, in, opts), "reduce-scatter");
      mine = out;
    } else {
      // Gloo: all-reduce a rank-major copy in place (the caller's inputs stay as they
      // were), then keep this rank's row.
      at::Tensor buf = g.size() == 1 ? i[g[0]].reshape({pg.world, total}).clone(at::MemoryFormat::Contiguous)
                                     : rank_major(pg, o, i, g);
      std::vector<at::Tensor> bufs{buf.view({-1})};
      c10d::AllreduceOptions opts;
      opts.reduceOp = wire_op(pg, op);
      opts.timeout = pg.timeout;
      run(pg, pg.backend->allreduce(bufs, opts), "reduce-scatter (all-reduce)");
      mine = buf.select(0, pg.rank);
    }
    if (divides_after(pg, op)) mine.div_(pg.world);
    if (!direct) fill_group(o, o, g, mine, 0);
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
