// The rows on which nccl_ring_attention compares the ring with the single-GPU run, and the
// comparison. A whole problem at S = 128k..256k has no float64 gold (the gold of dK, dV needs
// every row's L: O(S^2 d) in double), so the ring is checked against the cuda backend's run of
// the whole problem on one GPU, on sampled rows, by the bounds docs/ring.md derives.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashref/ring/zigzag.hpp"

namespace flashref::ring::sampled {

// Positions of the sequence to compare: the first and last row of every zigzag chunk (where a
// wrong offset or a lost block shows first) and `random` more drawn from `seed`, sorted, unique.
std::vector<std::int64_t> sample_rows(const Zigzag& z, int random, std::uint64_t seed);

// The rank that holds position s under zigzag sharding.
int owner_of(const Zigzag& z, std::int64_t s);

// One tensor's comparison on the sampled rows: the ring's values x against the single GPU's y.
struct Comparison {
  std::string tensor;
  double max_abs = 0;   // max |x - y|
  double rel_norm = 0;  // ||x - y||_2 / ||y||_2 (0 when both are 0)
  double bound = 0;     // on rel_norm, or on max_abs for L
  bool on_max_abs = false;
  bool finite = true;  // no NaN or infinity in x or y (L's -inf of fully masked rows aside)
  bool passed() const { return finite && (on_max_abs ? max_abs : rel_norm) <= bound; }
};
Comparison compare(const std::string& tensor, const std::vector<float>& ring,
                   const std::vector<float>& single, double bound, bool on_max_abs);

// {"tensor": "O", "max_abs": ..., "rel_norm": ..., "bound": ..., "passed": true}
std::string to_json(const Comparison& c);

}  // namespace flashref::ring::sampled
