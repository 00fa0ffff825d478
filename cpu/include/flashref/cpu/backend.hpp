// The "cpu" backend: tiled FlashAttention-2, Algorithm 1 (forward) and Algorithm 2 (backward)
// line by line, OpenMP over (batch, head, tile).
#pragma once

#include <memory>

#include "flashref/backend.hpp"

namespace flashref::cpu {

// Default tile sizes when options.tile_q / tile_k are 0. Measured on float32, B=1, H=8,
// S=2048, d=64, causal on the GPU machine's Xeon (cpu/README.md): with 16 threads 64 x 64 is
// the fastest (128 x 128: backward 29% slower, too few tasks); with 2 threads 128 x 128 is up
// to 22% faster. The default is a constant because the tiles change the rounding, and results
// must not depend on the thread count.
inline constexpr int kDefaultTileQ = 64;
inline constexpr int kDefaultTileK = 64;

std::unique_ptr<Backend> make_backend();

}  // namespace flashref::cpu
