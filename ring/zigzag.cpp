#include "flashref/ring/zigzag.hpp"

#include <string>

#include "flashref/error.hpp"

namespace flashref::ring {

Zigzag::Zigzag(std::int64_t S, int ranks) : S_(S), ranks_(ranks) {
  if (ranks < 1) throw InvalidArgument("ranks", "must be >= 1, got " + std::to_string(ranks));
  if (S < 1) throw InvalidArgument("S", "sequence length must be >= 1, got " + std::to_string(S));
}

std::int64_t Zigzag::chunk_begin(int c) const {
  const std::int64_t n = chunk_count();
  const std::int64_t base = S_ / n, extra = S_ % n;
  // Chunks 0 .. extra-1 hold base + 1 positions, the rest base.
  return c * base + (c < extra ? c : extra);
}

std::int64_t Zigzag::chunk_end(int c) const {
  return chunk_begin(c + 1);
}

std::int64_t Zigzag::length_of(int rank) const {
  const auto chunks = chunks_of(rank);
  return chunk_length(chunks[0]) + chunk_length(chunks[1]);
}

}  // namespace flashref::ring
