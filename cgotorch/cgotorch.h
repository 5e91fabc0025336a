// cgotorch.h: gotrain's C ABI over libtorch.
//
// Handles are opaque references to heap-allocated C++ objects. A cg_tensor is an
// at::Tensor* carried as an integer: it never points into Go memory, and as an integer cgo
// does not pointer-check it on every call, nor does Go's collector scan it.
// The table-driven ops are declared in ops_gen.h, generated from ops.tab.
// Every entry point catches every C++ exception and reports it in-band: the returned
// status (or the status inside a result struct; the generated ops write theirs through
// their last parameter) carries a code and a malloc'd message without the C++
// backtrace, which the caller frees with cg_free_msg. There is no
// thread-local "last error".
#ifndef GOTRAIN_CGOTORCH_H
#define GOTRAIN_CGOTORCH_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uintptr_t cg_tensor;
// cg_msg is a failure's message: a malloc'd C string carried as an integer, so that the
// status and result structs hold no pointer and cgo passes a pointer to one (the
// generated ops' out-parameter) without checking it on every call.
typedef uintptr_t cg_msg;
typedef void *cg_module;

// The failure classes of a status.
enum cg_code {
  CG_OK = 0,
  CG_ERR_OOM = 1,
  CG_ERR_INVALID = 2,
  CG_ERR_NOT_IMPLEMENTED = 3,
  CG_ERR_OTHER = 4,
};

// Device types of the C ABI (device indices are plain ints; -1 is "the current one").
enum cg_device_type { CG_DEVICE_CPU = 0, CG_DEVICE_CUDA = 1 };

typedef struct {
  int32_t code;
  cg_msg msg;
} cg_status;

// A result carries new tensor handles. Handles a result returns are adopted by the
// calling thread's innermost open scope, whose slot is in scope (0: no scope open; the
// caller owns them). Out-parameters of hand-written functions are never adopted.
typedef struct {
  int32_t code;
  int32_t scope;
  cg_msg msg;
  cg_tensor t;
} cg_result;

typedef struct {
  int32_t code;
  int32_t scope;
  cg_msg msg;
  cg_tensor t0, t1;
} cg_result2;

// cg_results holds n handles in a malloc'd array the caller frees with cg_free_handles.
typedef struct {
  int32_t code;
  int32_t scope;
  cg_msg msg;
  int64_t n;
  cg_tensor *ts;
} cg_results;

void cg_free_msg(cg_msg msg);
void cg_free_handles(cg_tensor *ts);
// cg_live_handles is the number of tensor handles made and not yet freed, on all threads.
int64_t cg_live_handles(void);

// ---- scopes ----
// A scope is a per-thread frame of owned handles, named by a slot number (> 0) the Go side
// chooses. Every handle a cg_result returns while a frame is open joins the innermost
// one; closing it deletes them all in one call.
cg_status cg_scope_open(int32_t slot);
// cg_scope_close pops the calling thread's innermost frame, which must be slot, and
// deletes its handles.
cg_status cg_scope_close(int32_t slot);
// cg_scope_reset deletes the handles of the calling thread's innermost frame, which must
// be slot, and keeps the frame open: a loop's close and reopen between steps, in one call.
cg_status cg_scope_reset(int32_t slot);
// cg_scope_free deletes t, owned by frame slot of this thread (slot 0: by nobody).
cg_status cg_scope_free(cg_tensor t, int32_t slot);
// cg_scope_move moves t from frame slot to the frame under it (*now is its slot), or out
// of every frame when slot is outermost (*now = 0).
cg_status cg_scope_move(cg_tensor t, int32_t slot, int32_t *now);
// cg_scope_disown takes t out of frame slot: the caller owns it.
cg_status cg_scope_disown(cg_tensor t, int32_t slot);

// ---- versions, threads, seeding, determinism ----
const char *cg_torch_version(void);  // static string, e.g. "2.14.1"
cg_status cg_set_num_threads(int n);
int cg_get_num_threads(void);
cg_status cg_manual_seed(uint64_t seed);
cg_status cg_set_deterministic(int on);
// RNG state of the default generator of a device, as the uint8 tensor
// torch.get_rng_state / torch.cuda.get_rng_state return.
cg_result cg_get_rng_state(int device_type, int device_index);
cg_status cg_set_rng_state(int device_type, int device_index, cg_tensor state);
cg_status cg_show_config(char **out);
int cg_cuda_kernels_registered(void);

