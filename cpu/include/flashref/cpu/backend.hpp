// The "cpu" backend: tiled FlashAttention-2, Algorithm 1 (forward) and Algorithm 2 (backward)
// line by line, OpenMP over (batch, head, tile).
#pragma once

#include <cstdint>
#include <memory>

#include "flashref/backend.hpp"
#include "flashref/cpu/trace.hpp"

namespace flashref::cpu {

// Default tile sizes when options.tile_q / tile_k are 0. Measured on float32, B=1, H=8,
// S=2048, d=64, causal on the GPU machine's Xeon (cpu/README.md): with 16 threads 64 x 64 is
// the fastest (128 x 128: backward 29% slower, too few tasks); with 2 threads 128 x 128 is up
// to 22% faster. The default is a constant because the tiles change the rounding, and results
// must not depend on the thread count.
inline constexpr int kDefaultTileQ = 64;
inline constexpr int kDefaultTileK = 64;

// What only this backend has; the shared settings (tiles, threads) stay in the params'
// ExecutionOptions. The defaults are the plain backend, as make_backend("cpu") gives it.
struct Options {
  // Receives each step of Algorithm 1 and 2 (trace.hpp); the backend then runs on one thread
  // in a fixed order. Null (the default) costs nothing. Must outlive the backend's calls.
  TraceObserver* trace = nullptr;
  // Tests only: a bit set of Fault values (faults.hpp), the bugs planted in every call.
  std::uint32_t faults = 0;
};

// Throws InvalidArgument("options.faults", ...) for bits that name no Fault.
std::unique_ptr<Backend> make_backend(const Options& options = {});

}  // namespace flashref::cpu
