// The "reference" backend: naive attention that materializes S and P, computed the way a
// real low-precision kernel computes it (the *baseline* of docs/verification.md):
//   forward   inputs as stored, float32 arithmetic: S = scale * Q K^T, softmax with the row max
//             subtracted, P rounded to the input dtype before O = P V, O rounded to the output
//             dtype, L = m + log(l) in float32 (-inf for fully masked rows, whose O is 0).
//   backward  the recomputation equations (13)-(19), untiled, in float32, from what every
//             backward is given: D = rowsum(dO * O) from the stored O (params.o, in the input
//             dtype) and P = exp(S - L) from the stored float32 L (params.lse), S recomputed
//             from Q and K; dP = dO V^T, dS = P * (dP - D) with the float32 P; P and dS rounded
//             to the input dtype before dV = P^T dO, dQ = scale * dS K, dK = scale * dS^T Q;
//             gradients rounded to grad_dtype on store, dK and dV summed over each group in
//             float32 first. A row with L = -inf (it sees no key) gets P = 0 and zero dQ.
//             The rounding of O and L is part of the error a correct backward cannot avoid,
//             so pass the O and L that the backward being judged received: the baseline's own,
//             or a candidate's (verify/'s run_backward_from, when that candidate's O and L
//             passed).
//   TF32      with options.allow_tf32 and f32 inputs, every matmul operand is rounded to TF32
//             (round_to_tf32 in tf32.hpp), modelling float32 tensor-core matmuls.
// Memory: the inputs in float32 plus a few S_q x S_k float32 matrices per OpenMP thread;
// threads work on (batch, head) pairs (options.num_threads; 0: OpenMP's default) and the result
// does not depend on their number. Validates first and writes nothing on error.
#pragma once

#include <memory>

#include "flashref/backend.hpp"

namespace flashref::reference {

std::unique_ptr<Backend> make_backend();

}  // namespace flashref::reference
