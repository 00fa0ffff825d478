// Which heads' tiles the sm90 kernels number together (AttnArgs::tile_section, decoded by the
// schedules' sectioned constructors, kernels/common/schedule.cuh). Plain C++: the launchers
// and the host tests call it.
//
// Why: the schedules number the tiles longest first across all heads (every head's last query
// tile, then every head's one before it, ...). With many short heads (FlashAttention-3's grid
// at S = 1k: B 32, H 16, 512 heads of 1024 keys) a wave of 132 blocks holds one tile of each of
// 132 heads, and a head's next tile comes a quarter of the grid later, after 500 other heads'
// keys and values have gone through L2: every tile reads its keys and values from memory. At
// d = 128 that is 1.2 GB, 0.3 ms of the H200's bandwidth, beside 0.42 ms for the whole forward.
// Numbered in sections of heads whose keys and values fit in L2 together, each head's tiles run
// within a few waves of one another and read them from L2 after the first.
#pragma once

#include <algorithm>

#ifdef __CUDACC__
#define FLASHREF_HOST_DEVICE __host__ __device__
#else
#define FLASHREF_HOST_DEVICE
#endif

namespace flashref::cuda::kernels {

// Tile `index` of `tiles_per_pair` x `pairs` numbered in sections of `section` pairs (0: one
// section): its place in its section, the section's first pair and its pair count (the last
// section may be short). The schedules' sectioned constructors decode it (kernels/common/
// schedule.cuh), the host tests replay it.
struct SectionPlace {
  int tile, first_pair, pairs;
};
FLASHREF_HOST_DEVICE inline SectionPlace section_of(int index, int tiles_per_pair, int pairs,
                                                    int section) {
  const int per_section = section > 0 && section < pairs ? section : pairs;
  const int section_tiles = per_section * tiles_per_pair;
  const int s = index / section_tiles;
  const int first = s * per_section;
  const int left = pairs - first;
  return {index - s * section_tiles, first, left < per_section ? left : per_section};
}

// The section for a grid of one block per tile (the hardware hands tiles to free
// multiprocessors in order, which balances the load): all `pairs` (batch, head) pairs when
// their bytes fit in `budget`, or when each wave of `wave` blocks holds `wave_tiles` tiles of
// a head or more (its blocks walk the head's keys together: the leaderboard's 16 heads; wave 0
// drops this rule, which the d = 64 forward keeps at two tiles and the d = 64 fused backward at
// four, kernels/sm90/configs.hpp); otherwise as many as fit in `budget`, at least one.
// `bytes_per_pair` is what a pair's tiles read of the other side (keys and values for query
// tiles; queries and dO for key tiles).
inline long long tile_section(long long pairs, long long bytes_per_pair, long long budget,
                              long long wave, long long wave_tiles = 2) {
  if (pairs <= 0) return 1;
  if (pairs * bytes_per_pair <= budget || wave_tiles * pairs <= wave) return pairs;
  return std::clamp(budget / std::max(1LL, bytes_per_pair), 1LL, pairs);
}

struct PersistentOrder {
  long long section;  // pairs per section
  long long grid;     // blocks
};

// The section and grid of the persistent forward, whose blocks take tiles in a fixed snake
// (block x takes tile 2rG + x in round 2r and 2rG + 2G - 1 - x in round 2r + 1, fwd.cuh). Its
// load is level when each pair of rounds covers whole query-tile rows of one section: then
// the two tiles of a block are k - 1 rows apart in sum over any pair, for k = 2G / section rows
// per pair of rounds. That needs section | 2G and k | tiles_per_pair. Among grids down to
// 15/16 of the multiprocessors and sections up to tile_section's (for a wave of `wave`
// blocks), the largest grid and then the largest section that do it; when none does,
// tile_section's section on every multiprocessor (level to within a tile per section).
inline PersistentOrder persistent_order(long long tiles_per_pair, long long pairs,
                                        long long bytes_per_pair, long long budget,
                                        long long multiprocessors, long long wave) {
  const long long tiles = tiles_per_pair * pairs;
  const long long most = tile_section(pairs, bytes_per_pair, budget, wave);
  if (most >= pairs || tiles_per_pair <= 0) return {pairs, std::min(tiles, multiprocessors)};
  // k rows per pair of rounds, fewest first (the largest section): at most 2G tries per grid,
  // however many heads fit in the budget.
  for (long long grid = multiprocessors; grid * 16 >= multiprocessors * 15 && grid > 0; --grid)
    for (long long k = 1; k <= std::min(tiles_per_pair, 2 * grid); ++k)
      if (tiles_per_pair % k == 0 && (2 * grid) % k == 0 && 2 * grid / k <= most)
        return {2 * grid / k, std::min(tiles, grid)};
  return {most, std::min(tiles, multiprocessors)};
}

}  // namespace flashref::cuda::kernels