// ---- tensor lifetime and metadata ----
void cg_tensor_free(cg_tensor t);
cg_result cg_tensor_shallow_clone(cg_tensor t);
int cg_tensor_dim(cg_tensor t);
void cg_tensor_sizes(cg_tensor t, int64_t *out);
void cg_tensor_strides(cg_tensor t, int64_t *out);
int64_t cg_tensor_numel(cg_tensor t);
int cg_tensor_dtype(cg_tensor t);
void cg_tensor_device(cg_tensor t, int *type, int *index);
int cg_tensor_requires_grad(cg_tensor t);
int cg_tensor_is_contiguous(cg_tensor t);
void *cg_tensor_data_ptr(cg_tensor t);
int64_t cg_tensor_storage_offset(cg_tensor t);

// ---- creation from and copies to host memory ----
// dtype uses gotrain's DType numbering (ScalarType values).
cg_result cg_from_blob(const void *data, const int64_t *shape, int ndim, int dtype, int pinned);
cg_result cg_from_blob_strided(const void *data, const int64_t *shape, const int64_t *strides, int ndim, int dtype);
cg_status cg_randperm_seeded(int64_t n, uint64_t seed, int64_t *out);
cg_status cg_copy_to_host(cg_tensor t, void *dst, int64_t nbytes);
cg_status cg_item(cg_tensor t, double *d, int64_t *i);
// cg_tensor_set_data is `t.data = src`: t keeps its identity (autograd, optimizers, module
// slots) and takes src's storage, device and dtype. nn.ToDevice moves modules with it.
cg_status cg_tensor_set_data(cg_tensor t, cg_tensor src);

// ---- autograd ----
cg_status cg_set_requires_grad(cg_tensor t, int on);
cg_status cg_backward(cg_tensor t, cg_tensor grad, int retain_graph);
cg_result cg_grad(cg_tensor t);  // t is NULL when the gradient is undefined
cg_status cg_set_grad(cg_tensor t, cg_tensor grad);  // grad NULL clears it
int cg_grad_enabled(void);
void cg_set_grad_enabled(int on);

// ---- CUDA ----
int cg_cuda_available(void);
int cg_cuda_device_count(void);
cg_status cg_cuda_device_name(int device, char *buf, int n);
cg_status cg_cuda_capability(int device, int *major, int *minor);
cg_status cg_cuda_total_memory(int device, int64_t *bytes);
// cg_cuda_set_device makes device the current CUDA device of the calling thread, where
// kernels and NCCL communicators without an explicit device go.
cg_status cg_cuda_set_device(int device);
cg_status cg_cuda_synchronize(int device);
cg_status cg_cuda_memory_stats(int device, int64_t *allocated, int64_t *reserved, int64_t *peak);
cg_status cg_cuda_empty_cache(void);
cg_status cg_cuda_reset_peak(int device);
int cg_cudnn_version(void);
int cg_cuda_runtime_version(void);

#ifdef __cplusplus
}
#endif
#endif

// ==== TorchScript (jit.cc) ====
// Modules saved by Python's torch.jit.save. A cg_module is a torch::jit::Module*.
#ifndef GOTRAIN_CGOTORCH_JIT_H
#define GOTRAIN_CGOTORCH_JIT_H
#ifdef __cplusplus
extern "C" {
#endif

// cg_named_tensors lists a module's parameters (kind 0) and buffers (kind 1) in
// state_dict order. The tensors are new handles the caller owns; cg_named_tensors_free
// frees the names and arrays, not the handles.
typedef struct {
  int64_t n;
  char **names;
  cg_tensor *tensors;
  int32_t *kinds;
} cg_named_tensors;

cg_status cg_jit_load(const char *path, int device_type, int device_index, cg_module *out);
void cg_jit_free(cg_module m);
cg_result cg_jit_forward(cg_module m, cg_tensor x);
cg_status cg_jit_train(cg_module m, int on);
int cg_jit_is_training(cg_module m);
cg_status cg_jit_save(cg_module m, const char *path);
cg_status cg_jit_named_tensors(cg_module m, cg_named_tensors *out);
void cg_named_tensors_free(cg_named_tensors *nt);
#ifdef __cplusplus
}
#endif
#endif

