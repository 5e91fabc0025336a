// replay.cc: a training step recorded once and replayed (cgotorch.h, "traces"). While a
// thread records, every generated op (ops_gen.cc) and every hand-written entry point a
// step uses appends its call to the thread's trace; a replay makes the same ATen calls
// with the same arguments in the same order, with the step's new inputs, without
// crossing back into Go. What the recorder cannot replay (a read of a value on the host,
// a callback into Go) makes the trace unusable, with the reason.
//
// Tensors are slots: the inputs, then every other tensor in order of first use —
// persistent ones (parameters, buffers, optimizer state, running sums), which the trace
// holds by identity, and temporaries, results of earlier entries, which a replay makes
// anew and drops after their last use, so that only what autograd saved outlives it.
#include <ATen/core/grad_mode.h>
#include <climits>
#include <unordered_map>

#include "internal.h"

namespace {

// The hand-written entry points' numbers, above every ops.tab row's.
enum : int32_t {
  kZeroGrad = 1 << 20,
  kBackward,
  kOptimStep,
  kAccumulate,
  kClipNorm,
  kClipValue,
  kGrad,
  kGradMode,
};

const char *hand_name(int32_t op) {
  switch (op) {
    case kZeroGrad: return "zero_grad";
    case kBackward: return "backward";
    case kOptimStep: return "optimizer step";
    case kAccumulate: return "accumulate";
    case kClipNorm: return "clip_grad_norm_";
    case kClipValue: return "clip_grad_value_";
    case kGrad: return "grad";
    case kGradMode: return "set_grad_enabled";
  }
  return "?";
}

// Failed carries a hand-written entry point's failure out of a replay.
struct Failed {
  cg_status s;
};

void check(cg_status s) {
  if (s.code != CG_OK) throw Failed{s};
}

enum Kind : uint8_t { kInput, kPersistent, kTemp };

// Optim is the optimizer's current hyperparameters, for a replayed optimizer step.
struct Optim {
  int kind, ngroups;
  const double *hyper;
};

}  // namespace

struct cg::Trace {
  struct Entry {
    int32_t op, at;    // its number, its first word
    int32_t rel, nrel;  // the temporaries whose last use it is: releases[rel:rel+nrel]
  };
  std::vector<at::Tensor> slots;
  std::vector<uint8_t> kinds;
  std::vector<int64_t> words;  // the entries' arguments: slots, values (doubles' bits)
  std::vector<Entry> entries;
  std::vector<int32_t> releases;
  std::vector<int32_t> outputs;
  int32_t ninputs = 0;
  std::vector<int64_t> meta;  // per input: dtype, device, requires_grad, dim, sizes
  bool grad_mode = true;
  int64_t step = 0;  // the step counter the trace was recorded at (cg_accumulate's step)
  std::string refused;

  // While recording: the slot of each tensor seen (by TensorImpl: the trace holds every
  // tensor it saw, so no address is reused for another) and each slot's last use.
  std::unordered_map<const c10::TensorImpl *, int32_t> where;
  std::vector<int32_t> last;

  // While replaying: the optimizer's hyperparameters and the step counter, and handles
  // for an entry's list arguments (a fused optimizer kernel has six lists).
  const Optim *optim = nullptr;
  int64_t run_step = 0;
  std::vector<cg_tensor> lists[8];
  int nlists = 0;

