// cgotorch.h: gotrain's C ABI over libtorch.
//
// Handles are opaque pointers to heap-allocated C++ objects (cg_tensor is an at::Tensor*).
// Every entry point catches every C++ exception and reports it in-band: the returned
// status (or the status inside a result struct) carries a code and a malloc'd message
// without the C++ backtrace, which the caller frees with cg_free_msg. There is no
// thread-local "last error".
#ifndef GOTRAIN_CGOTORCH_H
#define GOTRAIN_CGOTORCH_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void *cg_tensor;
typedef void *cg_module;

enum {
  CG_OK = 0,
  CG_ERR_OOM = 1,
  CG_ERR_INVALID = 2,
  CG_ERR_NOT_IMPLEMENTED = 3,
  CG_ERR_OTHER = 4,
};

typedef struct {
  int32_t code;
  char *msg;
} cg_status;

typedef struct {
  int32_t code;
  char *msg;
  cg_tensor t;
} cg_result;

void cg_free_msg(char *msg);

// ---- versions, threads, seeding, determinism ----
const char *cg_torch_version(void);  // static string, e.g. "2.14.1"
int cg_torch_version_num(void);      // major*10000 + minor*100 + patch
cg_status cg_set_num_threads(int n);
int cg_get_num_threads(void);
// cg_thread_id is the calling OS thread's id (gettid), cached per thread.
int64_t cg_thread_id(void);
cg_status cg_manual_seed(uint64_t seed);
cg_status cg_set_deterministic(int on);
// RNG state of the default generator of a device (device_type 0 CPU, 1 CUDA), as the
// uint8 tensor torch.get_rng_state / torch.cuda.get_rng_state return.
cg_result cg_get_rng_state(int device_type, int device_index);
cg_status cg_set_rng_state(int device_type, int device_index, cg_tensor state);
cg_status cg_show_config(char **out);
int cg_cuda_kernels_registered(void);

// ---- tensor lifetime and metadata ----
void cg_tensor_free(cg_tensor t);
cg_tensor cg_tensor_shallow_clone(cg_tensor t);
int cg_tensor_dim(cg_tensor t);
void cg_tensor_sizes(cg_tensor t, int64_t *out);
void cg_tensor_strides(cg_tensor t, int64_t *out);
int64_t cg_tensor_numel(cg_tensor t);
int cg_tensor_dtype(cg_tensor t);
void cg_tensor_device(cg_tensor t, int *type, int *index);
int cg_tensor_requires_grad(cg_tensor t);
int cg_tensor_is_contiguous(cg_tensor t);
int cg_tensor_defined(cg_tensor t);
void *cg_tensor_data_ptr(cg_tensor t);
int64_t cg_tensor_storage_offset(cg_tensor t);
int64_t cg_tensor_element_size(cg_tensor t);

// ---- creation ----
// dtype uses gotrain's DType numbering (ScalarType values); device_type 0 = CPU, 1 = CUDA.
cg_result cg_from_blob(const void *data, const int64_t *shape, int ndim, int dtype, int pinned);
cg_result cg_from_blob_strided(const void *data, const int64_t *shape, const int64_t *strides, int ndim, int dtype);
enum { CG_FILL_EMPTY, CG_FILL_ZEROS, CG_FILL_ONES, CG_FILL_RAND, CG_FILL_RANDN };
cg_result cg_fill(int kind, const int64_t *shape, int ndim, int dtype, int device_type, int device_index);
cg_result cg_full(const int64_t *shape, int ndim, double value, int dtype, int device_type, int device_index);
cg_result cg_arange(double start, double end, double step, int dtype, int device_type, int device_index);
cg_result cg_randint(int64_t low, int64_t high, const int64_t *shape, int ndim, int dtype, int device_type, int device_index);
cg_status cg_randperm_seeded(int64_t n, uint64_t seed, int64_t *out);
cg_status cg_copy_to_host(cg_tensor t, void *dst, int64_t nbytes);
cg_status cg_item(cg_tensor t, double *d, int64_t *i);
cg_status cg_copy_(cg_tensor dst, cg_tensor src, int non_blocking);

// ---- conversion ----
cg_result cg_to(cg_tensor t, int device_type, int device_index, int dtype, int non_blocking, int copy);

