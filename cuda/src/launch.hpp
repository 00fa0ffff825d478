// The entry points host code (backend.cpp) calls to run the kernels; defined in nvcc-compiled
// files. `stream` is a cudaStream_t (nullptr: the default stream). Errors throw CudaError
// naming the kernel.
#pragma once

#include "family.hpp"
#include "flashref/dtype.hpp"
#include "kernels/common/args.hpp"

namespace flashref::cuda {

// O and L from Q, K, V, on the kernels of `family` (choose_family, family.hpp; the caller has
// checked family_supports).
void launch_forward(const kernels::AttnArgs& args, Family family, DType dtype, void* stream);
// dQ, dK, dV; args.lse2 and args.dsum must point to (B * H, S_q_pad) float workspaces, and for
// a fused dQ strategy args.dq_accum (and, ordered, args.dq_semaphore) to fused_dq_workspace's.
void launch_backward(const kernels::AttnArgs& args, Family family, DType dtype, void* stream);
// Rows of the backward workspace: S_q rounded up to the kernels' tile.
int workspace_rows(int S_q);

// How the backward makes dQ (docs/cuda.md, "The sm90 backward"): in a pass of its own beside
// the dK/dV pass (every family), or fused into the dK/dV pass with a float32 accumulator,
// its adds ordered by key tile (deterministic) or not (ExecutionOptions::deterministic false).
enum class DqStrategy { separate_pass, fused_ordered, fused_atomic };
// Which one runs for a problem of S_k keys, at either compiled head dim (dispatch.cu, with its
// measurements).
DqStrategy dq_strategy(Family family, bool deterministic, long long S_k);
// The fused strategies' workspace: the accumulator's floats, the ordering counters (ints) and
// the persistent kernel's tile counter (one int), all zeroed by launch_backward's preprocess.
struct FusedDqWorkspace {
  long long accum_floats = 0, semaphores = 0, tile_counters = 0;
};
FusedDqWorkspace fused_dq_workspace(const kernels::AttnArgs& args, DqStrategy strategy);
// The sm90 fused backward's grid: persistent (a block per multiprocessor taking key tiles from
// the workspace's counter), except at d = 64 without a causal mask, where every key tile takes
// the same steps and the grid of a block per key tile was 2.5-3.8% faster (kernels/sm90/
// configs.hpp: runs 27a and 27b; at d = 128 the two were level). Inline: the sm90 launchers
// (kernels/sm90/launch.cuh) and the host tests read it.
enum class FusedGrid { persistent, per_key_tile };
inline FusedGrid fused_grid(int compiled_d, bool causal) {
  return compiled_d == 64 && !causal ? FusedGrid::per_key_tile : FusedGrid::persistent;
}
// When the fused backward issues a step's dQ product (kernels/sm90/bwd_dkdv.cuh,
// kDqDeferred): in the step, or a step later with the consumers out of lock step (persistent,
// whatever fused_grid says). d = 128: deferred (run 29a). d = 64, atomic (`ordered` false):
// deferred (run 29c, medians of 30, ms, in step -> deferred: the leaderboard 3.012-3.036 ->
// 2.573-2.583, S = 1k 0.652 -> 0.618, without the mask 5.941 -> 5.311). d = 64, ordered, where
// the deferred kernel has room for one dQ set to the in-step kernel's two, and its one writer's
// chain of round trips holds it back (it is 13% slower than the atomic deferred kernel on the
// leaderboard, where the in-step kernels are level): deferred once a key tile's walk is long,
// 3,072 queries or more on average (S_q / 2 with a causal mask, S_q without). Run 29b (medians
// of 30, two rounds, ms, in step -> deferred): causal S = 2k 0.982 -> 1.034, 4k 1.646-1.656 ->
// 1.680-1.684, 8k 3.199-3.295 -> 3.088-3.113, the leaderboard (16k) 3.007-3.054 -> 2.904-2.951
// (run 29a); without the mask at 16k 6.000-6.010 -> 5.769-5.782.
enum class FusedDqSchedule { in_step, deferred };
inline FusedDqSchedule fused_dq_schedule(int compiled_d, bool causal, long long S_q, bool ordered) {
  if (compiled_d != 64 || !ordered) return FusedDqSchedule::deferred;
  const long long walk = causal ? S_q / 2 : S_q;
  return walk >= 3072 ? FusedDqSchedule::deferred : FusedDqSchedule::in_step;
}
}  // namespace flashref::cuda