  int32_t add(const at::Tensor &t, Kind k) {
    auto s = static_cast<int32_t>(slots.size());
    slots.push_back(t);
    kinds.push_back(k);
    last.push_back(static_cast<int32_t>(entries.size()) - 1);
    if (t.defined()) where[t.unsafeGetTensorImpl()] = s;
    return s;
  }
  int32_t slot_of(cg_tensor h) {
    if (!h) return -1;
    const at::Tensor &t = cg::T(h);
    auto it = t.defined() ? where.find(t.unsafeGetTensorImpl()) : where.end();
    int32_t s = it != where.end() ? it->second : add(t, kPersistent);
    last[s] = static_cast<int32_t>(entries.size()) - 1;
    return s;
  }
  static void input_meta(const at::Tensor &t, std::vector<int64_t> &out) {
    out.clear();
    out.insert(out.end(), {static_cast<int64_t>(t.scalar_type()), t.device().is_cuda() ? 1 : 0, t.device().index(),
                           t.requires_grad() ? 1 : 0, t.dim()});
    out.insert(out.end(), t.sizes().begin(), t.sizes().end());
  }
  // finish ends the recording: each temporary is released after its last use (never an
  // output), and the trace lets go of the temporaries it recorded.
  void finish() {
    for (auto o : outputs) last[o] = INT32_MAX;
    std::vector<std::vector<int32_t>> at_entry(entries.size());
    for (size_t s = 0; s < slots.size(); s++)
      if (kinds[s] == kTemp && last[s] >= 0 && last[s] < static_cast<int32_t>(entries.size()))
        at_entry[last[s]].push_back(static_cast<int32_t>(s));
    for (size_t e = 0; e < entries.size(); e++) {
      entries[e].rel = static_cast<int32_t>(releases.size());
      entries[e].nrel = static_cast<int32_t>(at_entry[e].size());
      releases.insert(releases.end(), at_entry[e].begin(), at_entry[e].end());
    }
    clear();
    where.clear();
    last.clear();
  }
  // clear drops every tensor but the persistent ones.
  void clear() {
    for (size_t s = 0; s < slots.size(); s++)
      if (kinds[s] != kPersistent) slots[s].reset();
  }
  bool same(const Trace &o) const {
    if (ninputs != o.ninputs || meta != o.meta || kinds != o.kinds || words != o.words || outputs != o.outputs ||
        grad_mode != o.grad_mode || entries.size() != o.entries.size())
      return false;
    for (size_t e = 0; e < entries.size(); e++)
      if (entries[e].op != o.entries[e].op || entries[e].at != o.entries[e].at) return false;
    for (size_t s = 0; s < slots.size(); s++)
      if (kinds[s] == kPersistent && !slots[s].is_same(o.slots[s])) return false;
    return true;
  }
  // bind makes xs the inputs, after checking them against the recorded ones.
  void bind(const at::Tensor *xs, int n) {
    TORCH_CHECK(n == ninputs, "replay: ", n, " inputs for a trace of ", ninputs);
    std::vector<int64_t> m, want;
    size_t at = 0;
    for (int i = 0; i < n; i++) {
      input_meta(xs[i], m);
      want.assign(meta.begin() + at, meta.begin() + at + 5 + meta[at + 4]);
      at += want.size();
      TORCH_CHECK(m == want, "replay: input ", i, " is ", xs[i].toString(), xs[i].sizes(),
                  ", not what the trace was recorded with");
      slots[i] = xs[i];
    }
  }
  void replay_hand(int32_t op, cg::Reader &r);
  // run replays the entries once; on a failure it throws, with *failed the entry.
  void run(const Optim *o, int64_t at_step, int32_t *failed) {
    optim = o;
    run_step = at_step;
    at::AutoGradMode mode(grad_mode);
    for (size_t e = 0; e < entries.size(); e++) {
      const Entry &en = entries[e];
      *failed = en.op;
      nlists = 0;
      cg::Reader r(*this, words.data() + en.at);
      if (en.op < kZeroGrad)
        cg::replay_op(en.op, r);
      else
        replay_hand(en.op, r);
      for (int32_t k = en.rel; k < en.rel + en.nrel; k++) slots[releases[k]].reset();
    }
  }
};

constinit thread_local cg::Trace *cg::recording_ = nullptr;

void cg::refuse(const char *why) {
  if (recording_ && recording_->refused.empty()) recording_->refused = why;
}

