#include "shard.hpp"

#include <algorithm>
#include <cstring>

namespace flashref::ring::detail {

namespace {

// dst row (b, s_dst, h) = src row (b, s_src, h), bytes as they are (same dtype).
void copy_row(const TensorView& src, std::int64_t b, std::int64_t s_src, std::int64_t h,
              const TensorView& dst, std::int64_t s_dst) {
  const std::size_t elem = dtype_size(src.dtype);
  std::memcpy(
      static_cast<std::byte*>(dst.data) + dst.offset(b, s_dst, h) * static_cast<std::int64_t>(elem),
      static_cast<const std::byte*>(src.data) +
          src.offset(b, s_src, h) * static_cast<std::int64_t>(elem),
      static_cast<std::size_t>(src.dim) * elem);
}

}  // namespace

void gather_rows(const TensorView& global, std::int64_t begin, const TensorView& local) {
  if (global.dtype == local.dtype) {  // no conversion: whole rows
    for (std::int64_t b = 0; b < local.batch; ++b)
      for (std::int64_t s = 0; s < local.seq; ++s)
        for (std::int64_t h = 0; h < local.heads; ++h) copy_row(global, b, begin + s, h, local, s);
    return;
  }
  for (std::int64_t b = 0; b < local.batch; ++b)
    for (std::int64_t s = 0; s < local.seq; ++s)
      for (std::int64_t h = 0; h < local.heads; ++h)
        for (std::int64_t i = 0; i < local.dim; ++i)
          local.store(b, s, h, i, global.load(b, begin + s, h, i));
}

void scatter_rows(const TensorView& local, const TensorView& global, std::int64_t begin) {
  if (local.dtype == global.dtype) {  // no rounding: whole rows
    for (std::int64_t b = 0; b < local.batch; ++b)
      for (std::int64_t s = 0; s < local.seq; ++s)
        for (std::int64_t h = 0; h < local.heads; ++h) copy_row(local, b, s, h, global, begin + s);
    return;
  }
  for (std::int64_t b = 0; b < local.batch; ++b)
    for (std::int64_t s = 0; s < local.seq; ++s)
      for (std::int64_t h = 0; h < local.heads; ++h)
        for (std::int64_t i = 0; i < local.dim; ++i)
          global.store(b, begin + s, h, i, local.load(b, s, h, i));
}

void add_rows(const TensorView& acc, const TensorView& part) {
  for (std::int64_t b = 0; b < acc.batch; ++b)
    for (std::int64_t s = 0; s < acc.seq; ++s)
      for (std::int64_t h = 0; h < acc.heads; ++h) {
        float* row = static_cast<float*>(acc.data) + acc.offset(b, s, h);
        for (std::int64_t i = 0; i < acc.dim; ++i) row[i] += part.load(b, s, h, i);
      }
}

void gather_lse(const float* global, std::int64_t B, std::int64_t H, std::int64_t S,
                std::int64_t begin, std::int64_t rows, float* local) {
  for (std::int64_t bh = 0; bh < B * H; ++bh)
    for (std::int64_t s = 0; s < rows; ++s) local[bh * rows + s] = global[bh * S + begin + s];
}

void scatter_lse(const float* local, std::int64_t rows, float* global, std::int64_t B,
                 std::int64_t H, std::int64_t S, std::int64_t begin) {
  for (std::int64_t bh = 0; bh < B * H; ++bh)
    for (std::int64_t s = 0; s < rows; ++s) global[bh * S + begin + s] = local[bh * rows + s];
}

BlockLayout::BlockLayout(const Problem& p, const Zigzag& keys, int owner, DType dtype)
    : B_(p.B), H_kv_(p.H_kv), d_(p.d), dtype_(dtype) {
  const auto chunks = keys.chunks_of(owner);
  for (std::size_t slot = 0; slot < 2; ++slot) {
    begin_[slot] = keys.chunk_begin(chunks[slot]);
    length_[slot] = keys.chunk_length(chunks[slot]);
    bytes_ += 2 * static_cast<std::size_t>(B_ * length_[slot] * H_kv_ * d_) * dtype_size(dtype);
  }
}

TensorView BlockLayout::view(std::byte* base, int slot, int which) const {
  const std::size_t elem = dtype_size(dtype_);
  std::size_t offset = 0;
  for (int s = 0; s < slot; ++s)
    offset +=
        2 * static_cast<std::size_t>(B_ * length_[static_cast<std::size_t>(s)] * H_kv_ * d_) * elem;
  const std::int64_t len = length_[static_cast<std::size_t>(slot)];
  offset +=
      static_cast<std::size_t>(which) * static_cast<std::size_t>(B_ * len * H_kv_ * d_) * elem;
  return bshd_view(base + offset, dtype_, B_, len, H_kv_, d_);
}

std::size_t largest_block_bytes(const Problem& p, const Zigzag& keys, DType dtype) {
  std::size_t most = 0;
  for (int owner = 0; owner < keys.ranks(); ++owner)
    most = std::max(most, BlockLayout(p, keys, owner, dtype).bytes());
  return most;
}

}  // namespace flashref::ring::detail