// ---- generic op families (op numbers in ops.go) ----
cg_result cg_unary(int op, cg_tensor a);
cg_result cg_binary(int op, cg_tensor a, cg_tensor b);
cg_result cg_scalar(int op, cg_tensor a, double s);
cg_status cg_inplace_scalar(int op, cg_tensor a, double s);
cg_status cg_inplace_binary(int op, cg_tensor a, cg_tensor b, double alpha);
cg_result cg_reduce(int op, cg_tensor a, const int64_t *dims, int ndims, int keepdim);
cg_result cg_dim(int op, cg_tensor a, int64_t dim, int keepdim);
cg_result cg_shape(int op, cg_tensor a, const int64_t *shape, int n);
cg_result cg_dim2(int op, cg_tensor a, int64_t d0, int64_t d1);
cg_status cg_min_max_dim(int is_max, cg_tensor a, int64_t dim, int keepdim, cg_tensor *values, cg_tensor *indices);
cg_status cg_topk(cg_tensor a, int64_t k, int64_t dim, int largest, int sorted, cg_tensor *values, cg_tensor *indices);
cg_result cg_cat(cg_tensor *ts, int n, int64_t dim, int stack);
cg_result cg_narrow(cg_tensor a, int64_t dim, int64_t start, int64_t length);
cg_result cg_slice(cg_tensor a, int64_t dim, int64_t start, int64_t end, int64_t step);
cg_result cg_select(cg_tensor a, int64_t dim, int64_t index);
cg_result cg_index_select(cg_tensor a, int64_t dim, cg_tensor index);
cg_result cg_gather(cg_tensor a, int64_t dim, cg_tensor index);
cg_result cg_masked_fill(cg_tensor a, cg_tensor mask, double value);
cg_result cg_masked_select(cg_tensor a, cg_tensor mask);
cg_result cg_where(cg_tensor cond, cg_tensor a, cg_tensor b);
cg_result cg_clamp(cg_tensor a, double lo, double hi, int has_lo, int has_hi);
cg_result cg_flatten(cg_tensor a, int64_t start, int64_t end);
cg_result cg_leaky_relu(cg_tensor a, double slope);
cg_result cg_gelu(cg_tensor a, int tanh_approx);
cg_result cg_dropout(cg_tensor a, double p, int train);
cg_result cg_norm(cg_tensor a, double p);

// ---- nn functional ----
cg_result cg_linear(cg_tensor x, cg_tensor w, cg_tensor b);
cg_result cg_conv2d(cg_tensor x, cg_tensor w, cg_tensor b, const int64_t *stride, const int64_t *padding, const int64_t *dilation, int64_t groups);
cg_result cg_max_pool2d(cg_tensor x, const int64_t *kernel, const int64_t *stride, const int64_t *padding, const int64_t *dilation, int ceil_mode);
cg_result cg_avg_pool2d(cg_tensor x, const int64_t *kernel, const int64_t *stride, const int64_t *padding, int ceil_mode, int count_include_pad);
cg_result cg_adaptive_avg_pool2d(cg_tensor x, const int64_t *out_size);
cg_result cg_batch_norm(cg_tensor x, cg_tensor w, cg_tensor b, cg_tensor rm, cg_tensor rv, int training, double momentum, double eps);
cg_result cg_layer_norm(cg_tensor x, const int64_t *shape, int n, cg_tensor w, cg_tensor b, double eps);
cg_result cg_group_norm(cg_tensor x, int64_t groups, cg_tensor w, cg_tensor b, double eps);
cg_result cg_embedding(cg_tensor w, cg_tensor idx, int64_t padding_idx);
// reduction: 0 none, 1 mean, 2 sum (at::Reduction)
cg_result cg_cross_entropy(cg_tensor x, cg_tensor y, cg_tensor weight, int reduction, int64_t ignore_index, double label_smoothing);
cg_result cg_nll_loss(cg_tensor x, cg_tensor y, cg_tensor weight, int reduction, int64_t ignore_index);
cg_result cg_mse_loss(cg_tensor x, cg_tensor y, int reduction);
cg_result cg_l1_loss(cg_tensor x, cg_tensor y, int reduction);
cg_result cg_smooth_l1_loss(cg_tensor x, cg_tensor y, int reduction, double beta);
cg_result cg_bce_with_logits(cg_tensor x, cg_tensor y, cg_tensor weight, cg_tensor pos_weight, int reduction);

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
// cg_tensor_set_data is `t.data = src`: t keeps its identity (autograd, optimizers, module
// slots) and takes src's storage, device and dtype. nn.ToDevice moves modules with it.
cg_status cg_tensor_set_data(cg_tensor t, cg_tensor src);

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

