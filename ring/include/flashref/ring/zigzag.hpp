// Zigzag sharding: how a sequence is split over R ranks so that a causal mask gives every rank
// the same work. The sequence is cut into 2R chunks of near-equal length (the first S mod 2R
// chunks one longer); rank r holds chunks r and 2R-1-r. Under a causal mask chunk c of queries
// attends to c + 1 chunks of keys, so rank r attends (r + 1) + (2R - r) = 2R + 1 chunk pairs,
// the same for every rank; contiguous shards would give rank R-1 about 2R - 1 times rank 0's.
// Queries and keys are sharded alike (each by its own length), and chunks may be empty when
// S < 2R.
#pragma once

#include <array>
#include <cstdint>

namespace flashref::ring {

class Zigzag {
 public:
  // Throws InvalidArgument("ranks", ...) unless ranks >= 1, ("S", ...) unless S >= 1.
  Zigzag(std::int64_t S, int ranks);

  int ranks() const { return ranks_; }
  int chunk_count() const { return 2 * ranks_; }
  std::int64_t chunk_begin(int c) const;
  std::int64_t chunk_end(int c) const;
  std::int64_t chunk_length(int c) const { return chunk_end(c) - chunk_begin(c); }
  // The chunks rank r holds, in sequence order: {r, 2R - 1 - r}.
  std::array<int, 2> chunks_of(int rank) const { return {rank, 2 * ranks_ - 1 - rank}; }
  // Positions rank r holds: the sum of its chunks' lengths.
  std::int64_t length_of(int rank) const;

 private:
  std::int64_t S_;
  int ranks_;
};

}  // namespace flashref::ring
