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
// Which one runs for a problem of S_k keys and head dim d (dispatch.cu, with its measurements):
// the fused ones on sm90 at d <= 128 only (d = 256's backward is the mma.sync kernels').
DqStrategy dq_strategy(Family family, bool deterministic, long long S_k, long long d);
// The fused strategies' workspace: the accumulator's floats, the ordering counters (ints) and
// the persistent kernel's tile counter (one int), all zeroed by launch_backward's preprocess but
// the accumulator where the ordered adds store their first (dq_first_store).
struct FusedDqWorkspace {
  long long accum_floats = 0, semaphores = 0, tile_counters = 0;
};
FusedDqWorkspace fused_dq_workspace(const kernels::AttnArgs& args, DqStrategy strategy);
// Whether the sm90 ordered fused kernel that runs stores its first dQ add (kernels/sm90/
// bwd_dkdv.cuh's kDqFirstStore), so that the preprocess leaves its accumulator as it is: the
// default's; not fused90=1 or 2's kernels (tuning builds).
bool dq_first_store();
}  // namespace flashref::cuda