cg::Rec::Rec(int op) : tr_(*recording_) {
  tr_.entries.push_back({op, static_cast<int32_t>(tr_.words.size()), 0, 0});
}
void cg::Rec::t(cg_tensor h) { tr_.words.push_back(tr_.slot_of(h)); }
void cg::Rec::list(const cg_tensor *hs, int n) {
  tr_.words.push_back(n);
  for (int i = 0; i < n; i++) t(hs[i]);
}
void cg::Rec::list(const int64_t *vs, int n) {
  tr_.words.push_back(n);
  tr_.words.insert(tr_.words.end(), vs, vs + n);
}
void cg::Rec::v(int64_t x) { tr_.words.push_back(x); }
void cg::Rec::v(double x) {
  int64_t w;
  std::memcpy(&w, &x, sizeof w);
  tr_.words.push_back(w);
}
void cg::Rec::out(cg_tensor h) {
  int32_t s = tr_.add(cg::T(h), kTemp);
  tr_.last[s] = static_cast<int32_t>(tr_.entries.size()) - 1;
  tr_.words.push_back(s);
}
void cg::Rec::outs(const cg_tensor *hs, int64_t n) {
  v(n);
  for (int64_t i = 0; i < n; i++) out(hs[i]);
}

cg_tensor cg::Reader::t() {
  int64_t s = *w_++;
  return s < 0 ? 0 : cg::handle(&tr_.slots[s]);
}
const cg_tensor *cg::Reader::tensors(int *n) {
  TORCH_CHECK(tr_.nlists < 8, "replay: an entry with more than eight tensor lists");
  std::vector<cg_tensor> &l = tr_.lists[tr_.nlists++];
  *n = static_cast<int>(*w_++);
  l.resize(*n);
  for (int i = 0; i < *n; i++) l[i] = t();
  return l.data();
}
const int64_t *cg::Reader::ints(int *n) {
  *n = static_cast<int>(*w_++);
  const int64_t *p = w_;
  w_ += *n;
  return p;
}
void cg::Reader::out(at::Tensor t) { tr_.slots[*w_++] = std::move(t); }
void cg::Reader::outs(const std::vector<at::Tensor> &ts) {
  TORCH_CHECK(static_cast<int64_t>(ts.size()) == *w_, "replay: ", ts.size(), " results where the trace has ", *w_);
  w_++;
  for (auto &t : ts) out(t);
}

// replay_hand replays a hand-written entry point by calling it with the recorded
// arguments, so that it runs the same code as in the eager step.
void cg::Trace::replay_hand(int32_t op, cg::Reader &r) {
  switch (op) {
    case kZeroGrad: {
      int n;
      const cg_tensor *ps = r.tensors(&n);
      int none = static_cast<int>(r.i());
      return check(cg_zero_grad(const_cast<cg_tensor *>(ps), n, none));
    }
    case kBackward: {
      cg_tensor t = r.t(), grad = r.t();
      int retain = static_cast<int>(r.i());
      return check(cg_backward(t, grad, retain));
    }
    case kOptimStep: {
      auto kind = static_cast<cg_optimizer>(r.i());
      int ngroups, np, ns;
      const int64_t *sizes = r.ints(&ngroups);
      const cg_tensor *ps = r.tensors(&np);
      const cg_tensor *st = r.tensors(&ns);
      TORCH_CHECK(optim->kind == kind && optim->ngroups == ngroups,
                  "replay: the optimizer step's hyperparameters are missing or of another optimizer");
      std::vector<cg_tensor> before(st, st + ns);
      cg_status s = cg_optim_step(kind, ngroups, sizes, optim->hyper, const_cast<cg_tensor *>(ps),
                                  const_cast<cg_tensor *>(st));
      bool grew = false;
      for (int i = 0; i < ns; i++)
        if (st[i] != before[i]) {  // a state tensor the eager step did not make
          cg_tensor_free(st[i]);
          grew = true;
        }
      check(s);
      TORCH_CHECK(!grew, "replay: the optimizer step made state tensors the recorded step did not");
      return;
    }
    case kAccumulate: {
      cg_tensor acc = r.t();
      int n;
      const cg_tensor *vs = r.tensors(&n);
      double weight = r.d();
      int64_t offset = r.i();
      int flags = static_cast<int>(r.i());
      int64_t step = (flags & CG_ACC_TRACK) ? run_step + offset : 0;
      return check(cg_accumulate(acc, const_cast<cg_tensor *>(vs), n, weight, step, flags));
    }
    case kClipNorm: {
      int n;
      const cg_tensor *ps = r.tensors(&n);
      double max_norm = r.d(), norm_type = r.d();
      cg_result res = cg_clip_grad_norm_tensor(const_cast<cg_tensor *>(ps), n, max_norm, norm_type);
      check(cg_status{res.code, res.msg});
      return r.out(cg::T(res.t));
    }
    case kClipValue: {
      int n;
      const cg_tensor *ps = r.tensors(&n);
      return check(cg_clip_grad_value(const_cast<cg_tensor *>(ps), n, r.d()));
    }
    case kGrad: {
      cg_result res = cg_grad(r.t());
      check(cg_status{res.code, res.msg});
      TORCH_CHECK(res.t, "replay: a gradient the recorded step had is missing");
      return r.out(cg::T(res.t));
    }
    case kGradMode:
      return at::GradMode::set_enabled(r.i() != 0);
  }
  TORCH_CHECK(false, "replay: unknown entry ", op);
}

