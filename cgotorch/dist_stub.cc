//go:build nodist

// dist_stub.cc: the distributed entry points in a build without c10d's Gloo headers
// (tag nodist): no process group, a clear error.
#include "internal.h"

namespace {
cg_status no_dist() {
  return cg::fail(CG_ERR_NOT_IMPLEMENTED,
                  "gotrain was built without distributed support (tag nodist); install libgloo-dev "
                  "(scripts/setup.sh does) and build without -tags nodist");
}
}  // namespace

extern "C" {
int cg_dist_available(void) { return 0; }
int cg_dist_nccl_available(const char **why) {
  if (why) *why = "gotrain was built without distributed support (tag nodist)";
  return 0;
}
cg_status cg_dist_init(const struct cg_dist_opts *, cg_pg *) { return no_dist(); }
void cg_dist_free(cg_pg) {}
cg_status cg_dist_broadcast(cg_pg, cg_tensor *, int, int) { return no_dist(); }
cg_status cg_dist_allreduce(cg_pg, cg_tensor *, int, enum cg_reduce_op) { return no_dist(); }
cg_status cg_dist_allreduce_grads(cg_pg, cg_tensor *, int) { return no_dist(); }
cg_status cg_dist_allgather(cg_pg, cg_tensor *, cg_tensor *, int) { return no_dist(); }
cg_status cg_dist_reduce_scatter(cg_pg, cg_tensor *, cg_tensor *, int, enum cg_reduce_op) { return no_dist(); }
cg_status cg_dist_barrier(cg_pg) { return no_dist(); }
}