// ==== optimizers and AMP (optim.cc, amp.cc) ====
#ifndef GOTRAIN_CGOTORCH_OPTIM_H
#define GOTRAIN_CGOTORCH_OPTIM_H
#ifdef __cplusplus
extern "C" {
#endif

// Optimizer algorithms, in their default (foreach) form; the fused forms are Go over
// ATen's _fused_* ops (torch/optim/fused.go). A group's hyperparameters are
// CG_OPT_NHYPER doubles: the values of its param-group keys (PyTorch's state_dict names)
// in the order torch.OptimizerKeys lists for the kind (torch/kernels.go), bools as 0 or
// 1, "betas" as two values, the rest zero.
enum cg_optimizer { CG_OPT_SGD = 0, CG_OPT_ADAM = 1, CG_OPT_RMSPROP = 2, CG_OPT_ADAGRAD = 3 };
enum { CG_OPT_NHYPER = 8 };
// CG_OPT_NSTATE state slots per parameter: SGD momentum_buffer; ADAM step, exp_avg,
// exp_avg_sq, max_exp_avg_sq; RMSPROP step, square_avg, momentum_buffer, grad_avg; ADAGRAD
// step, sum.
enum { CG_OPT_NSTATE = 4 };
// cg_optim_step runs one step of algorithm kind over every group: group g is the next
// group_sizes[g] params, with hyper[g*CG_OPT_NHYPER:(g+1)*CG_OPT_NHYPER].
// state[i*CG_OPT_NSTATE+k] is state tensor k of param i; NULL slots the step needs are
// filled with new handles the caller owns (never adopted by a scope). Params without a
// gradient are skipped.
cg_status cg_optim_step(enum cg_optimizer kind, int ngroups, const int64_t *group_sizes, const double *hyper,
                        cg_tensor *params, cg_tensor *state);
cg_status cg_zero_grad(cg_tensor *params, int n, int set_to_none);
// cg_clip_grad_norm is clip_grad_norm_; total_norm receives the pre-clip norm.
// cg_clip_grad_norm_tensor is the same returning the norm as a 0-dim tensor on the
// gradients' device, so that clipping needs no device-to-host read.
cg_status cg_clip_grad_norm(cg_tensor *params, int n, double max_norm, double norm_type, int error_if_nonfinite, double *total_norm);
cg_result cg_clip_grad_norm_tensor(cg_tensor *params, int n, double max_norm, double norm_type);
cg_status cg_clip_grad_value(cg_tensor *params, int n, double clip_value);
// cg_accumulate adds weight * values[i] to acc[i], for n one-element values on acc's
// device; acc is a contiguous float64 vector. With CG_ACC_TRACK, acc[n] becomes values[0]
// and acc[n+1] becomes min(acc[n+1], step) when values[0] is not finite; with
// CG_ACC_SKIP_NONFINITE a non-finite value adds nothing. On the CPU the sums are plain
// arithmetic; elsewhere (or with CG_ACC_ATEN) they are ATen ops queued on the device, so
// no device-to-host read happens.
enum cg_accumulate_flag { CG_ACC_TRACK = 1, CG_ACC_SKIP_NONFINITE = 2, CG_ACC_ATEN = 4 };
cg_status cg_accumulate(cg_tensor acc, cg_tensor *values, int n, double weight, int64_t step, int flags);
// Autocast for a device type: enter returns the previous settings for exit.
cg_status cg_autocast_enter(int device_type, int dtype, int *prev_enabled, int *prev_dtype, int *prev_cache);
cg_status cg_autocast_exit(int device_type, int prev_enabled, int prev_dtype, int prev_cache);
// cg_amp_unscale multiplies the params' gradients by 1/scale and returns a new float32
// found_inf tensor on the scale's device (non-zero when a gradient was inf or NaN), a
// handle the caller owns.
cg_status cg_amp_unscale(cg_tensor *params, int n, cg_tensor scale, cg_tensor *found_inf);
// cg_amp_update_scale is _amp_update_scale_ with the sum of the found_inf tensors.
cg_status cg_amp_update_scale(cg_tensor scale, cg_tensor growth_tracker, cg_tensor *found_infs, int n, double growth, double backoff, int64_t interval);

#ifdef __cplusplus
}
#endif
#endif