namespace {

// failure is the status of a replay that failed in entry op.
cg_status failure(int32_t op) {
  cg_status s;
  try {
    throw;
  } catch (const Failed &f) {
    s = f.s;
  } catch (...) {
    s = cg::classify();
  }
  const char *name = op < kZeroGrad ? cg::op_name(op) : hand_name(op);
  std::string msg = std::string(name ? name : "?") + ": " + (s.msg ? reinterpret_cast<const char *>(s.msg) : "");
  cg_free_msg(s.msg);
  return cg::fail(s.code, msg);
}

// keep adopts the trace's outputs into the calling thread's scope and drops the rest.
void keep(cg::Trace &tr, cg_tensor *outs, cg_trace_result *r) {
  cg::Thread &me = cg::self();
  for (size_t i = 0; i < tr.outputs.size(); i++) outs[i] = cg::adopt(me, tr.slots[tr.outputs[i]]);
  r->scope = me.top_slot();
}

}  // namespace

extern "C" {

cg_status cg_trace_begin(const cg_tensor *inputs, int n, int64_t step) {
  CG_TRY TORCH_CHECK(!cg::recording_, "record: this thread is recording already");
  auto *tr = new cg::Trace();
  tr->ninputs = n;
  tr->step = step;
  tr->grad_mode = at::GradMode::is_enabled();
  std::vector<int64_t> m;
  for (int i = 0; i < n; i++) {
    const at::Tensor &x = cg::T(inputs[i]);
    tr->add(x, kInput);
    cg::Trace::input_meta(x, m);
    tr->meta.insert(tr->meta.end(), m.begin(), m.end());
  }
  cg::recording_ = tr;
  return cg::ok();
  CG_CATCH_STATUS
}

cg_status cg_trace_end(const cg_tensor *outputs, int n, cg_trace *out, cg_msg *why) {
  *out = nullptr;
  *why = 0;
  cg::Trace *tr = cg::recording_;
  cg::recording_ = nullptr;
  if (!tr) return cg::fail(CG_ERR_INVALID, "record: this thread is not recording");
  CG_TRY for (int i = 0; i < n; i++) {
    int32_t s = tr->slot_of(outputs[i]);
    TORCH_CHECK(s >= 0, "record: output ", i, " is nil");
    tr->outputs.push_back(s);
  }
  if (tr->refused.empty() && tr->entries.empty()) tr->refused = "the step made no call into libtorch";
  if (!tr->refused.empty()) {
    *why = reinterpret_cast<cg_msg>(cg::dup(tr->refused));
    delete tr;
    return cg::ok();
  }
  tr->finish();
  *out = tr;
  return cg::ok();
  } catch (...) {
    delete tr;
    return cg::classify();
  }
}

void cg_trace_free(cg_trace t) { delete static_cast<cg::Trace *>(t); }

int cg_trace_same(cg_trace a, cg_trace b) {
  return static_cast<cg::Trace *>(a)->same(*static_cast<cg::Trace *>(b)) ? 1 : 0;
}

