// A consumer warpgroup's 64-row accumulator tile, rounded to the 16-bit element type, into shared
// memory laid out as the TMA loads and stores tiles, for a bulk tensor store: the forward's O (at
// d = 128, over the last stage's K tile) and the fused backward's dK_j and dV_j (over K_j's and
// V_j's tiles, BwdTraitsStoreDkvByTma).
#pragma once

#include <cstdint>

#include "kernels/common/tile_io.cuh"
#include "kernels/sm90/hopper.cuh"

namespace flashref::cuda::kernels::sm90 {

// The wgmma accumulator of a 64 x kD tile: acc[4 i + 2 hf + e] is row 16 warp + lane / 4 + 8 hf,
// column 8 i + 2 (lane % 4) + e. Rows of half hf are multiplied by mul[hf] (the forward's 1 / l;
// dK's scale), then stored by stmatrix, two 8-column chunks at a time, as rows row0 .. row0 + 63
// of `tile`: 64-column blocks of kTileRows rows each, 128-byte rows, their 16-byte chunks
// swizzled by the row (kernels/sm90/hopper.cuh).
template <typename Element, int kD, int kTileRows>
__device__ __forceinline__ void stage_rows(uint32_t tile, const float (&acc)[kD / 2],
                                           const float (&mul)[2], int row0, int warp, int lane) {
  const int j = lane / 8, rr = lane % 8;
#pragma unroll
  for (int i = 0; i < kD / 8; i += 2) {  // 8-column chunks i and i + 1, both row halves
    const uint32_t frag[4] = {pack_pair<Element>(acc[4 * i] * mul[0], acc[4 * i + 1] * mul[0]),
                              pack_pair<Element>(acc[4 * i + 2] * mul[1], acc[4 * i + 3] * mul[1]),
                              pack_pair<Element>(acc[4 * i + 4] * mul[0], acc[4 * i + 5] * mul[0]),
                              pack_pair<Element>(acc[4 * i + 6] * mul[1], acc[4 * i + 7] * mul[1])};
    const int chunk = i + j / 2, row = row0 + warp * 16 + 8 * (j % 2) + rr;
    stmatrix_x4(tile + (chunk / 8) * (kTileRows * kSwizzleBytes) + row * kSwizzleBytes +
                    (((chunk % 8) ^ rr) * 16),
                frag);
  }
}

}  // namespace flashref::cuda::kernels::sm90
