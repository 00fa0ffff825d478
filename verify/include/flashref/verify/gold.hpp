// The gold reference (reference/gold.hpp: double arithmetic on the exact inputs) for a
// ProblemData, in the same canonical layout as every TensorSet.
#pragma once

#include "flashref/verify/problem_data.hpp"
#include "flashref/verify/tensor_set.hpp"

namespace flashref::verify {

// O and L; with `backward` also dQ, dK and dV. L is -inf for fully masked rows.
TensorSet compute_gold(const ProblemData& data, bool backward);

}  // namespace flashref::verify
