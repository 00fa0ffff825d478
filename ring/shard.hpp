// A rank's local buffers on the host: its rows of the whole problem's tensors, and the
// messages that carry an owner's key/value chunks (and their dK, dV) around the ring.
// Everything local is contiguous (batch, seq, head, dim), so a message is plain bytes and a
// chunk inside it a view. The host side of RankMemory (rank_memory.hpp) is these functions;
// ring/cuda/device_ops.cu does the same on the device, bit for bit.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "flashref/problem.hpp"
#include "flashref/ring/zigzag.hpp"
#include "flashref/tensor.hpp"

namespace flashref::ring::detail {

// local = rows [begin, begin + local.seq) of `global`, each element converted to local's
// dtype (bytes as they are when the dtypes match, so exact).
void gather_rows(const TensorView& global, std::int64_t begin, const TensorView& local);
// global rows [begin, begin + local.seq) = local, each element rounded once to global's dtype.
void scatter_rows(const TensorView& local, const TensorView& global, std::int64_t begin);
// acc += part, elementwise in float32; acc is float32.
void add_rows(const TensorView& acc, const TensorView& part);

// L's rows [begin, begin + rows) of a (B, H, S) logsumexp, into a (B, H, rows) one, and back.
void gather_lse(const float* global, std::int64_t B, std::int64_t H, std::int64_t S,
                std::int64_t begin, std::int64_t rows, float* local);
void scatter_lse(const float* local, std::int64_t rows, float* global, std::int64_t B,
                 std::int64_t H, std::int64_t S, std::int64_t begin);

// Where the two key/value chunks of one owner lie in a message: X_0, Y_0, X_1, Y_1, each
// (B, chunk length, H_kv, d) in `dtype`, for (X, Y) = (K, V) or (dK, dV).
class BlockLayout {
 public:
  BlockLayout(const Problem& p, const Zigzag& keys, int owner, DType dtype);
  std::size_t bytes() const { return bytes_; }
  std::int64_t chunk_begin(int slot) const { return begin_[static_cast<std::size_t>(slot)]; }
  std::int64_t chunk_length(int slot) const { return length_[static_cast<std::size_t>(slot)]; }
  // which = 0: K (or dK), 1: V (or dV).
  TensorView view(std::byte* base, int slot, int which) const;

 private:
  std::int64_t B_, H_kv_, d_;
  DType dtype_;
  std::array<std::int64_t, 2> begin_{}, length_{};
  std::size_t bytes_ = 0;
};

// The largest message over the R owners' blocks: the size of a buffer that holds any of them.
std::size_t largest_block_bytes(const Problem& p, const Zigzag& keys, DType dtype);

}  // namespace flashref::ring::detail
