// graph.cc: CUDA graphs (at::cuda::CUDAGraph) for the Trainer's captured step. The graph needs the
// CUDA runtime's headers, which libtorch.mk finds for NCCL (GOTRAIN_NCCL), in a build
// that links libtorch_cuda (GOTRAIN_CUDA_BUILD); elsewhere every call says what is
// missing.
#include <vector>
#include "internal.h"

#if defined(GOTRAIN_NCCL) && defined(GOTRAIN_CUDA_BUILD)
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <optional>

namespace {
// The streams, guards and events go through c10's device-generic interfaces, which
// libc10_cuda implements, so that nothing here calls the CUDA runtime directly (the
// build does not link libcudart itself).
void wait(const c10::Stream &waiter, const c10::Stream &on) {
  c10::Event ev(c10::DeviceType::CUDA);
  ev.record(on);
  ev.block(waiter);
}

// Graph is one captured step: the graph, and while a warm-up or capture runs, the side
// stream it runs on and the stream to return to.
struct Graph {
  int device;
  at::cuda::CUDAGraph graph;
  std::optional<c10::StreamGuard> guard;
  std::optional<c10::Stream> caller;
  bool capturing = false, captured = false, cache = true;
};
}  // namespace

extern "C" {
cg_status cg_graph_new(int device, cg_graph *out) {
  CG_TRY auto *g = new Graph{device};
  *out = g;
  return cg::ok();
  CG_CATCH_STATUS
}

// cg_graph_begin moves the calling thread to a side stream that waits for the current
// one (torch.cuda.graphs' warm-up and capture), and starts capturing when capture is set:
// in the graph's private memory pool, with autocast's weight cache off.
cg_status cg_graph_begin(cg_graph h, int capture) {
  CG_TRY auto *g = static_cast<Graph *>(h);
  if (g->guard) return cg::fail(CG_ERR_INVALID, "CUDA graph: begin while a warm-up or capture is running");
  if (capture && g->captured) return cg::fail(CG_ERR_INVALID, "CUDA graph: captured already");
  c10::Stream caller = c10::cuda::getCurrentCUDAStream(g->device);
  c10::Stream side = c10::cuda::getStreamFromPool(false, g->device);
  wait(side, caller);
  g->caller = caller;
  g->guard.emplace(side);
  if (capture) {
    g->cache = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(false);
    try {
      g->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    } catch (...) {
      at::autocast::set_autocast_cache_enabled(g->cache);
      g->guard.reset();
      throw;
    }
    g->capturing = true;
  }
  return cg::ok();
  CG_CATCH_STATUS
}

// cg_graph_end ends what cg_graph_begin started: the capture (instantiating the graph),
// then back on the caller's stream, which waits for the side stream's work.
cg_status cg_graph_end(cg_graph h) {
  CG_TRY auto *g = static_cast<Graph *>(h);
  if (!g->guard) return cg::fail(CG_ERR_INVALID, "CUDA graph: end without begin");
  c10::Stream side = c10::cuda::getCurrentCUDAStream(g->device);
  struct Restore {
    Graph *g;
    c10::Stream side;
    ~Restore() {
      if (g->capturing) at::autocast::set_autocast_cache_enabled(g->cache);
      g->capturing = false;
      g->guard.reset();
      try {
        wait(*g->caller, side);
      } catch (...) {
      }
    }
  } restore{g, side};
  if (g->capturing) {
    g->graph.capture_end();
    g->captured = true;
  }
  return cg::ok();
  CG_CATCH_STATUS
}

cg_status cg_graph_replay(cg_graph h) {
  CG_TRY auto *g = static_cast<Graph *>(h);
  if (!g->captured) return cg::fail(CG_ERR_INVALID, "CUDA graph: replay before capture");
  c10::DeviceGuard dev(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(g->device)));
  g->graph.replay();
  return cg::ok();
  CG_CATCH_STATUS
}

void cg_graph_free(cg_graph h) {
  try {
    delete static_cast<Graph *>(h);
  } catch (...) {
  }
}
}

#else

namespace {
cg_status no_graphs() {
#if defined(GOTRAIN_CUDA_BUILD)
  return cg::fail(CG_ERR_NOT_IMPLEMENTED, "CUDA graphs: this build found no CUDA runtime headers (see CUDA_INCDIRS in libtorch.mk)");
#else
  return cg::fail(CG_ERR_NOT_IMPLEMENTED, "CUDA graphs: gotrain was built with the cpu tag: CUDA is not linked");
#endif
}
}  // namespace

extern "C" {
cg_status cg_graph_new(int, cg_graph *) { return no_graphs(); }
cg_status cg_graph_begin(cg_graph, int) { return no_graphs(); }
cg_status cg_graph_end(cg_graph) { return no_graphs(); }
cg_status cg_graph_replay(cg_graph) { return no_graphs(); }
void cg_graph_free(cg_graph) {}
}
#endif