// ==== distributed (dist.cc; dist_stub.cc with build tag nodist) ====
// torch.distributed's c10d: a TCPStore rendezvous (rank 0 hosts it at addr:port) and a
// Gloo or NCCL process group (dist_nccl.cc). A cg_pg owns both. Collectives block until done or until the
// timeout; a failure's message names the ranks that were lost when the store can tell.
#ifndef GOTRAIN_CGOTORCH_DIST_H
#define GOTRAIN_CGOTORCH_DIST_H
#ifdef __cplusplus
extern "C" {
#endif

typedef void *cg_pg;
// CG_DIST_AVG is a sum divided by the world size: NCCL's own average, a sum and a division
// under Gloo (which has no average); floating-point tensors only.
enum cg_reduce_op { CG_DIST_SUM = 0, CG_DIST_MAX = 1, CG_DIST_MIN = 2, CG_DIST_AVG = 3 };
enum cg_dist_backend { CG_DIST_GLOO = 0, CG_DIST_NCCL = 1 };

int cg_dist_available(void);  // 0 in a nodist build
// cg_dist_nccl_available: 1 when this build can make NCCL process groups (a CUDA build
// compiled with NCCL's and CUDA's headers), else 0 and *why says what is missing
// (static storage; may be NULL).
int cg_dist_nccl_available(const char **why);
// cg_dist_opts says which process group cg_dist_init joins. rdzv_timeout_ms bounds the
// rendezvous (every rank connects to the store and posts its arrival) and the process
// group's start-up; timeout_ms bounds every collective. agent_store: a launcher (torchrun's
// agent) already serves the store at addr:port, so rank 0 connects as a client too.
// key_prefix keeps one launch attempt's keys apart from another's on a shared store.
struct cg_dist_opts {
  const char *addr;
  int port, rank, world;
  int64_t timeout_ms, rdzv_timeout_ms;
  enum cg_dist_backend backend;
  int agent_store;
  const char *key_prefix;
};
cg_status cg_dist_init(const struct cg_dist_opts *opts, cg_pg *out);
// cg_dist_free destroys the process group and closes the store; a group whose collective
// failed is only released (its backend may still be blocked on the lost peer, and the
// process is about to end).
void cg_dist_free(cg_pg pg);
// cg_dist_broadcast copies root's tensors into every rank's, in place (coalesced by dtype).
cg_status cg_dist_broadcast(cg_pg pg, cg_tensor *ts, int n, int root);
// cg_dist_allreduce reduces the tensors across ranks in place (coalesced by dtype).
cg_status cg_dist_allreduce(cg_pg pg, cg_tensor *ts, int n, enum cg_reduce_op op);
// cg_dist_allreduce_grads averages the params' gradients across ranks in one flattened
// all-reduce per dtype (one bucket); an undefined gradient takes part as zeros.
cg_status cg_dist_allreduce_grads(cg_pg pg, cg_tensor *params, int n);
cg_status cg_dist_barrier(cg_pg pg);
// cg_dist_allgather gathers n (out, in) pairs: outs[i] (world*numel(ins[i]) elements, any
// shape) receives every rank's ins[i], flattened, in rank order. Pairs are grouped by
// (dtype, device); a group of one pair with a contiguous out is gathered straight into
// it, a larger group through one flat buffer (its ins concatenated, one collective, then
// copied out), as FSDP2 gathers a unit.
cg_status cg_dist_allgather(cg_pg pg, cg_tensor *outs, cg_tensor *ins, int n);
// cg_dist_reduce_scatter reduces n (out, in) pairs across ranks and leaves this rank's
// chunk in each out: ins[i] (world*numel(outs[i]) elements) is split into world equal
// chunks in flattened order and outs[i] receives chunk `rank` of the reduction. Grouped
// as cg_dist_allgather, one collective per group over a rank-major flat buffer. NCCL
// reduce-scatters; Gloo has no reduce-scatter (c10d's is an all-reduce of a copy and a
// chunk), so under Gloo the group's flat buffer is all-reduced in place and chunked:
// twice the traffic of a reduce-scatter and a full-size temporary.
cg_status cg_dist_reduce_scatter(cg_pg pg, cg_tensor *outs, cg_tensor *ins, int n, enum cg_reduce_op op);

#ifdef __cplusplus
}
#endif
#endif

