// The "cpu" backend: tiled FlashAttention-2, Algorithm 1 (forward) and Algorithm 2 (backward)
// line by line, OpenMP over (batch, head, tile).
#pragma once

#include <memory>

#include "flashref/backend.hpp"

namespace flashref::cpu {

// Default tile sizes when options.tile_q / tile_k are 0.
inline constexpr int kDefaultTileQ = 64;
inline constexpr int kDefaultTileK = 64;

std::unique_ptr<Backend> make_backend();

}  // namespace flashref::cpu