void cg_trace_run(cg_trace t, const cg_tensor *inputs, int n, int opt_kind, int opt_groups, const double *opt_hyper,
                  int64_t step, cg_tensor *outs, cg_trace_result *r) {
  Optim o{opt_kind, opt_groups, opt_hyper};
  *r = cg_trace_result{CG_OK, 0, 0, 0};
  auto &tr = *static_cast<cg::Trace *>(t);
  int32_t failed = -1;
  try {
    cg::sync_num_threads();
    std::vector<at::Tensor> xs;
    xs.reserve(n);
    for (int i = 0; i < n; i++) xs.push_back(cg::T(inputs[i]));
    tr.bind(xs.data(), n);
    tr.run(&o, step, &failed);
    keep(tr, outs, r);
    r->done = 1;
  } catch (...) {
    cg_status s = failed < 0 ? cg::classify() : failure(failed);
    r->code = s.code;
    r->msg = s.msg;
  }
  tr.clear();
}

void cg_trace_run_batches(cg_trace t, const cg_tensor *fields, int n, cg_tensor order, const int64_t *starts,
                          const int64_t *sizes, int nb, int opt_kind, int opt_groups, const double *opt_hyper,
                          int64_t step, cg_tensor *outs, cg_trace_result *r) {
  Optim o{opt_kind, opt_groups, opt_hyper};
  *r = cg_trace_result{CG_OK, 0, 0, 0};
  auto &tr = *static_cast<cg::Trace *>(t);
  std::vector<at::Tensor> xs(n);
  for (int k = 0; k < nb; k++) {
    int32_t failed = -1;
    try {
      cg::sync_num_threads();
      // A batch is what a resident data.Loader's Next makes: a view of consecutive rows,
      // or the rows the epoch's order names.
      for (int i = 0; i < n; i++) {
        const at::Tensor &f = cg::T(fields[i]);
        xs[i] = order ? at::index_select(f, 0, cg::T(order).narrow(0, starts[k], sizes[k]))
                      : f.narrow(0, starts[k], sizes[k]);
      }
      tr.bind(xs.data(), n);
      tr.run(&o, step + k, &failed);
      if (k == nb - 1) keep(tr, outs, r);
    } catch (...) {
      cg_status s = failed < 0 ? cg::classify() : failure(failed);
      r->code = s.code;
      r->msg = s.msg;
      tr.clear();
      return;
    }
    tr.clear();
    r->done = k + 1;
  }
}

}  // extern "C"

// ---- the hand-written entry points' records ----

void cg::record_zero_grad(const cg_tensor *params, int n, int set_to_none) {
  Rec r(kZeroGrad);
  r.list(params, n);
  r.v(set_to_none);
}

void cg::record_backward(cg_tensor t, cg_tensor grad, int retain) {
  Rec r(kBackward);
  r.t(t);
  r.t(grad);
  r.v(retain);
}

void cg::record_optim_step(int kind, int ngroups, const int64_t *group_sizes, const cg_tensor *params,
                           const cg_tensor *state) {
  Rec r(kOptimStep);
  r.v(kind);
  r.list(group_sizes, ngroups);
  int64_t np = 0;
  for (int g = 0; g < ngroups; g++) np += group_sizes[g];
  r.list(params, static_cast<int>(np));
  r.list(state, static_cast<int>(np * CG_OPT_NSTATE));
}

void cg::record_accumulate(cg_tensor acc, const cg_tensor *values, int n, double weight, int64_t step, int flags) {
  Rec r(kAccumulate);
  r.t(acc);
  r.list(values, n);
  r.v(weight);
  r.v((flags & CG_ACC_TRACK) ? step - recording_->step : int64_t{0});
  r.v(flags);
}

void cg::record_clip_norm(const cg_tensor *params, int n, double max_norm, double norm_type, cg_tensor total) {
  Rec r(kClipNorm);
  r.list(params, n);
  r.v(max_norm);
  r.v(norm_type);
  r.out(total);
}

void cg::record_clip_value(const cg_tensor *params, int n, double clip_value) {
  Rec r(kClipValue);
  r.list(params, n);
  r.v(clip_value);
}

void cg::record_grad(cg_tensor t, cg_tensor grad) {
  if (!grad) return refuse("grad: a tensor without a gradient");
  Rec r(kGrad);
  r.t(t);
  r.out(grad);
}

void cg::record_grad_mode(int on) { Rec(kGradMode).v(on); }
