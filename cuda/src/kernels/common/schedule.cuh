// Which tile a thread block owns (decoded from blockIdx.x) and which tiles of the other side
// it visits under the mask. The launchers (launch_templates.cuh, launch_per_query_tile and
// launch_per_key_tile) size the grids these decode.
#pragma once

#include <cstdint>

#include "kernels/common/args.hpp"
#include "kernels/common/causal.cuh"
#include "kernels/common/tile_io.cuh"
#include "kernels/common/tile_order.hpp"

namespace flashref::cuda::kernels {

// The forward and the dQ pass: one block per (query tile, head, batch). The query-tile index
// is the slowest-varying part of blockIdx.x, counted down: with a causal mask the last query
// tile sees the most keys, so the longest blocks are scheduled first and the tail of the grid
// is made of short ones.
template <int kBlockM, int kBlockN>
struct QueryTileSchedule {
  int b, h, h_kv;  // batch, query head, and the key/value head it reads
  int row0;        // first query row of the tile
  int rows_valid;  // rows of the tile below S_q

  __device__ __forceinline__ explicit QueryTileSchedule(const AttnArgs& args) {
    const int bh_count = args.B * args.H;
    const int m_block =
        static_cast<int>(gridDim.x / bh_count) - 1 - static_cast<int>(blockIdx.x / bh_count);
    const int bh = blockIdx.x % bh_count;
    set(args, m_block, bh);
  }
  // Tile `index` of the m_blocks * B * H (the sm90 kernels: a block that loops over tiles, or
  // blockIdx.x), in sections of args.tile_section (batch, head) pairs
  // (kernels/common/tile_order.hpp): the tiles of one section's heads, longest first, then the
  // next section's. While a section runs, its heads' keys and values stay in L2. A section of
  // every head (tile_section 0, or B * H and more) is the order above.
  __device__ __forceinline__ QueryTileSchedule(const AttnArgs& args, int index, int m_blocks) {
    const auto [section_tile, first_bh, section_bh] =
        section_of(index, m_blocks, args.B * args.H, args.tile_section);
    set(args, m_blocks - 1 - section_tile / section_bh, first_bh + section_tile % section_bh);
  }

  __device__ __forceinline__ void set(const AttnArgs& args, int m_block, int bh) {
    b = bh / args.H;
    h = bh % args.H;
    h_kv = h / args.group;
    row0 = m_block * kBlockM;
    rows_valid = min(kBlockM, args.S_q - row0);
  }

  // With a causal mask the block visits key tiles [0, result) of the n_blocks: those up to the
  // one holding the last visible key of the tile's last row (0 when no row sees a key:
  // bottom-right causal, S_q > S_k). Tiles above the diagonal are never loaded. (The kernels
  // test args.causal themselves: with the test in here the compiler lays the prologue out
  // differently, and the registers and instructions of the kernels would change.)
  __device__ __forceinline__ int causal_key_tiles_end(const AttnArgs& args, int n_blocks) const {
    const int64_t last_key = last_visible_key(args, row0 + rows_valid - 1);
    return last_key < 0 ? 0 : static_cast<int>(min64(n_blocks, last_key / kBlockN + 1));
  }
};

// The dK/dV pass: one block per (key tile, key/value head, batch), key tiles ascending (with a
// causal mask the first keys are seen by the most queries, so the longest blocks start first).
// The block loops over `steps` (query head, query tile) pairs: the query heads of its group
// ascending, and for each the query tiles that see the key tile, ascending. Each dK/dV row is
// summed by one block in that fixed order: no atomics, bitwise reproducible, and GQA/MQA's sum
// over the group is part of the same loop.
template <int kBlockM, int kBlockN>
struct KeyTileSchedule {
  int b, h_kv;     // batch, key/value head
  int n0;          // first key of the tile
  int keys_valid;  // keys of the tile below S_k

  __device__ __forceinline__ explicit KeyTileSchedule(const AttnArgs& args) {
    const int bkv_count = args.B * args.H_kv;
    set(args, blockIdx.x / bkv_count, blockIdx.x % bkv_count);
  }

  // Tile `index` of the n_blocks * B * H_kv in sections of args.tile_section (batch, key/value
  // head) pairs, key tiles ascending within each (the sm90 kernels; as QueryTileSchedule's).
  // Each head's key tiles keep their order, so the ordered fused backward's tile j still comes
  // after j - 1 (bwd_dkdv.cuh).
  __device__ __forceinline__ KeyTileSchedule(const AttnArgs& args, int index, int n_blocks) {
    const auto [section_tile, first_bkv, section_bkv] =
        section_of(index, n_blocks, args.B * args.H_kv, args.tile_section);
    set(args, section_tile / section_bkv, first_bkv + section_tile % section_bkv);
  }

  // With a causal mask the block visits query tiles [result, m_tiles): query q sees key n0
  // only when q >= n0 - offset, and tiles wholly before that are never loaded (m_tiles when no
  // query sees the tile). As causal_key_tiles_end, the kernels test args.causal themselves.
  __device__ __forceinline__ int causal_query_tiles_begin(const AttnArgs& args, int m_tiles) const {
    const int64_t first_q = first_seeing_query(args, n0);
    return first_q <= 0 ? 0 : (first_q >= args.S_q ? m_tiles : static_cast<int>(first_q / kBlockM));
  }

  __device__ __forceinline__ void set(const AttnArgs& args, int n_block, int bkv) {
    b = bkv / args.H_kv;
    h_kv = bkv % args.H_kv;
    n0 = n_block * kBlockN;
    keys_valid = min(kBlockN, args.S_k - n0);
  }
};

}  // namespace flashref::cuda::kernels
