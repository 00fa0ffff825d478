// The ordered fused backward's query tiles of dQ (kernels/sm90/bwd_dkdv.cuh, bwd_dq_convert.cuh):
// how many key tiles add to each, and the order in which the kernel's warps convert them. Plain
// C++ (host and device): the host tests replay the walks against it (tests/cuda/tile_order_test).
#pragma once

#include <cstdint>

#include "kernels/common/args.hpp"
#include "kernels/common/tile_order.hpp"

namespace flashref::cuda::kernels::sm90 {

// The key tiles (of kBlockN keys) whose walk includes query step `step` (kBlockM rows), so many
// ordered adds to its dQ tiles: every one without a mask; with a causal one the prefix whose
// first seeing query (n0 - offset) is below the step's end and S_q, which is KeyTileSchedule::
// causal_query_tiles_begin <= step (kernels/common/schedule.cuh).
template <int kBlockM, int kBlockN>
FLASHREF_HOST_DEVICE inline int dq_adders(const AttnArgs& args, int step) {
  const int n_blocks = (args.S_k + kBlockN - 1) / kBlockN;
  if (!args.causal) return n_blocks;
  const int64_t step_end = static_cast<int64_t>(step + 1) * kBlockM;
  const int64_t end = step_end < args.S_q ? step_end : args.S_q;
  const int64_t bound = end + args.causal_offset;  // key tile j counts when j kBlockN < bound
  if (bound <= 0) return 0;
  const int64_t count = (bound + kBlockN - 1) / kBlockN;
  return count < n_blocks ? static_cast<int>(count) : n_blocks;
}

// The 64-row dQ tile that conversion `c` of B H ceil(S_q / 64) takes: sections of (batch, key/
// value head) pairs as the key tiles' order has them (args.tile_section), then query tiles,
// then the pairs and the group's heads. Under a causal mask the query tiles ascend (key tile j
// completes those at its diagonal, the last of its walk down, and key tiles are taken
// ascending); without one they descend (every tile's last add is its head's last key tile's,
// whose walk goes down).
struct DqTile {
  int b, h, row_tile;
};
FLASHREF_HOST_DEVICE inline DqTile dq_convert_tile(const AttnArgs& args, int c) {
  const int m_tiles = (args.S_q + kDqTileRows - 1) / kDqTileRows;
  const SectionPlace at =
      section_of(c, m_tiles * args.group, args.B * args.H_kv, args.tile_section);
  const int order = at.tile / (at.pairs * args.group);
  const int rest = at.tile % (at.pairs * args.group);
  const int bkv = at.first_pair + rest / args.group;
  return {bkv / args.H_kv, (bkv % args.H_kv) * args.group + rest % args.group,
          args.causal ? order : m_tiles - 1 - order};
}

}  // namespace flashref::cuda::kernels::sm90
