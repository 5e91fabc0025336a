// step.cc: a training step in one crossing (cgotorch.h, "training steps"). It strings
// together what the separate entry points do — cg_zero_grad, cg_chain_forward, the loss
// ops of ops.tab (cg::loss_stage), cg_accumulate, cg_backward, cg_optim_step — with the
// same ATen calls and arguments, so that the two ways of running a step agree to the bit.
#include "internal.h"

namespace {

// failed reports a status from another entry point as the step's failure in phase p.
void failed(cg_step_result *r, const cg_status &st, int32_t p) {
  r->code = st.code;
  r->msg = st.msg;
  r->phase = p;
}

// run_step is one step of s over x and y (cg_step_run's body): the loss is adopted as
// r's tensor when keep is set, otherwise freed when the step ends. On a failure it fills r
// (phase, stage) and returns false.
bool run_step(const cg_step *s, const cg_stage *stages, const int64_t *group_sizes, const void *hyper,
              cg_tensor *params, cg_tensor *state, const at::Tensor &x0, const at::Tensor &y, double sum_weight,
              int64_t sum_step, bool keep, cg_step_result *r) {
  int32_t phase = CG_PHASE_ZERO_GRAD, i = -1;
  try {
    bool optimize = s->optimizer >= 0;
    if (optimize) {
      cg_status st = cg_zero_grad(params, s->nparams, 1);
      if (st.code != CG_OK) return failed(r, st, CG_PHASE_ZERO_GRAD), false;
    }
    phase = CG_PHASE_FORWARD;
    at::Tensor x = x0;
    for (i = 0; i < s->nstages; i++) x = cg::chain_stage(stages[i], x);
    i = -1;
    phase = CG_PHASE_LOSS;
    at::Tensor l_ = cg::loss_stage(s->loss, x, y);
    cg_tensor l = cg::handle(&l_);
    if (keep) {
      cg::Thread &me = cg::self();
      l = cg::adopt(me, std::move(l_));
      r->scope = me.top_slot();
      r->loss = l;
    }
    if (s->sums) {
      phase = CG_PHASE_SUMS;
      cg::accumulate(s->sums, &l, 1, sum_weight, sum_step, s->sum_flags);
    }
    phase = CG_PHASE_BACKWARD;
    cg::T(l).backward(at::Tensor(), std::nullopt);
    if (optimize) {
      cg_status st =
          cg_optim_step(static_cast<cg_optimizer>(s->optimizer), s->ngroups, group_sizes, hyper, params, state);
      if (st.code != CG_OK) return failed(r, st, CG_PHASE_OPTIMIZER), false;
    }
  } catch (...) {
    failed(r, cg::classify(), phase);
    r->stage = i;
    return false;
  }
  return true;
}

}  // namespace

extern "C" {

void cg_step_run(const cg_step *s, const cg_stage *stages, const int64_t *group_sizes, const void *hyper,
                 cg_tensor *params, cg_tensor *state, cg_tensor x, cg_tensor y, cg_step_result *r) {
  *r = cg_step_result{CG_OK, 0, 0, 0, CG_PHASE_NONE, -1, 0};
  cg::sync_num_threads();
  if (run_step(s, stages, group_sizes, hyper, params, state, cg::T(x), cg::T(y), s->sum_weight, s->sum_step, true, r))
    r->done = 1;
}

void cg_steps_run(const cg_step *s, const cg_stage *stages, const int64_t *group_sizes, const void *hyper,
                  cg_tensor *params, cg_tensor *state, const cg_batches *b, const int64_t *starts,
                  const int64_t *sizes, cg_step_result *r) {
  *r = cg_step_result{CG_OK, 0, 0, 0, CG_PHASE_NONE, -1, 0};
  cg::sync_num_threads();
  const at::Tensor &xs = cg::T(b->x), &ys = cg::T(b->y);
  for (int32_t k = 0; k < b->n; k++) {
    at::Tensor x, y;
    try {
      if (b->order) {
        at::Tensor idx = cg::T(b->order).narrow(0, starts[k], sizes[k]);
        x = at::index_select(xs, 0, idx);
        y = at::index_select(ys, 0, idx);
      } else {
        x = xs.narrow(0, starts[k], sizes[k]);
        y = ys.narrow(0, starts[k], sizes[k]);
      }
    } catch (...) {
      failed(r, cg::classify(), CG_PHASE_BATCH);
      return;
    }
    if (!run_step(s, stages, group_sizes, hyper, params, state, x, y, static_cast<double>(sizes[k]),
                  s->sum_step + k, k == b->n - 1, r))
      return;
    r->done = k + 1;
  }
}

}  // extern "C"
