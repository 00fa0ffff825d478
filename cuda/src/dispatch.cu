// launch_forward / launch_backward: the dtype and head-dim switches (dispatch.hpp) in action.
#include <map>
#include <mutex>

#include "dispatch.hpp"
#include "kernels/bwd_preprocess.cuh"
#include "launch.hpp"
#include "launch_templates.cuh"

namespace flashref::cuda {

int workspace_rows(int S_q) {
  return kernels::ceil_div(S_q, kernels::kWorkspaceRowPad) * kernels::kWorkspaceRowPad;
}

void launch_forward(const kernels::AttnArgs& args, DType dtype, bool tf32, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  if (dtype == DType::f32 && tf32) {
    FLASHREF_TF32_HEADDIM_SWITCH(args.d, kD, [&] { run_fwd_tf32<kD>(args, stream); });
    return;
  }
  if (dtype == DType::f32) {
    FLASHREF_HEADDIM_SWITCH(args.d, kD, [&] { run_fwd_f32<kD>(args, stream); });
    return;
  }
  FLASHREF_FP16_SWITCH(dtype, Element, [&] {
    FLASHREF_HEADDIM_SWITCH(args.d, kD, [&] { run_fwd_mma<Element, kD>(args, stream); });
  });
}

// kNaturalLog: L itself in the workspace (the exact float32 kernels); otherwise L log2(e)
// (the tensor-core kernels, TF32 included).
template <typename Element, bool kNaturalLog>
void run_preprocess(const kernels::AttnArgs& args, cudaStream_t stream, const char* name) {
  const long long rows = static_cast<long long>(args.B) * args.H * args.S_q_pad;
  const unsigned grid =
      static_cast<unsigned>((rows + kernels::kPreprocessWarps - 1) / kernels::kPreprocessWarps);
  launch_kernel(kernels::bwd_preprocess_kernel<Element, kNaturalLog>, grid,
                kernels::kPreprocessWarps * 32, 0, args, stream,
                std::string("bwd_preprocess<") + name + ">");
}

namespace {

// One non-blocking stream per device for the dK/dV pass, created on first use and kept for
// the process (streams are cheap; creating one per call is not).
cudaStream_t side_stream() {
  static std::mutex mutex;
  static std::map<int, cudaStream_t> streams;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mutex);
  auto it = streams.find(device);
  if (it != streams.end()) return it->second;
  cudaStream_t s = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "creating the dK/dV stream");
  streams.emplace(device, s);
  return s;
}

// Runs `body(side)` with `side` forked from `stream` (it starts after everything queued on
// `stream` so far) and joins it back (what `stream` queues next waits for `side`'s work).
template <typename Body>
void forked(cudaStream_t stream, Body&& body) {
  cudaStream_t side = side_stream();
  cudaEvent_t fork = nullptr, join = nullptr;
  check_cuda(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), "cudaEventCreate");
  check_cuda(cudaEventCreateWithFlags(&join, cudaEventDisableTiming), "cudaEventCreate");
  struct Cleanup {
    cudaEvent_t a, b;
    ~Cleanup() {
      cudaEventDestroy(a);  // released once the recorded work completes
      cudaEventDestroy(b);
    }
  } cleanup{fork, join};
  check_cuda(cudaEventRecord(fork, stream), "cudaEventRecord (fork)");
  check_cuda(cudaStreamWaitEvent(side, fork, 0), "cudaStreamWaitEvent (fork)");
  body(side);
  check_cuda(cudaEventRecord(join, side), "cudaEventRecord (join)");
  check_cuda(cudaStreamWaitEvent(stream, join, 0), "cudaStreamWaitEvent (join)");
}

}  // namespace

void launch_backward(const kernels::AttnArgs& args, DType dtype, bool tf32, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  if (dtype == DType::f32 && tf32) {
    run_preprocess<float, false>(args, stream, "f32, log2");
    forked(stream, [&](cudaStream_t side) {
      FLASHREF_TF32_HEADDIM_SWITCH(args.d, kD, [&] { run_bwd_tf32<kD>(args, stream, side); });
    });
    return;
  }
  if (dtype == DType::f32) {
    run_preprocess<float, true>(args, stream, "f32");
    forked(stream, [&](cudaStream_t side) {
      FLASHREF_HEADDIM_SWITCH(args.d, kD, [&] { run_bwd_f32<kD>(args, stream, side); });
    });
    return;
  }
  FLASHREF_FP16_SWITCH(dtype, Element, [&] {
    run_preprocess<Element, false>(args, stream, element_name<Element>());
    forked(stream, [&](cudaStream_t side) {
      FLASHREF_HEADDIM_SWITCH(args.d, kD, [&] { run_bwd_mma<Element, kD>(args, stream, side); });
    });
  });
}

}  // namespace flashref::cuda