// ==== traces (replay.cc) ====
// A trace is a training step's calls into libtorch recorded once and replayed for the
// following steps, one call a step (or a run of steps), with no crossing back into Go.
// While a thread records, every op of ops.tab and the entry points a step uses
// (cg_zero_grad, cg_backward, cg_optim_step, cg_accumulate, the clipping ones, cg_grad,
// cg_set_grad_enabled) append their calls; an entry point that cannot be replayed (a
// read of a value on the host, a callback into Go, a change of thread or autograd state
// the trace would not repeat) makes it unusable, with the reason. Tensors the step did
// not make are held by identity (parameters, buffers, optimizer state); those it made are
// made anew by each replay, which releases them after their last use.
#ifndef GOTRAIN_CGOTORCH_TRACE_H
#define GOTRAIN_CGOTORCH_TRACE_H
#ifdef __cplusplus
extern "C" {
#endif
// CUDA graphs (graph.cc): a graph of device device; cg_graph_begin moves the calling
// thread to a side stream that waits for the current one, capturing when capture is set
// (thread-local capture mode, the graph's private pool, autocast's weight cache off);
// cg_graph_end ends the capture and makes the caller's stream wait for the side stream.
typedef void *cg_graph;
cg_status cg_graph_new(int device, cg_graph *out);
cg_status cg_graph_begin(cg_graph g, int capture);
cg_status cg_graph_end(cg_graph g);
cg_status cg_graph_replay(cg_graph g);
void cg_graph_free(cg_graph g);

typedef void *cg_trace;
// cg_trace_begin starts recording the calling thread's calls, with inputs as the
// trace's inputs; step is the step counter (cg_accumulate's step) of the recorded step.
cg_status cg_trace_begin(const cg_tensor *inputs, int n, int64_t step);
// cg_trace_end stops recording, with outputs as the tensors a replay returns. *out is
// the trace, or NULL with *why (malloc'd) saying why the step cannot be replayed.
cg_status cg_trace_end(const cg_tensor *outputs, int n, cg_trace *out, cg_msg *why);
void cg_trace_free(cg_trace t);
// cg_trace_same reports whether two traces make the same calls with the same arguments
// on the same persistent tensors: a step recorded twice that gives the same trace does
// not depend on values that changed between the two.
int cg_trace_same(cg_trace a, cg_trace b);
// cg_trace_result is a replay's status, with the scope its outputs joined and the
// number of steps that completed.
typedef struct {
  int32_t code;
  int32_t scope;
  cg_msg msg;
  int32_t done;
} cg_trace_result;
// cg_trace_run replays t over inputs (which must have the recorded dtypes, devices and
// shapes) at step counter step; outs receives its outputs (as many as cg_trace_end
// was given), adopted by the thread's scope. A failure names the entry that failed. opt_kind,
// opt_groups and opt_hyper are the optimizer's current hyperparameters (cg_optim_step's
// kind, ngroups and hyper; opt_kind -1: none), which a replayed optimizer step uses
// instead of the recorded ones, so that a scheduler's learning rate is not baked in.
void cg_trace_run(cg_trace t, const cg_tensor *inputs, int n, int opt_kind, int opt_groups, const double *opt_hyper,
                  int64_t step, cg_tensor *outs, cg_trace_result *r);
// cg_trace_run_batches replays t over nb batches in turn, at step counters step,
// step+1, ...: batch k's input i is rows starts[k] to starts[k]+sizes[k] of fields[i]
// or, when order is not NULL, the rows that those positions of the int64 vector order
// name (cg_steps_run's cg_batches). Only the last step's outputs are kept; r.done counts
// the steps that completed.
void cg_trace_run_batches(cg_trace t, const cg_tensor *fields, int n, cg_tensor order, const int64_t *starts,
                          const int64_t *sizes, int nb, int opt_kind, int opt_groups, const double *opt_hyper,
                          int64_t step, cg_tensor *outs, cg_trace_result *r);
#ifdef __cplusplus
}
#endif
#endif
