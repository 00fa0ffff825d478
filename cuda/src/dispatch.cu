// launch_forward / launch_backward: (family, dtype, head dim) -> the generated instance, the
// backward's preprocess, and the side stream of the dK/dV pass.
#include <map>
#include <mutex>
#include <string>

#include "check.hpp"
#include "dispatch.hpp"
#include "flashref/error.hpp"
#include "instances.hpp"
#include "kernels/common/bwd_preprocess.cuh"
#include "kernels/common/launch.cuh"
#include "launch.hpp"

namespace flashref::cuda {

int workspace_rows(int S_q) {
  return kernels::ceil_div(S_q, kernels::kWorkspaceRowPad) * kernels::kWorkspaceRowPad;
}

// The deterministic default is the measured faster of the two: from S_k = 1024 on the ordered
// fused kernel, below it the two passes (not measured there since run 15b, when the two passes
// won up to S = 4k). Run 18b (bench/results/2026-12-02-h200-run18b, medians of 20, same call),
// backward ms, fused against two passes, after the preprocess began to zero the accumulator
// and the fused kernel's sections to count it: d = 64, S = 1k (B 32) 0.714 against 0.804, 2k
// 1.059 against 1.239, 4k 1.822 against 2.110; d = 128, 1k 1.197 against 1.220, 2k 1.746
// against 1.881, 4k 2.910 against 3.323. Before (run 15b), at d = 64: leaderboard 3.208 against
// 3.914, S = 8k 3.638 against 4.361, S = 4k 2.349 against 2.232, S = 2k 1.371 against 1.331,
// S = 1k 0.896 against 0.884; at d = 128 leaderboard 5.550 against 6.511, S = 4k 4.289 against
// 3.884, S = 1k 1.495 against 1.271.
// FLASHREF_CUDA_TUNE bwd90=1 picks the other, to compare them. Non-deterministic: the atomic
// fused kernel, the option named for it (run 18b: S = 1k 0.698 ms at d = 64, 1.124 at
// d = 128).
DqStrategy dq_strategy(Family family, bool deterministic, long long S_k, long long d) {
  if (family != Family::sm90 || d > 128) return DqStrategy::separate_pass;
  if (!deterministic) return DqStrategy::fused_atomic;
  constexpr long long kFusedMinKeys = 1024;
  const bool fused_by_default = S_k >= kFusedMinKeys;
  return (tune().bwd90 == 1) != fused_by_default ? DqStrategy::fused_ordered
                                                 : DqStrategy::separate_pass;
}

bool dq_first_store() {
  return !(kTuningVariants && (tune().fused90 == 1 || tune().fused90 == 2));
}

FusedDqWorkspace fused_dq_workspace(const kernels::AttnArgs& args, DqStrategy strategy) {
  if (strategy == DqStrategy::separate_pass) return {};
  const long long rows = static_cast<long long>(args.B) * args.H * args.S_q_pad;
  const bool ordered = strategy == DqStrategy::fused_ordered;
  // The fused strategies are sm90's: its accumulator's rows are its compiled head dim wide.
  return {rows * family_head_dim(Family::sm90, args.d), ordered ? rows / kernels::kDqTileRows : 0,
          1};
}

namespace {

using ForwardFn = void (*)(const kernels::AttnArgs&, cudaStream_t);
using BackwardFn = void (*)(const kernels::AttnArgs&, cudaStream_t, cudaStream_t);

[[noreturn]] void not_compiled(Family family, DType dtype, int d, const char* pass) {
  throw Unsupported(std::string("cuda backend: no ") + pass + " kernel of the " +
                    family_name(family) + " family for " + std::string(dtype_name(dtype)) +
                    " at head dim d = " + std::to_string(d) +
                    " is compiled into this build (CMAKE_CUDA_ARCHITECTURES "
                    "leaves the family no arch, or the instance list lacks it)");
}

// The one run-time -> compile-time step: the instance of (family, dtype, compiled head dim),
// from the generated lists of those this build has.
ForwardFn find_forward(Family family, DType dtype, int d) {
  const int kD = family_head_dim(family, d);
#define FLASHREF_FIND_FORWARD(F, T, D)                     \
  if (family == Family::F && dtype == DType::T && kD == D) \
    return &run_forward<Family::F, DType::T, D>;
  FLASHREF_CUDA_INSTANCES(FLASHREF_FIND_FORWARD)
#undef FLASHREF_FIND_FORWARD
  not_compiled(family, dtype, d, "forward");
}

BackwardFn find_backward(Family family, DType dtype, int d) {
  const int kD = family_head_dim(family, d);
#define FLASHREF_FIND_BACKWARD(F, T, D)                    \
  if (family == Family::F && dtype == DType::T && kD == D) \
    return &run_backward<Family::F, DType::T, D>;
  FLASHREF_CUDA_INSTANCES(FLASHREF_FIND_BACKWARD)
#undef FLASHREF_FIND_BACKWARD
  not_compiled(family, dtype, d, "backward");
}

}  // namespace

void launch_forward(const kernels::AttnArgs& args, Family family, DType dtype, void* stream_ptr) {
  tune();  // a bad FLASHREF_CUDA_TUNE is an error here, before any kernel writes
  find_forward(family, dtype, args.d)(args, static_cast<cudaStream_t>(stream_ptr));
}

// L' and D (Alg. 2 line 4) into the workspace: the exact float32 kernels take L itself
// (natural log) and D as one FFMA chain; the tensor-core ones (TF32 included) L log2(e), and
// with a fused dQ their accumulator and counters zeroed by the same kernel.
void run_preprocess_natural_log(const kernels::AttnArgs& args, cudaStream_t stream) {
  const long long rows = static_cast<long long>(args.B) * args.H * args.S_q_pad;
  const unsigned grid =
      static_cast<unsigned>((rows + kernels::kPreprocessWarps - 1) / kernels::kPreprocessWarps);
  launch_kernel(kernels::bwd_preprocess_natural_log_kernel<float>, grid,
                kernels::kPreprocessWarps * 32, 0, args, stream, "bwd_preprocess<f32>");
}

template <typename Element>
void run_preprocess(const kernels::AttnArgs& args, cudaStream_t stream, const char* name) {
  const long long rows = static_cast<long long>(args.B) * args.H * args.S_q_pad;
  const unsigned grid =
      static_cast<unsigned>((rows + kernels::kPreprocessRows - 1) / kernels::kPreprocessRows);
  if (grid == 0) return;
  // The accumulator is zeroed here unless the ordered adds store their first (dq_first_store).
  // Then poison90=1 fills it with NaN instead: a tile the postprocess reads that the kernel did
  // not write makes dQ NaN, which every check of dQ fails (the test of the claim launch.cuh
  // makes to initcheck, which cannot see the kernel's stores).
  const bool stored_first =
      args.dq_accum != nullptr && args.dq_semaphore != nullptr && dq_first_store();
  // (A dQ accumulator is the fused strategies', which sm90 alone runs.)
  const int sm90_cols = family_head_dim(Family::sm90, args.d);
  const int accum_cols = args.dq_accum != nullptr && !stored_first ? sm90_cols : 0;
  if (stored_first && tune().poison90 == 1)
    check_cuda(cudaMemsetAsync(args.dq_accum, 0xff,
                               static_cast<std::size_t>(rows) * sm90_cols * sizeof(float), stream),
               "poisoning the dQ accumulator (FLASHREF_CUDA_TUNE poison90=1)");
  const std::string label = std::string("bwd_preprocess<") + name + ">";
  const auto kernel = kernels::bwd_preprocess_kernel<Element>;
  configure_kernel(reinterpret_cast<const void*>(kernel), 0, label);
  kernel<<<grid, kernels::kPreprocessWarps * 32, 0, stream>>>(args, accum_cols);
  check_cuda(cudaGetLastError(), label);
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

void launch_backward(const kernels::AttnArgs& args, Family family, DType dtype, void* stream_ptr) {
  tune();  // a bad FLASHREF_CUDA_TUNE is an error here, before any kernel writes
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  const BackwardFn backward = find_backward(family, dtype, args.d);
  // L' = L log2(e) and D = rowsum(dO * O) (Alg. 2 line 4); the exact float32 kernels take L
  // itself.
  switch (dtype) {
    case DType::f32:
      if (family == Family::ffma || family == Family::sm90_3xtf32)  // the ffma backward
        run_preprocess_natural_log(args, stream);
      else
        run_preprocess<float>(args, stream, "f32, log2");
      break;
    case DType::bf16:
      run_preprocess<__nv_bfloat16>(args, stream, "bf16");
      break;
    case DType::f16:
      run_preprocess<__half>(args, stream, "f16");
      break;
  }
  forked(stream, [&](cudaStream_t side) { backward(args, stream, side); });
}

}  // namespace flashref::cuda