// Optimizer kinds and their per-group hyperparameters, CG_OPT_NHYPER doubles each (bools
// as 0/1): SGD lr, momentum, dampening, weight_decay, nesterov, maximize; ADAM lr, beta1,
// beta2, eps, weight_decay, amsgrad, maximize, decoupled_weight_decay, fused; RMSPROP lr, alpha,
// eps, weight_decay, momentum, centered, maximize; ADAGRAD lr, lr_decay, eps,
// weight_decay, maximize, initial_accumulator_value.
enum { CG_OPT_SGD = 0, CG_OPT_ADAM = 1, CG_OPT_RMSPROP = 2, CG_OPT_ADAGRAD = 3 };
enum { CG_OPT_NHYPER = 10, CG_OPT_NSTATE = 4 };
// cg_optim_step runs one step over every group (group_sizes[g] consecutive params).
// state[i*CG_OPT_NSTATE+k] is state tensor k of param i (SGD momentum_buffer; ADAM step,
// exp_avg, exp_avg_sq, max_exp_avg_sq; RMSPROP step, square_avg, momentum_buffer,
// grad_avg; ADAGRAD step, sum); NULL slots the step needs are filled with new handles the
// caller owns. Params without a gradient are skipped.
cg_status cg_optim_step(int kind, int ngroups, const int64_t *group_sizes, const double *hyper, cg_tensor *params, cg_tensor *state);
cg_status cg_zero_grad(cg_tensor *params, int n, int set_to_none);
// cg_clip_grad_norm is clip_grad_norm_; total_norm receives the pre-clip norm.
cg_status cg_clip_grad_norm(cg_tensor *params, int n, double max_norm, double norm_type, int error_if_nonfinite, double *total_norm);
cg_status cg_clip_grad_value(cg_tensor *params, int n, double clip_value);
// Autocast for device_type (0 CPU, 1 CUDA): enter returns the previous settings for exit.
cg_status cg_autocast_enter(int device_type, int dtype, int *prev_enabled, int *prev_dtype, int *prev_cache);
cg_status cg_autocast_exit(int device_type, int prev_enabled, int prev_dtype, int prev_cache);
// cg_amp_unscale multiplies the params' gradients by 1/scale and returns a new float32
// found_inf tensor on the scale's device (non-zero when a gradient was inf or NaN).
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
enum { CG_DIST_SUM = 0, CG_DIST_MAX = 1, CG_DIST_MIN = 2 };
enum { CG_DIST_GLOO = 0, CG_DIST_NCCL = 1 };

int cg_dist_available(void);  // 0 in a nodist build
// cg_dist_nccl_available: 1 when this build can make NCCL process groups (a CUDA build
// compiled with NCCL's and CUDA's headers), else 0 and *why says what is missing
// (static storage; may be NULL).
int cg_dist_nccl_available(const char **why);
cg_status cg_dist_init(const char *addr, int port, int rank, int world, int64_t timeout_ms, int backend, cg_pg *out);
void cg_dist_free(cg_pg pg);
// cg_dist_broadcast copies root's tensors into every rank's, in place (coalesced by dtype).
cg_status cg_dist_broadcast(cg_pg pg, cg_tensor *ts, int n, int root);
// cg_dist_allreduce reduces the tensors across ranks in place (coalesced by dtype).
cg_status cg_dist_allreduce(cg_pg pg, cg_tensor *ts, int n, int op);
// cg_dist_allreduce_grads averages the params' gradients across ranks in one flattened
// all-reduce per dtype (one bucket); an undefined gradient takes part as zeros.
cg_status cg_dist_allreduce_grads(cg_pg pg, cg_tensor *params, int n);
cg_status cg_dist_barrier(cg_pg pg);

#ifdef __cplusplus
}
#endif
#endif
